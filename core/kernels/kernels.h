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
//   ld          where an entry takes one: rows ld >= cols elements apart (the rest of a row unread)
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
// Paths: TAPEGRAD_ISA=scalar|avx2|avx512|avx512_bf16|neon forces one (an unknown name throws
// std::invalid_argument, a path this CPU or binary cannot run throws std::runtime_error, both on
// the first kernel call); otherwise the fastest available path is used. avx512_bf16 is avx512
// plus the AVX512-BF16 unit for the bf16 GEMM (its float kernels are avx512's); the other paths
// compute the bf16 GEMM by widening to float32 (the same bits, not faster).
//
// GEMM block sizes: derived at start-up from the CPU's caches (core/kernels/gemm_blocking.cpp);
// TAPEGRAD_GEMM_BLOCKING=MC,KC,NC overrides them (malformed: std::invalid_argument on the first
// GEMM). KC sets where a K sum is split, so float results are the same for a given machine (its
// caches), path and shape, whatever the thread count; another machine may round differently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/mt19937.h"

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
// One row of A (M == 1, beta 0, A's columns adjacent; each KV-cache step's q·kᵀ and w·V per head)
// with B row-major or stored transposed: B is read in place, not packed (gemm_row.cpp), with the
// same bits as the packed route; the threads split the batch and the columns of C.
void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t strideA,
                   int64_t rsA, int64_t csA, const float* B, int64_t strideB, int64_t rsB,
                   int64_t csB, float beta, float* C, int64_t strideC, int64_t ldc);

// ---- bfloat16 -----------------------------------------------------------------------------------
// A bfloat16 is held as its 16 bits (uint16_t): the top half of a float32's.
// float32 → bfloat16 as PyTorch's c10::BFloat16 rounds (round_to_nearest_even): to nearest, ties
// to even, on the bits (a float32 denormal may become a bf16 denormal; past bf16's largest finite
// value, ±inf); every NaN becomes 0x7FC0, the quiet NaN c10 returns (sign and payload dropped).
void f32_to_bf16(int64_t n, const float* x, uint16_t* out);
// bfloat16 → float32: exact (the 16 bits become the top half; denormals and NaNs kept).
void bf16_to_f32(int64_t n, const uint16_t* x, float* out);
// float32 rounded to bfloat16 and widened back: bf16_to_f32(f32_to_bf16(x)) in one pass over
// memory (x == out allowed). What an autocast cast's backward makes of a bf16 op's gradient.
void bf16_round(int64_t n, const float* x, float* out);
// adamw (vector_kernels.def) and then f32_to_bf16 of the updated p into p_bf16, a chunk at a
// time, so that each chunk is rounded while it is still in L1: the bf16 copy of a weight that
// autocast reads costs one write, not another pass over the float32 weight. The same bits as
// the two calls one after the other.
void adamw_to_bf16(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
                   float beta2, float eps, float weight_decay, int64_t step, uint16_t* p_bf16);

// C[M, N] (+)= A[M, K] · B[K, N] with A and B in bfloat16 (strides as sgemm's, so transposed
// views need no copy) and C in float32. Every path computes each C element the way the
// AVX512-BF16 unit's vdpbf16ps does (as measured on Zen 5, avx512_bf16.cpp), so all paths give
// the same bits, whatever the blocking or the thread count:
//   acc = 0 (beta == 0; C is not read) or beta·C[i, j] (a denormal reads as zero of its sign)
//   for q over the pairs of k (an odd K gets a zero a(K)·b(K) as its last pair's odd half):
//     acc = R(acc + a(2q+1)·b(2q+1));  acc = R(acc + a(2q)·b(2q))
//   C[i, j] = acc
// where a bf16 denormal reads as zero of its sign, each product is exact, and R rounds the exact
// sum to nearest even at float32's precision, then flushes a result below 2^-126 in magnitude
// (tiny after that rounding) to zero of its sign. K == 0: C = beta·C (C is scaled, not flushed).
// A NaN in gives a NaN out, of no specified payload.
void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
               const uint16_t* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
// The batched form, as sgemm_batched: C + b*strideC = (A + b*strideA) · (B + b*strideB), with
// its route for one row of A and B read in place (the same chains: gemv_rows_bf16's kernel for a
// B stored transposed, the bf16 axpys of gemm_bf16_row_axpys_ref for a row-major one).
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                       int64_t strideC, int64_t ldc);

// What a bf16 GEMM leaves in its C (GemmBf16Out), for the ops that round its float32 sums to
// bfloat16 (a bf16 matmul's output, an autocast linear's gradients):
//   f32          the float32 sums, as above
//   f32_rounded  those sums rounded as f32_to_bf16 rounds, widened back: bf16_round(the sums)
//   bf16         their bf16 bits, f32_to_bf16(the sums); beta 1 starts from the bf16 C widened
// The same bits as the float32 GEMM followed by that rounding (the reference computes it so), on
// every path and for any thread count; the kernels round each tile as it receives its last K
// block, so the float32 C is never written and read back in a pass of its own. A bf16 C takes
// beta 0 or 1 only (std::invalid_argument otherwise: its other betas would round C first).
enum class Bf16Out : uint8_t { f32, f32_rounded, bf16 };
struct GemmBf16Out {
  Bf16Out mode = Bf16Out::f32;
  float* f32 = nullptr;      // f32, f32_rounded: C[i*ld + j]
  uint16_t* bf16 = nullptr;  // bf16: C[i*ld + j]
  int64_t ld = 0;
  // The same C moved by off elements (a batch entry's).
  GemmBf16Out at(int64_t off) const {
    GemmBf16Out o = *this;
    if (o.f32 != nullptr) o.f32 += off;
    if (o.bf16 != nullptr) o.bf16 += off;
    return o;
  }
};
inline GemmBf16Out bf16_out_f32(float* C, int64_t ld, bool rounded) {
  return {rounded ? Bf16Out::f32_rounded : Bf16Out::f32, C, nullptr, ld};
}
inline GemmBf16Out bf16_out_bf16(uint16_t* C, int64_t ld) {
  return {Bf16Out::bf16, nullptr, C, ld};
}
void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
               const uint16_t* B, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C);
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C,
                       int64_t strideC);

// One row through a bf16 Linear (each step of bf16 KV-cache generation): y = x · wᵀ (+ b), with
// x [cols] and w [rows, cols] (row r at w + r*ldw) in bfloat16 and y [rows] in float32. Each y[r]
// is gemm_bf16's element for M = 1, i.e. gemm_bf16(1, rows, cols, x, cols, 1, w, 1, ldw,
// b ? 1 : 0, C, rows) with C = b beforehand: the chain above over the pairs of x and row r, from
// b[r] (read as the unit reads C: a denormal as zero of its sign) or +0. So a bf16 linear gives
// the same bits through this kernel or the GEMM, on every path, for any thread count (the threads
// split the rows). Unlike the GEMM, w is read once in place, unpacked: half of gemv_rows' bytes.
void gemv_rows_bf16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw, const uint16_t* x,
                    const float* b, float* y);

// The same y from w packed once into panels (a weight that many tokens read): each group of 16
// rows (the last padded with zero rows) holds its (cols + 1) / 2 pairs of k in order, a pair as
// 16 32-bit words, word i row i's two bf16 (k even low, k odd high; an odd cols pads a zero). The
// gemv then loads what the unit multiplies, 64 bytes at a time, with no transposes. Same bits as
// gemv_rows_bf16. Only the paths with gemv_packed_bf16_available() have the kernel; the others
// keep gemv_rows_bf16, which does not need panels.
int64_t gemv_bf16_panel_words(int64_t rows, int64_t cols);
void pack_gemv_bf16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw, uint32_t* panels);
bool gemv_packed_bf16_available();
void gemv_packed_bf16(int64_t rows, int64_t cols, const uint32_t* panels, const uint16_t* x,
                      const float* b, float* y);

enum class BinOp { add, sub, mul, div };

// The float32 scalars of one bf16 AdamW step (vector_kernels.def: adamw_bf16), as ATen receives
// them from torch.optim.AdamW: decay = 1 - lr*wd, w1 = 1 - beta1, b2 = beta2, w2 = 1 - beta2,
// bc2_sqrt = sqrt(1 - beta2^step), eps, step_size = -lr / (1 - beta1^step).
struct AdamWBf16 {
  float decay, w1, b2, w2, bc2_sqrt, eps, step_size;
};

// ---- the vector kernels: each one's contract is its entry in vector_kernels.def ---------------
// Declared from that list: the float entry (the active path), its scalar twin name_ref with the
// same signature, and for the TG_KERNEL entries a float64 overload (always the reference).
#define TG_T float
#define TG_KERNEL(name, params, args) \
  void name params;                   \
  void name##_ref params;
#define TG_KERNEL_NO_F64(name, params, args) TG_KERNEL(name, params, args)
#include "core/kernels/vector_kernels.def"
#define TG_T double
#define TG_KERNEL(name, params, args) void name params;
#include "core/kernels/vector_kernels.def"

// ---- scalar references of the GEMM (same signatures) -------------------------------------------
void sgemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
               const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void sgemm_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const float* B, int64_t strideB,
                       int64_t rsB, int64_t csB, float beta, float* C, int64_t strideC,
                       int64_t ldc);

// ---- scalar references of the bfloat16 entries (same signatures) --------------------------------
void f32_to_bf16_ref(int64_t n, const float* x, uint16_t* out);
void bf16_to_f32_ref(int64_t n, const uint16_t* x, float* out);
void gemm_bf16_ref(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                   const uint16_t* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void gemm_bf16_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                           int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                           int64_t strideC, int64_t ldc);
// "The float32 GEMM, then the rounding": gemm_bf16_ref into a float32 C (for a bf16 C, its
// values widened), then f32_to_bf16_ref on every element.
void gemm_bf16_ref(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                   const uint16_t* B, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C);
void gemm_bf16_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                           int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta,
                           const GemmBf16Out& C, int64_t strideC);
void gemv_rows_bf16_ref(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                        const uint16_t* x, const float* b, float* y);
void gemv_packed_bf16_ref(int64_t rows, int64_t cols, const uint32_t* panels, const uint16_t* x,
                          const float* b, float* y);

// ---- scalar references of the batched GEMMs' route for one row of A (table.h: SgemmRow) -------
// c[j] (+)= Σ_p a[p]·B(p, j) for j < n, B(p, j) = b[j*ldb + p] (dots) or b[p*ldb + j] (axpys),
// in K blocks of kc, as table.h says; fused: each link one FMA (the SIMD paths), else the product
// rounded first (the scalar path).
void sgemm_row_ref(bool dots, bool fused, int64_t n, int64_t k, int64_t kc, const float* a,
                   const float* b, int64_t ldb, float* c, bool accumulate);
// gemm_bf16's chain for c[j] (+)= Σ_p a[p]·b[p*ldb + j], j < n, from c[j] (accumulate) or +0:
// gemm_bf16(1, n, k, a, k, 1, b, ldb, accumulate ? 1 : 0, c, n).
void gemm_bf16_row_axpys_ref(int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                             int64_t ldb, float* c, bool accumulate);

// ---- fused scaled-dot-product attention (attention.cpp: FlashAttention-2 on the CPU) ----------
// `batch` independent problems n (a query, key, value and mask matrix each). Per problem, with
// q [L, E], k [S, E], v [S, Ev]:
//   x[i, j]   = scale · q[i]·k[j] + mask[i, j]   (mask additive, optional; -inf removes a key)
//               and x[i, j] = -inf for j > i when causal (PyTorch's is_causal: tril, top-left)
//   P[i, j]   = exp(x[i, j] − lse[i]),  lse[i] = log Σ_j exp(x[i, j])
//   out[i]    = Σ_j P[i, j] · keep[i, j] · v[j]
//               keep[i, j] = keep_scale or 0 by the dropout bits; 1 without dropout
// A row that no key reaches (every x = -inf) gives out = 0, lse = -inf and zero gradients, as
// PyTorch 2's math path (its _safe_softmax) does.
// Forward: query blocks × key blocks with an online softmax; key blocks past the diagonal are
// skipped; only out and lse are stored. Backward: D = rowsum(dout ∘ out), P recomputed from lse,
// then dv, dS = P ∘ (dP − D), dq, dk, block by block: nothing of size L × S is ever stored.
// Threads: the forward splits over (problem, query block), the backward over problems; every
// element is computed by the same operations whoever runs it, so results are bit-identical for
// any thread count. Block sizes depend on the shapes and the ISA's micro-tile only.
// One query row (L == 1, not causal, no flex hook: each step of KV-cache generation) runs the same
// blocks with k and v read in place (no packing), giving the same bits (float32 and bfloat16).
//
// q, k, v, the mask, out and the gradients are each a MatrixBatch: matrix n starts at
// base + off[n], its rows are ld elements apart and its columns adjacent. The mask is read through
// strides, as PyTorch broadcasts attn_mask to (..., L, S): off[n] may repeat (batch dims it
// broadcasts over), ld may be 0 (one row for every query), and its columns are mask_cs apart, 1 or
// 0 (one value per row for every key).
template <class T>
struct MatrixBatch {
  T* base = nullptr;
  int64_t ld = 0;
  const int64_t* off = nullptr;  // one offset per matrix
  T* at(int64_t n, int64_t row) const { return base + off[n] + row * ld; }
};
// Flex attention's hook (core/ops/flex_attention.cpp): which keys of each tile take part and what
// becomes of their scores. The kernel asks tile() per (problem n, query block ib, key block jb) of
// its own tile grid (sdpa_tile_size()): an empty tile is skipped, a full one runs as plain
// attention unless rewrites_full (a score_mod), and the scores of any other tile go through
// rewrite() before the tile step, which then reads them as final scores x (scale 1, no mask), or,
// when rewrite() only removed keys, as S with the tile's scale.
// A partial tile's diag bounds its kept keys as a causal tile's diagonal does (kept (r, c) only
// where c <= r + diag, r and c counted from the tile's corner), so the kernel skips the
// micro-tiles past it as it does for is_causal.
enum class TileKind : uint8_t { empty = 0, partial = 1, full = 2 };
struct TileInfo {
  TileKind kind = TileKind::full;
  int64_t diag = 0;  // partial tiles only
};
struct AttnScoreMod {
  virtual ~AttnScoreMod() = default;
  bool rewrites_full = false;
  virtual TileInfo tile(int64_t n, int64_t ib, int64_t jb) const = 0;
  // s holds S = q·kᵀ of the tile at rows [i0, i0 + rows), keys [j0, j0 + cols), rows ld apart;
  // leaves x = score_mod(scale·S) there, or -inf where the key does not take part, and returns
  // true; grad, when not null (the backward), then receives dx/dS (0 where removed), with the same
  // layout. Or (no score_mod, scale > 0) only sets the removed keys' S to -inf and returns false:
  // the tile step then runs with the scale as usual, and grad is not written.
  virtual bool rewrite(int64_t n, int64_t i0, int64_t j0, int64_t rows, int64_t cols, float scale,
                       float* s, int64_t ld, float* grad) const = 0;
  // The same for one element, for the reference: x from the scaled score `scaled`, dx/dscaled in
  // *grad.
  virtual double element(int64_t n, int64_t i, int64_t j, double scaled, double* grad) const = 0;
};

// T: the elements of q, k and v; F: the scale, the mask and keep_scale (T but for bfloat16,
// whose problem keeps them in float32: AttnProblemBf16 below).
template <class T, class F = T>
struct AttnProblem {
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  F scale = 1;
  bool causal = false;
  MatrixBatch<const T> q, k, v;
  MatrixBatch<const F> mask;  // base == nullptr: no mask
  int64_t mask_cs = 1;
  // Dropout: bit (n·L + i)·S + j of keep_bits (bit b in word b / 64, from the least significant
  // bit) set = kept, as the composite's mask drawn over a [batch, L, S] tensor; nullptr: none.
  const uint64_t* keep_bits = nullptr;
  F keep_scale = 1;
  const AttnScoreMod* mod = nullptr;  // flex attention (not with causal); nullptr: none
};
// The fused kernel's tile (query rows br × keys bc) on the active path: the grid of TileKind.
struct AttnTileSize {
  int64_t br, bc;
};
AttnTileSize sdpa_tile_size();
// Writes out [L, Ev] per problem and lse[n·L + i].
void sdpa_forward(const AttnProblem<float>& p, MatrixBatch<float> out, float* lse);
void sdpa_forward(const AttnProblem<double>& p, MatrixBatch<double> out, double* lse);
// From the forward's out and lse and the gradient dout: overwrites dq [L, E], dk [S, E] and
// dv [S, Ev] of every problem (none may alias another or an input).
void sdpa_backward(const AttnProblem<float>& p, MatrixBatch<const float> out,
                   MatrixBatch<const float> dout, const float* lse, MatrixBatch<float> dq,
                   MatrixBatch<float> dk, MatrixBatch<float> dv);
void sdpa_backward(const AttnProblem<double>& p, MatrixBatch<const double> out,
                   MatrixBatch<const double> dout, const double* lse, MatrixBatch<double> dq,
                   MatrixBatch<double> dk, MatrixBatch<double> dv);
// The reference: the formulas above row by row (O(S) memory per row), single-threaded; the
// float64 path and the oracle the fused kernels are tested against.
void sdpa_forward_ref(const AttnProblem<float>& p, MatrixBatch<float> out, float* lse);
void sdpa_backward_ref(const AttnProblem<float>& p, MatrixBatch<const float> out,
                       MatrixBatch<const float> dout, const float* lse, MatrixBatch<float> dq,
                       MatrixBatch<float> dk, MatrixBatch<float> dv);

// ---- fused attention in bfloat16 (attention_bf16.cpp) ------------------------------------------
// q, k, v and out in bfloat16 (bits, as gemm_bf16's operands); the mask, the scale, keep_scale,
// lse and the gradients in float32. The formulas above, computed as PyTorch's CPU flash attention
// source computes a reduced floating type (2.6's build rounds q·kᵀ and P·v too), with the roundings
// to bfloat16 at these points only:
//   S  = q·kᵀ                 gemm_bf16's chain (float32), the bf16 operands as they are
//   P, m, l, lse              float32 (the active table's attn_fwd_tile, as the float32 kernel)
//   out = (bf16(P∘keep) · v) / l, rounded to bf16 once; O sums gemm_bf16's chain in float32
// Backward, D = rowsum(dout ∘ out) from the bf16 dout and out, in float32:
//   dP = dout·vᵀ (chain, float32);  P and dS = scale·P∘(dP∘keep − D) in float32 (attn_bwd_tile)
//   dv += bf16(P∘keep)ᵀ · dout,  dk += bf16(dS)ᵀ · q,  dq += bf16(dS) · k   (chains in float32)
//   dq, dk, dv are written in float32, each rounded to bfloat16's precision once at the end
//   (the caller narrows them to bf16 exactly, or keeps float32 for a float32 leaf under autocast).
// The threading contract is the float32 kernel's: the same bits for any thread count. The
// products are the same bits on every path (gemm_bf16's chain), the softmax is not: each path's
// attn_fwd_tile/attn_bwd_tile has its own exp and sum order, so paths differ in the last float32
// bits of P, and so in a bf16 rounding now and then. No flex attention (p.mod must be nullptr:
// std::invalid_argument; flex_attention itself takes float32 and float64 only).
using AttnProblemBf16 = AttnProblem<uint16_t, float>;
// Writes out [L, Ev] (bf16) per problem and lse[n·L + i].
void sdpa_forward_bf16(const AttnProblemBf16& p, MatrixBatch<uint16_t> out, float* lse);
// From the forward's out and lse and dout (bf16): overwrites dq, dk, dv (float32 holding bf16
// values) of every problem; none may alias another or an input.
void sdpa_backward_bf16(const AttnProblemBf16& p, MatrixBatch<const uint16_t> out,
                        MatrixBatch<const uint16_t> dout, const float* lse, MatrixBatch<float> dq,
                        MatrixBatch<float> dk, MatrixBatch<float> dv);
// The bf16 kernel's tile on the active path (AttnTileSize's grid, from the bf16 micro-tile).
AttnTileSize sdpa_bf16_tile_size();

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
