// Scalar reference kernels: the specification, the fallback, and the test oracle.
// Plain loops in the order the header documents; templates so float64 (gradient checks) shares
// the exact same code. Also defines the "scalar" KernelTable, whose GEMM runs the portable
// blocked driver (gemm.cpp) over a plain C++ micro-kernel so that the driver is exercised even on
// a machine without SIMD paths.
// Shape legend: see kernels.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// i-k-j order so the inner loop walks B and C along a row; accumulate in T.
template <class T>
void gemm_ref(int64_t M, int64_t N, int64_t K, const T* A, int64_t rsA, int64_t csA, const T* B,
              int64_t rsB, int64_t csB, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0)) {
      for (int64_t j = 0; j < N; ++j) c[j] = T(0);
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    for (int64_t k = 0; k < K; ++k) {
      const T a = A[i * rsA + k * csA];
      const T* b = B + k * rsB;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j * csB];
    }
  }
}

template <class T>
T apply(BinOp op, T a, T b) {
  switch (op) {
    case BinOp::add:
      return a + b;
    case BinOp::sub:
      return a - b;
    case BinOp::mul:
      return a * b;
    case BinOp::div:
      return a / b;
  }
  return a;
}

template <class T>
void binary_t(BinOp op, int64_t n, const T* a, const T* b, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = apply(op, a[i], b[i]);
}
template <class T>
void binary_rowbcast_t(BinOp op, int64_t rows, int64_t cols, const T* a, const T* b, T* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = apply(op, a[r * cols + c], b[c]);
}
template <class T>
void binary_scalar_t(BinOp op, int64_t n, const T* a, T s, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = apply(op, a[i], s);
}

template <class T>
void exp_t(int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

// softmax_forward / softmax_backward, side by side.
template <class T>
void softmax_rows_t(int64_t rows, int64_t cols, const T* x, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    if (mx == -std::numeric_limits<T>::infinity()) {
      // exp(-inf - (-inf)) = exp(NaN): PyTorch returns a NaN row; say so explicitly.
      for (int64_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - mx);
      sum += yr[c];
    }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
  }
}
// softmax_rows' max and sum, nothing stored (cross-entropy keeps the logits instead).
template <class T>
void softmax_stats_rows_t(int64_t rows, int64_t cols, int64_t ld, const T* x, T* mx, T* sum) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * ld;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    mx[r] = m;
    sum[r] = m == -std::numeric_limits<T>::infinity() ? std::numeric_limits<T>::quiet_NaN() : s;
  }
}
template <class T>
void exp_rows_scaled_t(int64_t rows, int64_t cols, int64_t ld, const T* x, const T* mx,
                       const T* scale, T* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * ld + c] = std::exp(x[r * ld + c] - mx[r]) * scale[r];
}
// y = softmax(x) so dL/dx_i = y_i (dy_i - sum_j y_j dy_j).
template <class T>
void softmax_rows_backward_t(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = yr[c] * (dyr[c] - dot);
  }
}

template <class T>
void masked_fill_t(int64_t rows, int64_t cols, const T* x, const uint8_t* mask, int64_t mask_rows,
                   T value, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* mr = mask + (r % mask_rows) * cols;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = mr[c] ? value : x[r * cols + c];
  }
}

// layernorm_forward / layernorm_backward (llm.c's formulation), side by side.
template <class T>
void layernorm_forward_t(int64_t rows, int64_t C, const T* x, const T* weight, const T* bias, T eps,
                         T* out, T* mean, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    T m = 0;
    for (int64_t i = 0; i < C; ++i) m += xr[i];
    m = m / T(C);
    T v = 0;
    for (int64_t i = 0; i < C; ++i) v += (xr[i] - m) * (xr[i] - m);
    v = v / T(C);  // biased variance, as torch.nn.LayerNorm
    const T s = T(1) / std::sqrt(v + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = (xr[i] - m) * s * weight[i] + bias[i];
    mean[r] = m;
    rstd[r] = s;
  }
}
template <class T>
void layernorm_backward_t(int64_t rows, int64_t C, const T* dout, const T* x, const T* weight,
                          const T* mean, const T* rstd, T* dx, T* dweight, T* dbias) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* dr = dout + r * C;
    const T* xr = x + r * C;
    const T m = mean[r], s = rstd[r];
    // in the forward pass: norm = (x - mean) * rstd, out = norm * weight + bias
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t i = 0; i < C; ++i) {
      const T norm = (xr[i] - m) * s;
      const T dnorm = weight[i] * dr[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = dnorm_mean / T(C);
    dnorm_norm_mean = dnorm_norm_mean / T(C);
    for (int64_t i = 0; i < C; ++i) {
      const T norm = (xr[i] - m) * s;
      const T dnorm = weight[i] * dr[i];
      dbias[i] += dr[i];
      dweight[i] += norm * dr[i];
      dx[r * C + i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

// gelu_forward / gelu_backward, side by side.
constexpr double kGeluS = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;
template <class T>
void gelu_forward_t(int64_t n, const T* x, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T u = T(kGeluS) * (v + T(kGeluC) * v * v * v);
    out[i] = T(0.5) * v * (T(1) + std::tanh(u));
  }
}
template <class T>
void gelu_backward_t(int64_t n, const T* x, const T* dout, T* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T u = T(kGeluS) * (v + T(kGeluC) * v * v * v);
    const T th = std::tanh(u);
    const T sech2 = T(1) - th * th;  // 1/cosh² without overflowing cosh
    const T du = T(kGeluS) * (T(1) + T(3 * kGeluC) * v * v);
    dx[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * sech2 * du);
  }
}

template <class T>
void sum_rows_t(int64_t rows, int64_t cols, const T* x, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    out[r] = s;
  }
}
template <class T>
void max_rows_t(int64_t rows, int64_t cols, const T* x, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < cols; ++c) {
      const T v = x[r * cols + c];
      if (std::isnan(v)) {
        m = v;
        break;
      }
      m = std::max(m, v);
    }
    out[r] = m;
  }
}
template <class T>
void sum_cols_t(int64_t rows, int64_t cols, const T* x, T* out) {
  for (int64_t c = 0; c < cols; ++c) out[c] = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c] += x[r * cols + c];
}

// A generic MR×NR micro-kernel for the scalar table (a local accumulator tile, k rank-1 updates;
// the compiler may auto-vectorize the j loop).
constexpr int64_t kRefMR = 4, kRefNR = 8;
void sgemm_ukernel_ref_4x8(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                           int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  float acc[kRefMR][kRefNR] = {};
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t i = 0; i < kRefMR; ++i)
      for (int64_t j = 0; j < kRefNR; ++j) acc[i][j] += a[p * kRefMR + i] * b[p * ldb + j];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

// Peak probe for the scalar path: 8 independent multiply-add chains (no FMA instruction is
// assumed on the baseline target).
double mul_add_probe_ref(int64_t iters) {
  // Volatile operands: with constants the compiler may evaluate the chains at compile time.
  volatile float vmul = 0.9999999f, vadd = 1e-7f;
  const float mul = vmul, add = vadd;
  float acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = 1.f + 0.01f * static_cast<float>(i);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * mul + add;
  volatile float sink = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
  (void)sink;
  return double(iters) * 8 * 2;
}

// ---- bfloat16 -----------------------------------------------------------------------------------
// A bf16 as the bf16 unit reads it: widened exactly, a denormal as zero of its sign.
float bf16_in(uint16_t h) {
  const uint32_t u = (h & 0x7F80u) == 0 ? (uint32_t(h) & 0x8000u) << 16 : uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// A float accumulator as the unit reads it: a denormal as zero of its sign.
float acc_in(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.f, x) : x; }

// One step of kernels.h's gemm_bf16 chain: R(acc + a·b). The product of two bf16 is exact in
// double, and so is the sum up to one rounding to 53 bits; rounding that to float is then the
// correctly rounded sum (double rounding is harmless for a sum of two 24-bit numbers at 53 bits:
// Figueroa, "When is double rounding innocuous?", 1995), its exponent unbounded above 2^-126.
// Below 2^-126 the unit flushes what is tiny after rounding at float's precision: a sum that
// rounds up to 2^-126 at 24 bits (|sum| >= 2^-126 - 2^-151, ties to the even 2^-126) stays, and
// there the double-to-float conversion gives ±2^-126 as well; anything smaller becomes ±0.
float bf16_step(float acc, float a, float b) {
  const double d = double(acc) + double(a) * double(b);
  return std::fabs(d) < 0x1p-126 - 0x1p-151 ? std::copysign(0.f, float(d)) : float(d);
}

// The scalar table's micro-kernel: the same chain per element over the packed pairs.
constexpr int64_t kRefBf16MR = 4, kRefBf16NR = 8;
void gemm_bf16_ukernel_ref_4x8(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                               int64_t ldc, int64_t m, int64_t n, bool accumulate,
                               const Bf16TileOut& out) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = accumulate ? acc_in(c[i * ldc + j]) : 0.f;
      for (int64_t q = 0; q < kp; ++q) {
        const uint16_t* aq = a + (q * kRefBf16MR + i) * 2;
        const uint16_t* bq = b + (q * kRefBf16NR + j) * 2;
        acc = bf16_step(acc, bf16_in(aq[1]), bf16_in(bq[1]));
        acc = bf16_step(acc, bf16_in(aq[0]), bf16_in(bq[0]));
      }
      uint16_t* const h = out.mode == Bf16Out::bf16 ? out.c16 + i * out.ld16 + j : nullptr;
      store_bf16_out(out.mode, acc, c + i * ldc + j, h);
    }
}

// kernels.h's definition, element by element, from the unpacked operands.
void gemm_bf16_ref_one(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                       const uint16_t* B, int64_t rsB, int64_t csB, float beta, float* C,
                       int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float& c = C[i * ldc + j];
      if (K <= 0) {
        c = beta == 0.f ? 0.f : c * beta;
        continue;
      }
      float acc = beta == 0.f ? 0.f : acc_in(beta == 1.f ? c : c * beta);
      for (int64_t q = 0; q < (K + 1) / 2; ++q) {
        const int64_t k0 = 2 * q, k1 = 2 * q + 1;
        const float a1 = k1 < K ? bf16_in(A[i * rsA + k1 * csA]) : 0.f;
        const float b1 = k1 < K ? bf16_in(B[k1 * rsB + j * csB]) : 0.f;
        acc = bf16_step(acc, a1, b1);
        acc = bf16_step(acc, bf16_in(A[i * rsA + k0 * csA]), bf16_in(B[k0 * rsB + j * csB]));
      }
      c = acc;
    }
}

}  // namespace

// ---- bfloat16 references ------------------------------------------------------------------------
// c10::BFloat16's round_to_nearest_even: add 0x7FFF plus the lowest kept bit, keep the top half.
void f32_to_bf16_ref(int64_t n, const float* x, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    out[i] = std::isnan(x[i]) ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}
void bf16_to_f32_ref(int64_t n, const uint16_t* x, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i]) << 16;
    std::memcpy(out + i, &u, 4);
  }
}
void gemm_bf16_ref(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                   const uint16_t* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  gemm_bf16_ref_one(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}
void gemm_bf16_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                           int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                           int64_t strideC, int64_t ldc) {
  for (int64_t b = 0; b < batch; ++b)
    gemm_bf16_ref_one(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
                      C + b * strideC, ldc);
}
// The float32 GEMM into a float32 C (the bf16 C widened into one of its own), then the rounding.
void gemm_bf16_ref(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                   const uint16_t* B, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C) {
  check_bf16_out("gemm_bf16_ref", beta, C);
  if (M <= 0 || N <= 0) return;
  const bool to16 = C.mode == Bf16Out::bf16;
  std::vector<float> wide(to16 ? size_t(M * N) : 0);
  float* const c = to16 ? wide.data() : C.f32;
  const int64_t ldc = to16 ? N : C.ld;
  if (to16)
    for (int64_t i = 0; i < M; ++i) bf16_to_f32_ref(N, C.bf16 + i * C.ld, c + i * ldc);
  gemm_bf16_ref_one(M, N, K, A, rsA, csA, B, rsB, csB, beta, c, ldc);
  if (C.mode == Bf16Out::f32) return;
  std::vector<uint16_t> row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    uint16_t* const h = to16 ? C.bf16 + i * C.ld : row.data();
    f32_to_bf16_ref(N, c + i * ldc, h);
    if (!to16) bf16_to_f32_ref(N, h, c + i * ldc);
  }
}
void gemm_bf16_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                           int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta,
                           const GemmBf16Out& C, int64_t strideC) {
  for (int64_t b = 0; b < batch; ++b)
    gemm_bf16_ref(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
                  C.at(b * strideC));
}

// The M = 1 GEMM itself (kernels.h): C = b, then the chain from it (beta 1), or from +0.
void gemv_rows_bf16_ref(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                        const uint16_t* x, const float* b, float* y) {
  if (b != nullptr) std::copy_n(b, rows, y);
  gemm_bf16_ref_one(1, rows, cols, x, cols, 1, w, 1, ldw, b != nullptr ? 1.f : 0.f, y, rows);
}

// kernels.h's panel layout: group g, pair q, row i of the group at word (g·pairs + q)·16 + i.
int64_t gemv_bf16_panel_words(int64_t rows, int64_t cols) {
  return (rows + 15) / 16 * ((cols + 1) / 2) * 16;
}
void pack_gemv_bf16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw, uint32_t* panels) {
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t g = 0; g < (rows + 15) / 16; ++g)
    for (int64_t q = 0; q < pairs; ++q)
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t r = 16 * g + i, k = 2 * q;
        uint32_t word = 0;
        if (r < rows)
          word =
              uint32_t(w[r * ldw + k]) | (k + 1 < cols ? uint32_t(w[r * ldw + k + 1]) << 16 : 0u);
        panels[(g * pairs + q) * 16 + i] = word;
      }
}

// Each group unpacked back into rows, then the unpacked reference.
void gemv_packed_bf16_ref(int64_t rows, int64_t cols, const uint32_t* panels, const uint16_t* x,
                          const float* b, float* y) {
  const int64_t pairs = (cols + 1) / 2;
  std::vector<uint16_t> w(size_t(16 * std::max<int64_t>(cols, 1)));
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t n = std::min<int64_t>(16, rows - r0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < cols; ++k)
        w[size_t(i * cols + k)] =
            uint16_t(panels[(r0 / 16 * pairs + k / 2) * 16 + i] >> (16 * (k & 1)));
    gemv_rows_bf16_ref(n, cols, w.data(), cols, x, b ? b + r0 : nullptr, y + r0);
  }
}

// The M = 1 GEMM over a row-major B.
void gemm_bf16_row_axpys_ref(int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                             int64_t ldb, float* c, bool accumulate) {
  gemm_bf16_ref_one(1, n, k, a, k, 1, b, ldb, 1, accumulate ? 1.f : 0.f, c, n);
}

// ---- one row of A times B in place (table.h: SgemmRow) -----------------------------------------
void sgemm_row_ref(bool dots, bool fused, int64_t n, int64_t k, int64_t kc, const float* a,
                   const float* b, int64_t ldb, float* c, bool accumulate) {
  for (int64_t j = 0; j < n; ++j) {
    float sum = accumulate ? c[j] : 0.f;
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
      float acc = 0.f;
      for (int64_t p = p0; p < std::min(k, p0 + kc); ++p) {
        const float bv = dots ? b[j * ldb + p] : b[p * ldb + j];
        acc = fused ? std::fma(a[p], bv, acc) : acc + a[p] * bv;
      }
      sum = p0 == 0 && !accumulate ? acc : acc + sum;
    }
    c[j] = sum;
  }
}

namespace {
// The scalar table's: sgemm_ukernel_ref_4x8 rounds each product.
void sgemm_row_dots_ref(int64_t n, int64_t k, int64_t kc, const float* a, const float* b,
                        int64_t ldb, float* c, bool accumulate) {
  sgemm_row_ref(true, false, n, k, kc, a, b, ldb, c, accumulate);
}
void sgemm_row_axpys_ref(int64_t n, int64_t k, int64_t kc, const float* a, const float* b,
                         int64_t ldb, float* c, bool accumulate) {
  sgemm_row_ref(false, false, n, k, kc, a, b, ldb, c, accumulate);
}
}  // namespace

// ---- float / double references ------------------------------------------------------------------
void sgemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
               const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  gemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}
void sgemm_batched_ref(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const float* B, int64_t strideB,
                       int64_t rsB, int64_t csB, float beta, float* C, int64_t strideC,
                       int64_t ldc) {
  for (int64_t b = 0; b < batch; ++b)
    gemm_ref(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta, C + b * strideC,
             ldc);
}

// name_ref (float) and the float64 entry of every TG_KERNEL: its template name_t above.
#define TG_T float
#define TG_KERNEL(name, params, args) \
  void name##_ref params { name##_t args; }
#include "core/kernels/vector_kernels.def"
#define TG_T double
#define TG_KERNEL(name, params, args) \
  void name params { name##_t args; }
#include "core/kernels/vector_kernels.def"

// y = W x (+ b), one row of W at a time, summed in column order.
void gemv_rows_ref(int64_t rows, int64_t cols, const float* w, int64_t ldw, const float* x,
                   const float* b, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int64_t c = 0; c < cols; ++c) s += w[r * ldw + c] * x[c];
    y[r] = (b ? b[r] : 0.f) + s;
  }
}

// PyTorch's single-tensor AdamW, step by step (torch/optim/adamw.py, _single_tensor_adamw): the
// bias corrections are Python floats (double), the tensor math is float.
void adamw_ref(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
               float beta2, float eps, float weight_decay, int64_t step) {
  const float decay = static_cast<float>(1.0 - double(lr) * double(weight_decay));
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float step_size = static_cast<float>(double(lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float w1 = 1.0f - beta1, w2 = 1.0f - beta2;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = p[i] * decay;                       // param.mul_(1 - lr * wd)
    m[i] = m[i] + w1 * (g[i] - m[i]);          // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * beta2 + w2 * (g[i] * g[i]);  // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2)
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] - step_size * (m[i] / denom);  // param.addcdiv_(exp_avg, denom, -step_size)
  }
}

// bf16 AdamW (vector_kernels.def), one rounding per op in ATen's order.
namespace {
float r16(float x) {
  uint16_t h;
  f32_to_bf16_ref(1, &x, &h);
  float y;
  bf16_to_f32_ref(1, &h, &y);
  return y;
}
}  // namespace
void adamw_bf16_ref(int64_t n, uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v,
                    const AdamWBf16& s) {
  for (int64_t i = 0; i < n; ++i) {
    float pf, gf, mf, vf;
    bf16_to_f32_ref(1, p + i, &pf);
    bf16_to_f32_ref(1, g + i, &gf);
    bf16_to_f32_ref(1, m + i, &mf);
    bf16_to_f32_ref(1, v + i, &vf);
    pf = r16(pf * s.decay);                     // param.mul_(1 - lr*wd)
    mf = r16(std::fma(s.w1, gf - mf, mf));      // exp_avg.lerp_(grad, 1 - beta1)
    vf = r16(r16(vf * s.b2) + s.w2 * gf * gf);  // .mul_(beta2).addcmul_(g, g, 1 - beta2)
    const float d = r16(r16(r16(std::sqrt(vf)) / s.bc2_sqrt) + s.eps);  // sqrt() / bc2_sqrt + eps
    pf = r16(pf + s.step_size * mf / d);  // param.addcdiv_(exp_avg, d, -step_size)
    f32_to_bf16_ref(1, &pf, p + i);
    f32_to_bf16_ref(1, &mf, m + i);
    f32_to_bf16_ref(1, &vf, v + i);
  }
}

// ---- float64 GEMM: always the reference -------------------------------------------------------
void dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
           const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc) {
  gemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}

// ---- MT19937 and Bernoulli draws, as defined (std::mt19937; rng.h §4) ------------------------
void mt19937_twist_ref(uint32_t* s) {
  constexpr int N = 624, M = 397;
  for (int i = 0; i < N; ++i) {
    const uint32_t y = (s[i] & 0x80000000u) | (s[(i + 1) % N] & 0x7FFFFFFFu);
    s[i] = s[(i + M) % N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908B0DFu : 0u);
  }
}
void mt19937_temper_ref(int64_t n, const uint32_t* in, uint32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = mt19937_temper_word(in[i]);
}
void bernoulli_words_ref(int64_t n, const uint32_t* w, uint64_t limit, float kept, float dropped,
                         float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = ((uint64_t{w[2 * i]} << 32) | w[2 * i + 1]) & ((uint64_t{1} << 53) - 1);
    out[i] = r < limit ? kept : dropped;
  }
}

// ---- the scalar table -------------------------------------------------------------------------
// Block sizes only matter for cache reuse here; kc small enough to make KC+1 tests cheap.
extern const KernelTable kScalarTable = {
    .name = "scalar",
    .sgemm_blocking = {kRefMR, kRefNR, 64, 128, 512},
    .sgemm_ukernel = sgemm_ukernel_ref_4x8,
    // no in-place-A micro-kernels; packing A and Bᵀ takes the portable loops
    .sgemm_ukernel_rowa = nullptr,
    .sgemm_ukernel_cola = nullptr,
    .sgemm_pack_a_rowmajor = nullptr,
    .sgemm_pack_b_colmajor = nullptr,
#define TG_KERNEL(name, params, args) .name = name##_ref,
#define TG_KERNEL_NO_F64(name, params, args) TG_KERNEL(name, params, args)
#include "core/kernels/vector_kernels.def"
    .attn_fwd_tile = attn_fwd_tile_ref,
    .attn_bwd_tile = attn_bwd_tile_ref,
    .attn_bf16_panels = attn_bf16_panels_ref,
    .fma_probe = mul_add_probe_ref,
    .f32_to_bf16 = f32_to_bf16_ref,
    .bf16_to_f32 = bf16_to_f32_ref,
    // KC of 64 pairs: K blocks are crossed by small tests too.
    .gemm_bf16_blocking = {kRefBf16MR, kRefBf16NR, 64, 64, 256},
    .gemm_bf16_ukernel = gemm_bf16_ukernel_ref_4x8,
    .gemm_bf16_pack_pairs = nullptr,
    .gemm_bf16_pack_lines = nullptr,
    .gemv_rows_bf16 = gemv_rows_bf16_ref,
    .gemv_packed_bf16 = nullptr,
    .bf16_probe = nullptr,
    .sgemm_row_dots = sgemm_row_dots_ref,
    .sgemm_row_axpys = sgemm_row_axpys_ref,
    .gemm_bf16_row_axpys = gemm_bf16_row_axpys_ref,
};

}  // namespace tg::kernels
