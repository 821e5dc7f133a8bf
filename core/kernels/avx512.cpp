// AVX-512 kernels (F, DQ, BW, VL), compiled with -mavx512f -mavx512dq -mavx512bw -mavx512vl
// -mavx2 -mfma only; dispatch.cpp calls them only after cpu_x86.cpp found those features.
// Contents: the sgemm micro-kernel, the vector type V for simd_generic.h, and the table.
// Shape legend: see kernels.h; packed panel layout: see table.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// ---- sgemm micro-kernel, MR × 32 -------------------------------------------------------------
// Register allocation (MR = 12): zmm0-23 hold the 12×32 tile of C (row i in c[i][0], c[i][1]),
// two zmm hold the current row of the packed B micro-panel (32 floats), and A values are
// broadcast straight from memory into the FMA (the {1to16} operand form), so 24 FMAs need 2 vector
// loads + 12 broadcasts per k: the two FMA ports, not the load ports, are the bottleneck.
// Edge tiles: the full tile is always computed (packed panels are zero-padded); the store is
// clipped with a lane mask for n < 32 and a row bound for m < MR.
// ROW_A: A is read in place from a row-major matrix (row i at a + i·lda, rows ≥ m repeat row
// m − 1 so nothing past A is read) instead of from a packed micro-panel; for small GEMMs. The 12
// row pointers need 12 general registers, so a few live in spare zmm/stack slots: ~1 extra load
// per 24 FMAs, far cheaper than packing A when there are only a few column panels.
constexpr int64_t kPrefetchB = 8;
template <int MR, bool ROW_A>
void sgemm_ukernel_avx512_t(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  const float* rows[MR];
  if (ROW_A)
    for (int i = 0; i < MR; ++i) rows[i] = a + std::min<int64_t>(i, m - 1) * lda;
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    // Fetch the C tile now so its (often 4 KiB-aliased) rows are in L1 by the final update.
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 31), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < kc; ++p) {
    // B streams from L2: ask for it kPrefetchB k-steps ahead (two 64-byte lines per step).
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * ldb), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * ldb + 16), _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(ROW_A ? rows[i][p] : a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += ROW_A ? 0 : MR;
    b += ldb;
  }
  if (m == MR && n == 32) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(ci));
        acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(ci + 16));
      }
      _mm512_storeu_ps(ci, acc[i][0]);
      _mm512_storeu_ps(ci + 16, acc[i][1]);
    }
    return;
  }
  // Lane masks for the two column halves of a partial tile.
  const uint32_t bits = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1u);
  const __mmask16 k0 = static_cast<__mmask16>(bits), k1 = static_cast<__mmask16>(bits >> 16);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i >= m) break;
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(k0, ci));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(k1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, k0, acc[i][0]);
    _mm512_mask_storeu_ps(ci + 16, k1, acc[i][1]);
  }
}

void sgemm_ukernel_avx512_12x32(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                                int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  sgemm_ukernel_avx512_t<12, false>(kc, a, 0, b, ldb, c, ldc, m, n, accumulate);
}
void sgemm_ukernel_avx512_12x32_rowa(int64_t kc, const float* a, int64_t lda, const float* b,
                                     int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                     bool accumulate) {
  sgemm_ukernel_avx512_t<12, true>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}

// Packs one 12×kc micro-panel of row-major A: for each k one masked gather collects the 12 row
// values (indices 0, rsA, …, 11·rsA) and one masked store writes them contiguously, instead of
// 12 scalar load/store pairs.
void sgemm_pack_a_avx512_12(int64_t kc, const float* A, int64_t rsA, float* out) {
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 0, 0, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(rsA)));
  const __mmask16 rows = 0x0FFF;
  for (int64_t p = 0; p < kc; ++p) {
    if ((p & 15) == 0) {  // the 12 rows are 12 streams in 12 pages: fetch their next lines
      for (int i = 0; i < 12; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(A + i * rsA + p + 64), _MM_HINT_T0);
    }
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rows, idx, A + p, 4);
    _mm512_mask_storeu_ps(out + p * 12, rows, v);
  }
}

// Packs one kc×32 micro-panel of a transposed B (column j at B + j·csB): per k two gathers of 16
// column values each, stored as one 32-float row of the panel.
void sgemm_pack_b_avx512_32(int64_t kc, const float* B, int64_t csB, float* out) {
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(csB)));
  const float* B16 = B + 16 * csB;
  for (int64_t p = 0; p < kc; ++p) {
    _mm512_storeu_ps(out + p * 32, _mm512_i32gather_ps(idx, B + p, 4));
    _mm512_storeu_ps(out + p * 32 + 16, _mm512_i32gather_ps(idx, B16 + p, 4));
  }
}

// ---- V: 16 floats in a zmm ---------------------------------------------------------------------
struct V {
  using T = __m512;
  using M = __mmask16;
  static constexpr int W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float f) { return _mm512_set1_ps(f); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T sqrt(T a) { return _mm512_sqrt_ps(a); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T round_nearest(T a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // y · 2^n in one correctly rounded vscalefps, denormal results included: over all 2^32 float
  // inputs exp_v gives the same bits as with the two-normal-factor form the other ISAs use.
  static T ldexp_int(T y, T n) { return _mm512_scalef_ps(y, n); }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  static M is_nan(T v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
  static M lt(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static T select(M m, T a, T b) { return _mm512_mask_blend_ps(m, b, a); }
  static M mask_u8(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm_test_epi8_mask(bytes, bytes);
  }
};

#include "core/kernels/simd_generic.h"

// Peak probe: 16 independent FMA chains (more than 2 ports × 4-cycle latency = 8 in flight), so
// the loop is bound by FMA issue, not latency. The sink keeps the chains alive.
double fma_probe_avx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(1.f + 0.01f * i);
  const __m512 mul = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 16 * 16 * 2;
}

}  // namespace

// Blocking for L1d 48 KiB / L2 2 MiB: A micro-panel 12×256 floats (12 KiB) and the B micro-panel
// it meets (256×32 floats, 32 KiB) both fit L1, so A stays there across the jr sweep; the
// B panel 256×1024 floats (1 MiB) stays in L2. KC = 384 (A + B micro-panels 66 KiB) measured
// ~20% slower in the macro-kernel alone.
const KernelTable* avx512_table() {
  static const KernelTable t = {
      "avx512",
      {12, 32, 240, 256, 1024},
      sgemm_ukernel_avx512_12x32,
      sgemm_ukernel_avx512_12x32_rowa,
      sgemm_pack_a_avx512_12,
      sgemm_pack_b_avx512_32,
      TG_GENERIC_TABLE_ENTRIES,
      fma_probe_avx512,
  };
  return &t;
}

}  // namespace tg::kernels
