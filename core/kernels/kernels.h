// Kernel entry points used by core/ops. Everything above this header is ISA-agnostic; the
// implementations choose a path (scalar reference, AVX2+FMA, AVX-512, NEON) at one dispatch point
// (dispatch.cpp). Every float entry has a `_ref` twin with the same signature in ref.cpp: the
// specification, the fallback and the test oracle. float64 overloads always take the reference
// path (they exist for gradient checks, not speed).
//
// Shape legend (all buffers are dense, row-major, in elements; no aliasing unless stated):
//   GEMM        C[M, N] (+)= A[M, K] · B[K, N]; A and B are addressed by a row stride and a column
//               stride, so transposed views (Aᵀ, Bᵀ) need no copy.
//   rows, cols  a 2-D view [rows, cols] of a contiguous buffer; "row" ops work along cols.
//   n           number of elements of a flat buffer.
// Outputs may alias their same-shaped input (out == a) for the elementwise ops, exp, gelu_forward,
// masked_fill and softmax_rows, and the incoming gradient for gelu_backward (dx == dout) and
// softmax_rows_backward (dx == dy); they may not alias anything else.
//
// Threads: the float entries split large problems over the pool in core/threadpool.h
// (TAPEGRAD_THREADS, tg::set_num_threads). Results are bit-identical whatever the thread count:
// GEMM splits only along M or N (never K), and the other ops split only across independent
// elements or rows (layernorm_backward and sum_cols, which reduce over rows, stay on one thread).
//
// Paths: TAPEGRAD_ISA=scalar|avx2|avx512|neon forces one (an unknown name throws
// std::invalid_argument, a path this CPU or binary cannot run throws std::runtime_error, both on
// the first kernel call); otherwise the fastest available path is used.
//
// GEMM block sizes: derived at start-up from the CPU's caches (core/kernels/gemm_blocking.cpp);
// TAPEGRAD_GEMM_BLOCKING=MC,KC,NC overrides them (malformed: std::invalid_argument on the first
// GEMM). KC sets where a K sum is split, so float results are the same for a given machine (its
// caches), path and shape, whatever the thread count; another machine may round differently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg::kernels {

// ---- GEMM ---------------------------------------------------------------------------------------
// C = A·B when beta == 0 (C is not read, NaNs in it are ignored), C = C + A·B when beta == 1
// (gradient accumulation). Other betas scale C first. C is addressed as C[i*ldc + j]; it must not
// alias A or B.
void sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
           const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
           const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc);

// Strided batched GEMM (attention heads, e.g. Q·Kᵀ per (batch, head)): for b in [0, batch),
//   C + b*strideC = (A + b*strideA) · (B + b*strideB)   with the strides/ldc of sgemm.
// Splits over the batch when it has enough entries, otherwise over M/N inside each GEMM.
void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t strideA,
                   int64_t rsA, int64_t csA, const float* B, int64_t strideB, int64_t rsB,
                   int64_t csB, float beta, float* C, int64_t strideC, int64_t ldc);

// ---- elementwise binary ops ---------------------------------------------------------------------
enum class BinOp { add, sub, mul, div };
// out[i] = a[i] op b[i]                    (contiguous, n elements)
void binary(BinOp op, int64_t n, const float* a, const float* b, float* out);
// out[r, c] = a[r, c] op b[c]              (row broadcast: a, out are [rows, cols], b is [cols])
void binary_rowbcast(BinOp op, int64_t rows, int64_t cols, const float* a, const float* b,
                     float* out);
// out[i] = a[i] op s                       (scalar right operand)
void binary_scalar(BinOp op, int64_t n, const float* a, float s, float* out);

// ---- exp ----------------------------------------------------------------------------------------
// y[i] = exp(x[i]). Max relative error 2e-7 against std::exp (in double) for normal results
// (measured 8e-8 on AVX2/AVX-512/NEON); denormal results (x < -87.34) are within one denormal
// ulp, exp(x < -103.9) and exp(-inf) are 0, x > 88.72 gives +inf, NaN stays NaN.
// Valid range: all floats. The SIMD paths use a Cephes-style polynomial (simd_generic.h).
void exp(int64_t n, const float* x, float* y);

// ---- softmax over rows --------------------------------------------------------------------------
// y[r, :] = exp(x[r, :] - max) / sum. A row that is all -inf gives a row of NaN (as PyTorch).
void softmax_rows(int64_t rows, int64_t cols, const float* x, float* y);
// From the saved output y: dx[r, :] = y[r, :] ⊙ (dy[r, :] - <y[r, :], dy[r, :]>). Overwrites dx.
void softmax_rows_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx);

// ---- softmax statistics, for cross-entropy ------------------------------------------------------
// mx[r] = max_c x[r, c] and sum[r] = sum_c exp(x[r, c] - mx[r]): softmax_rows' first two passes
// without storing the exponentials (an all -inf row gives mx = -inf and sum = NaN).
void softmax_stats_rows(int64_t rows, int64_t cols, const float* x, float* mx, float* sum);
// out[r, c] = exp(x[r, c] - mx[r]) * scale[r], with softmax_rows' exp. out may alias x.
void exp_rows_scaled(int64_t rows, int64_t cols, const float* x, const float* mx,
                     const float* scale, float* out);

// ---- masked_fill --------------------------------------------------------------------------------
// x, out are [rows, cols]; mask is [mask_rows, cols] and row r uses mask row r % mask_rows, so a
// (T, T) causal mask broadcasts over (B, H, T, T) with mask_rows = T.
// out[r, c] = mask[r % mask_rows, c] ? value : x[r, c].
void masked_fill(int64_t rows, int64_t cols, const float* x, const uint8_t* mask, int64_t mask_rows,
                 float value, float* out);

// ---- LayerNorm (llm.c / the book: eps inside the sqrt, biased variance) -----------------------
// x, out are [rows, C]; weight, bias are [C]; mean, rstd are [rows] (saved for backward).
// out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps).
void layernorm_forward(int64_t rows, int64_t C, const float* x, const float* weight,
                       const float* bias, float eps, float* out, float* mean, float* rstd);
// ACCUMULATES (+=) into dx [rows, C], dweight [C] and dbias [C], like llm.c.
void layernorm_backward(int64_t rows, int64_t C, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, float* dx,
                        float* dweight, float* dbias);

// ---- GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ---------------------------
void gelu_forward(int64_t n, const float* x, float* out);
// dx = dout * gelu'(x). Overwrites dx.
void gelu_backward(int64_t n, const float* x, const float* dout, float* dx);

// ---- row reductions -----------------------------------------------------------------------------
// out[r] = sum_c x[r, c] (x is [rows, cols], out is [rows]).
void sum_rows(int64_t rows, int64_t cols, const float* x, float* out);
// out[r] = max_c x[r, c]; -inf for an empty row; NaN if the row holds a NaN.
void max_rows(int64_t rows, int64_t cols, const float* x, float* out);
// out[c] = sum_r x[r, c] (bias gradients; out is [cols]). Overwrites out.
void sum_cols(int64_t rows, int64_t cols, const float* x, float* out);

// ---- matrix · vector: a linear layer on one row (each step of KV-cache generation) -----------
// y[r] = b[r] + sum_c w[r*ldw + c] * x[c] for r < rows (b == nullptr: no bias). w streams from
// memory once; the threads split the rows.
void gemv_rows(int64_t rows, int64_t cols, const float* w, int64_t ldw, const float* x,
               const float* b, float* y);

// ---- AdamW (PyTorch semantics), one step over n parameters -------------------------------------
// step is the 1-based step count after increment. In order, per element (torch.optim.AdamW):
//   p *= 1 - lr*wd;  m += (1-b1)*(g - m);  v = b2*v + (1-b2)*g*g;
//   p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps)
// Bit-identical on every path (no FMA contraction, correctly rounded sqrt and division).
void adamw(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step);

// ---- MT19937 and Bernoulli draws (the bulk paths of core/rng.cpp) -------------------------------
// Integer kernels, so every path gives the same bits; they run on the calling thread (a generator
// is sequential). The vector paths are the scalar loops, vectorized by the compiler per ISA.
// One generation step of std::mt19937 over its 624-word state, in place.
void mt19937_twist(uint32_t* state);
// MT19937's tempering of one state word: the one definition Generator::random() and the temper
// kernels share.
constexpr uint32_t mt19937_temper_word(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9D2C5680u;
  y ^= (y << 15) & 0xEFC60000u;
  return y ^ (y >> 18);
}
// out[i] = mt19937_temper_word(in[i]); out may alias in.
void mt19937_temper(int64_t n, const uint32_t* in, uint32_t* out);
// Element i reads the W64 draw (w[2i] << 32 | w[2i+1]) and keeps its low 53 bits r:
// out[i] = r < limit ? kept : dropped. With limit = ceil(p * 2^53) that is U53 < p (rng.h §4).
void bernoulli_words(int64_t n, const uint32_t* w, uint64_t limit, float kept, float dropped,
                     float* out);

// ---- scalar references (same signatures) --------------------------------------------------------
void sgemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
               const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void sgemm_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const float* B, int64_t strideB,
                       int64_t rsB, int64_t csB, float beta, float* C, int64_t strideC,
                       int64_t ldc);
void binary_ref(BinOp op, int64_t n, const float* a, const float* b, float* out);
void binary_rowbcast_ref(BinOp op, int64_t rows, int64_t cols, const float* a, const float* b,
                         float* out);
void binary_scalar_ref(BinOp op, int64_t n, const float* a, float s, float* out);
void exp_ref(int64_t n, const float* x, float* y);
void softmax_rows_ref(int64_t rows, int64_t cols, const float* x, float* y);
void softmax_rows_backward_ref(int64_t rows, int64_t cols, const float* y, const float* dy,
                               float* dx);
void softmax_stats_rows_ref(int64_t rows, int64_t cols, const float* x, float* mx, float* sum);
void exp_rows_scaled_ref(int64_t rows, int64_t cols, const float* x, const float* mx,
                         const float* scale, float* out);
void masked_fill_ref(int64_t rows, int64_t cols, const float* x, const uint8_t* mask,
                     int64_t mask_rows, float value, float* out);
void layernorm_forward_ref(int64_t rows, int64_t C, const float* x, const float* weight,
                           const float* bias, float eps, float* out, float* mean, float* rstd);
void layernorm_backward_ref(int64_t rows, int64_t C, const float* dout, const float* x,
                            const float* weight, const float* mean, const float* rstd, float* dx,
                            float* dweight, float* dbias);
void gelu_forward_ref(int64_t n, const float* x, float* out);
void gelu_backward_ref(int64_t n, const float* x, const float* dout, float* dx);
void sum_rows_ref(int64_t rows, int64_t cols, const float* x, float* out);
void gemv_rows_ref(int64_t rows, int64_t cols, const float* w, int64_t ldw, const float* x,
                   const float* b, float* y);
void max_rows_ref(int64_t rows, int64_t cols, const float* x, float* out);
void sum_cols_ref(int64_t rows, int64_t cols, const float* x, float* out);
void adamw_ref(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
               float beta2, float eps, float weight_decay, int64_t step);
void mt19937_twist_ref(uint32_t* state);
void mt19937_temper_ref(int64_t n, const uint32_t* in, uint32_t* out);
void bernoulli_words_ref(int64_t n, const uint32_t* w, uint64_t limit, float kept, float dropped,
                         float* out);

// ---- float64: always the reference path ---------------------------------------------------
void binary(BinOp op, int64_t n, const double* a, const double* b, double* out);
void binary_rowbcast(BinOp op, int64_t rows, int64_t cols, const double* a, const double* b,
                     double* out);
void binary_scalar(BinOp op, int64_t n, const double* a, double s, double* out);
void exp(int64_t n, const double* x, double* y);
void softmax_rows(int64_t rows, int64_t cols, const double* x, double* y);
void softmax_rows_backward(int64_t rows, int64_t cols, const double* y, const double* dy,
                           double* dx);
void softmax_stats_rows(int64_t rows, int64_t cols, const double* x, double* mx, double* sum);
void exp_rows_scaled(int64_t rows, int64_t cols, const double* x, const double* mx,
                     const double* scale, double* out);
void masked_fill(int64_t rows, int64_t cols, const double* x, const uint8_t* mask,
                 int64_t mask_rows, double value, double* out);
void layernorm_forward(int64_t rows, int64_t C, const double* x, const double* weight,
                       const double* bias, double eps, double* out, double* mean, double* rstd);
void layernorm_backward(int64_t rows, int64_t C, const double* dout, const double* x,
                        const double* weight, const double* mean, const double* rstd, double* dx,
                        double* dweight, double* dbias);
void gelu_forward(int64_t n, const double* x, double* out);
void gelu_backward(int64_t n, const double* x, const double* dout, double* dx);
void sum_rows(int64_t rows, int64_t cols, const double* x, double* out);
void max_rows(int64_t rows, int64_t cols, const double* x, double* out);
void sum_cols(int64_t rows, int64_t cols, const double* x, double* out);

// ---- fused scaled-dot-product attention (attention.cpp: FlashAttention-2 on the CPU) ----------
// `batch` independent problems n (a query, key, value and mask matrix each). Per problem, with
// q [L, E], k [S, E], v [S, Ev]:
//   x[i, j]   = scale · q[i]·k[j] + mask[i, j]   (mask additive, optional; -inf removes a key)
//               and x[i, j] = -inf for j > i when causal (PyTorch's is_causal: tril, top-left)
//   P[i, j]   = exp(x[i, j] − lse[i]),  lse[i] = log Σ_j exp(x[i, j])
//   out[i]    = Σ_j P[i, j] · keep[i, j] · v[j]   keep = keep_scale or 0 by the dropout bits, else
//   1
// A row that no key reaches (every x = -inf) gives out = 0, lse = -inf and zero gradients, as
// PyTorch 2's math path (its _safe_softmax) does.
// Forward: query blocks × key blocks with an online softmax; key blocks past the diagonal are
// skipped; only out and lse are stored. Backward: D = rowsum(dout ∘ out), P recomputed from lse,
// then dv, dS = P ∘ (dP − D), dq, dk, block by block: nothing of size L × S is ever stored.
// Threads: the forward splits over (problem, query block), the backward over problems; every
// element is computed by the same operations whoever runs it, so results are bit-identical for
// any thread count. Block sizes depend on the shapes and the ISA's micro-tile only.
//
// Operands: matrix n of a batch starts at base + off[n], its rows are ld elements apart and its
// columns adjacent. The mask is read through strides, as PyTorch broadcasts attn_mask to
// (..., L, S): off[n] may repeat (batch dims it broadcasts over), ld may be 0 (one row for every
// query), and its columns are mask_cs apart, 1 or 0 (one value per row for every key).
template <class T>
struct AttnOperand {
  T* base = nullptr;
  int64_t ld = 0;
  const int64_t* off = nullptr;  // batch entries
  T* at(int64_t n, int64_t row) const { return base + off[n] + row * ld; }
};
template <class T>
struct AttnProblem {
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  T scale = 1;
  bool causal = false;
  AttnOperand<const T> q, k, v;
  AttnOperand<const T> mask;  // base == nullptr: no mask
  int64_t mask_cs = 1;
  // Dropout: bit (n·L + i)·S + j of keep_bits (bit b in word b / 64, from the least significant
  // bit) set = kept, as the composite's mask drawn over a [batch, L, S] tensor; nullptr: none.
  const uint64_t* keep_bits = nullptr;
  T keep_scale = 1;
};
// Writes out [L, Ev] per problem and lse[n·L + i].
void sdpa_forward(const AttnProblem<float>& p, AttnOperand<float> out, float* lse);
void sdpa_forward(const AttnProblem<double>& p, AttnOperand<double> out, double* lse);
// From the forward's out and lse and the gradient dout: overwrites dq [L, E], dk [S, E] and
// dv [S, Ev] of every problem (none may alias another or an input).
void sdpa_backward(const AttnProblem<float>& p, AttnOperand<const float> out,
                   AttnOperand<const float> dout, const float* lse, AttnOperand<float> dq,
                   AttnOperand<float> dk, AttnOperand<float> dv);
void sdpa_backward(const AttnProblem<double>& p, AttnOperand<const double> out,
                   AttnOperand<const double> dout, const double* lse, AttnOperand<double> dq,
                   AttnOperand<double> dk, AttnOperand<double> dv);
// The reference: the formulas above row by row (O(S) memory per row), single-threaded; the
// float64 path and the oracle the fused kernels are tested against.
void sdpa_forward_ref(const AttnProblem<float>& p, AttnOperand<float> out, float* lse);
void sdpa_backward_ref(const AttnProblem<float>& p, AttnOperand<const float> out,
                       AttnOperand<const float> dout, const float* lse, AttnOperand<float> dq,
                       AttnOperand<float> dk, AttnOperand<float> dv);

// ---- dispatch -----------------------------------------------------------------------------------
// Paths compiled into this binary AND supported by this CPU, slowest first ("scalar" always).
std::vector<std::string> available_isas();
// The active path. Chosen once: TAPEGRAD_ISA if set, else the fastest available.
std::string active_isa();
// Switch the active path (tests, benchmarks). Throws std::invalid_argument for an unknown name
// and std::runtime_error for a known path this binary/CPU cannot run.
void set_isa(const std::string& name);
// Re-reads TAPEGRAD_ISA (unset or empty: the fastest path), with set_isa's errors; for tests.
void set_isa_from_env();

}  // namespace tg::kernels
