// NEON (Advanced SIMD) kernels for aarch64, where NEON is part of the baseline: no extra flags.
// Contents: the sgemm micro-kernel, the vector type V for simd_generic.h, and the table.
// Tested under qemu-aarch64 (make test-neon).
// Shape legend: see kernels.h; packed panel layout: see table.h.
#include <arm_neon.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// ---- sgemm micro-kernel, 8 × 12 -----------------------------------------------------------------
// Register allocation: v8-v31 (24 registers) hold the 8×12 tile of C, row i in c{i}0..c{i}2;
// three registers hold the current row of the packed B micro-panel (12 floats) and two hold the
// 8 A values of this k, which the by-lane FMA (fmla v.4s, v.4s, v.s[lane]) reads without a
// separate broadcast: 29 of the 32 vector registers, 24 FMAs per 5 loads.
// Edge tiles: the full tile is computed from zero-padded panels; a partial tile is stored through
// a stack buffer and copied for m ≤ 8 rows and n ≤ 12 columns.
constexpr int kMR = 8, kNR = 12;
// One row of the tile: r0..r2 += b0..b2 · a[LANE] (the lane must be a compile-time constant).
template <int LANE>
inline void fma_row(float32x4_t& r0, float32x4_t& r1, float32x4_t& r2, float32x4_t b0,
                    float32x4_t b1, float32x4_t b2, float32x4_t a) {
  r0 = vfmaq_laneq_f32(r0, b0, a, LANE);
  r1 = vfmaq_laneq_f32(r1, b1, a, LANE);
  r2 = vfmaq_laneq_f32(r2, b2, a, LANE);
}
void sgemm_ukernel_neon_8x12(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                             int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  float32x4_t c00 = vdupq_n_f32(0), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  float32x4_t c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  float32x4_t c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
  float32x4_t c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
  for (int64_t p = 0; p < kc; ++p) {
    const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
    // Row i takes lane i % 4 of a0 (rows 0-3) or a1 (rows 4-7).
    fma_row<0>(c00, c01, c02, b0, b1, b2, a0);
    fma_row<1>(c10, c11, c12, b0, b1, b2, a0);
    fma_row<2>(c20, c21, c22, b0, b1, b2, a0);
    fma_row<3>(c30, c31, c32, b0, b1, b2, a0);
    fma_row<0>(c40, c41, c42, b0, b1, b2, a1);
    fma_row<1>(c50, c51, c52, b0, b1, b2, a1);
    fma_row<2>(c60, c61, c62, b0, b1, b2, a1);
    fma_row<3>(c70, c71, c72, b0, b1, b2, a1);
    a += kMR;
    b += ldb;
  }
  const float32x4_t rows[kMR][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22},
                                    {c30, c31, c32}, {c40, c41, c42}, {c50, c51, c52},
                                    {c60, c61, c62}, {c70, c71, c72}};
  if (m == kMR && n == kNR) {
    for (int i = 0; i < kMR; ++i) {
      float* ci = c + i * ldc;
      for (int j = 0; j < 3; ++j) {
        const float32x4_t v =
            accumulate ? vaddq_f32(rows[i][j], vld1q_f32(ci + 4 * j)) : rows[i][j];
        vst1q_f32(ci + 4 * j, v);
      }
    }
    return;
  }
  float tile[kMR * kNR];
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < 3; ++j) vst1q_f32(tile + i * kNR + 4 * j, rows[i][j]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * kNR + j] : tile[i * kNR + j];
}

// ---- V: 4 floats in a q register ----------------------------------------------------------------
struct V {
  using T = float32x4_t;
  using M = uint32x4_t;
  static constexpr int W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static T set1(float f) { return vdupq_n_f32(f); }
  static T add(T a, T b) { return vaddq_f32(a, b); }
  static T sub(T a, T b) { return vsubq_f32(a, b); }
  static T mul(T a, T b) { return vmulq_f32(a, b); }
  static T div(T a, T b) { return vdivq_f32(a, b); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static T sqrt(T a) { return vsqrtq_f32(a); }
  static T min(T a, T b) { return vminq_f32(a, b); }  // NaN in either lane propagates
  static T max(T a, T b) { return vmaxq_f32(a, b); }
  static T round_nearest(T a) { return vrndnq_f32(a); }
  // y · 2^n as y · 2^(n>>1) · 2^(n − (n>>1)): each factor is a normal float for n in [-150, 128].
  static T ldexp_int(T y, T n) {
    const int32x4_t ni = vcvtq_s32_f32(n);
    const int32x4_t n1 = vshrq_n_s32(ni, 1);
    const int32x4_t n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const T s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const T s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(y, s1), s2);
  }
  static T ldexp_normal(T y, T n) {
    const int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
    return vmulq_f32(y, vreinterpretq_f32_s32(vshlq_n_s32(e, 23)));
  }
  static float hsum(T v) { return vaddvq_f32(v); }
  static float hmax(T v) { return vmaxvq_f32(v); }
  static M is_nan(T v) { return vmvnq_u32(vceqq_f32(v, v)); }
  static M lt(T a, T b) { return vcltq_f32(a, b); }
  static T select(M m, T a, T b) { return vbslq_f32(m, a, b); }
  static M mask_u8(const uint8_t* p) {
    uint32_t four;
    std::memcpy(&four, p, 4);
    const uint8x8_t bytes = vreinterpret_u8_u32(vdup_n_u32(four));
    const uint32x4_t w = vmovl_u16(vget_low_u16(vmovl_u8(bytes)));
    return vtstq_u32(w, w);
  }
};

#include "core/kernels/simd_generic.h"

// Peak probe: 16 independent FMA chains (enough for 2-4 pipes × 4-cycle latency).
double fma_probe_neon(int64_t iters) {
  float32x4_t acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = vdupq_n_f32(1.f + 0.01f * static_cast<float>(i));
  const float32x4_t mul = vdupq_n_f32(0.9999999f), add = vdupq_n_f32(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = vfmaq_f32(add, acc[i], mul);
  }
  float32x4_t s = acc[0];
  for (int i = 1; i < 16; ++i) s = vaddq_f32(s, acc[i]);
  volatile float sink = vaddvq_f32(s);
  (void)sink;
  return double(iters) * 16 * 4 * 2;
}

}  // namespace

// Blocking: A micro-panel 8×256 floats = 8 KiB in L1, B panel 256×768 floats = 768 KiB in L2
// (typical Cortex-A/Neoverse sizes; not tuned on hardware, only tested under qemu).
const KernelTable* neon_table() {
  static const KernelTable t = {
      .name = "neon",
      .sgemm_blocking = {kMR, kNR, 256, 256, 768},
      .sgemm_ukernel = sgemm_ukernel_neon_8x12,
      // no in-place-A micro-kernels; packing A and Bᵀ takes the portable loops
      .sgemm_ukernel_rowa = nullptr,
      .sgemm_ukernel_cola = nullptr,
      .sgemm_pack_a_rowmajor = nullptr,
      .sgemm_pack_b_colmajor = nullptr,
#include "core/kernels/simd_table_entries.inc"
      .fma_probe = fma_probe_neon,
  };
  return &t;
}

}  // namespace tg::kernels
