// NEON (Advanced SIMD) kernels for aarch64, where NEON is part of the baseline: no extra flags.
// Contents: the sgemm micro-kernel, the bf16 GEMM's and gemv (widening), the bf16 conversions,
// the vector type V for simd_generic.h, and the table.
// Tested under qemu-aarch64 (make test-neon).
// Shape legend: see kernels.h; packed panel layout: see table.h.
#include <arm_neon.h>

#include <algorithm>
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

// ---- bf16 GEMM micro-kernel, 4 × 8, widening ----------------------------------------------------
// The bf16 unit's arithmetic (kernels.h) without one: FPCR's flush-to-zero judges tininess before
// rounding, where the x86 unit judges it after, so each step runs in float64 instead, as ref.cpp's
// bf16_step: the exact product plus acc, rounded once to 53 bits, then to float32, and a result
// below 2^-126 - 2^-151 (tiny after rounding at 24 bits) flushed to zero of its sign. Denormal
// inputs (bf16 and the C it starts from) read as zero of their sign. Correct, not fast.
constexpr int kBf16MR = 4, kBf16NR = 8;
// x with its denormal lanes replaced by zero of their sign.
inline float32x4_t daz(float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t denormal = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7F800000u)), vdupq_n_u32(0));
  return vreinterpretq_f32_u32(vbslq_u32(denormal, vandq_u32(u, vdupq_n_u32(0x80000000u)), u));
}
// One step of the chain, lane by lane: R(acc + a·b).
inline float32x4_t bf16_step(float32x4_t acc, float32x4_t a, float32x4_t b) {
  const float64x2_t lo = vfmaq_f64(vcvt_f64_f32(vget_low_f32(acc)), vcvt_f64_f32(vget_low_f32(a)),
                                   vcvt_f64_f32(vget_low_f32(b)));
  const float64x2_t hi =
      vfmaq_f64(vcvt_high_f64_f32(acc), vcvt_high_f64_f32(a), vcvt_high_f64_f32(b));
  const float32x4_t r = vcvt_high_f32_f64(vcvt_f32_f64(lo), hi);
  const float64x2_t tiny = vdupq_n_f64(0x1p-126 - 0x1p-151);
  const uint32x4_t flush =
      vcombine_u32(vmovn_u64(vcaltq_f64(lo, tiny)), vmovn_u64(vcaltq_f64(hi, tiny)));
  const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(r), vdupq_n_u32(0x80000000u));
  return vreinterpretq_f32_u32(vbslq_u32(flush, sign, vreinterpretq_u32_f32(r)));
}
// float32 → bf16 as c10 rounds (kernels.h): u + 0x7FFF + (bit 16 of u), the top half kept, as a
// float32; every NaN becomes 0x7FC0.
inline float32x4_t round_bf16_x4(float32x4_t v) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t r =
      vandq_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), lsb)), vdupq_n_u32(0xFFFF0000u));
  return vreinterpretq_f32_u32(vbslq_u32(vceqq_f32(v, v), r, vdupq_n_u32(0x7FC00000)));
}
// The tile leaves as table.h's Bf16TileOut says: rounded in registers at its last K block (not
// f32), then float32 to c or the top halves, the bf16 bits, to out.c16.
void gemm_bf16_ukernel_neon_4x8(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                                int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                const Bf16TileOut& out) {
  float tile[kBf16MR * kBf16NR] = {};
  if (accumulate)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) tile[i * kBf16NR + j] = c[i * ldc + j];
  float32x4_t acc[kBf16MR][2];
  for (int i = 0; i < kBf16MR; ++i)
    for (int h = 0; h < 2; ++h) acc[i][h] = daz(vld1q_f32(tile + i * kBf16NR + 4 * h));
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  for (int64_t q = 0; q < kp; ++q) {
    float32x4_t bo[2], be[2];
    for (int h = 0; h < 2; ++h) {
      const uint32x4_t v = vld1q_u32(reinterpret_cast<const uint32_t*>(b) + 4 * h);
      bo[h] = daz(vreinterpretq_f32_u32(vandq_u32(v, high)));
      be[h] = daz(vreinterpretq_f32_u32(vshlq_n_u32(v, 16)));
    }
    for (int i = 0; i < kBf16MR; ++i) {
      const uint32x4_t ai = vld1q_dup_u32(reinterpret_cast<const uint32_t*>(a) + i);
      const float32x4_t ao = daz(vreinterpretq_f32_u32(vandq_u32(ai, high)));
      const float32x4_t ae = daz(vreinterpretq_f32_u32(vshlq_n_u32(ai, 16)));
      for (int h = 0; h < 2; ++h) acc[i][h] = bf16_step(bf16_step(acc[i][h], ao, bo[h]), ae, be[h]);
    }
    a += 2 * kBf16MR;
    b += 2 * kBf16NR;
  }
  const bool round = out.mode != Bf16Out::f32;
  for (int i = 0; i < kBf16MR; ++i)
    for (int h = 0; h < 2; ++h)
      vst1q_f32(tile + i * kBf16NR + 4 * h, round ? round_bf16_x4(acc[i][h]) : acc[i][h]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (out.mode != Bf16Out::bf16) {
        c[i * ldc + j] = tile[i * kBf16NR + j];
        continue;
      }
      uint32_t u;
      std::memcpy(&u, tile + i * kBf16NR + j, 4);
      out.c16[i * out.ld16 + j] = uint16_t(u >> 16);
    }
}

// ---- bf16 gemv (kernels.h: gemv_rows_bf16), 4 rows at a time, widening -----------------------
// One lane per row, each running its row's chain with the GEMM kernel's bf16_step above (odd k
// first). Per chunk of 4 pairs of k, the 4 rows' 16 bytes are loaded and transposed on the
// pairs' 32 bits (t[q]: pair q of each row); the last, short chunk is copied into a zeroed
// buffer first. Rows past the last group of 4 take the reference.
constexpr int64_t kGemvRows = 4;
inline void transpose4(const uint32x4_t r[4], uint32x4_t t[4]) {
  const uint32x4x2_t a = vtrnq_u32(r[0], r[1]), b = vtrnq_u32(r[2], r[3]);
  t[0] = vcombine_u32(vget_low_u32(a.val[0]), vget_low_u32(b.val[0]));
  t[1] = vcombine_u32(vget_low_u32(a.val[1]), vget_low_u32(b.val[1]));
  t[2] = vcombine_u32(vget_high_u32(a.val[0]), vget_high_u32(b.val[0]));
  t[3] = vcombine_u32(vget_high_u32(a.val[1]), vget_high_u32(b.val[1]));
}
void gemv_rows_bf16_neon(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                         const uint16_t* x, const float* b, float* y) {
  const int64_t full = rows / kGemvRows * kGemvRows;
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  uint16_t tail[kGemvRows][8];
  for (int64_t r = 0; r < full; r += kGemvRows) {
    float32x4_t acc = b != nullptr ? vld1q_f32(b + r) : vdupq_n_f32(0.f);
    if (cols > 0) acc = daz(acc);  // cols == 0: y = b, unflushed, as the GEMM's K == 0
    for (int64_t p = 0; p < cols; p += 8) {
      const int64_t len = std::min<int64_t>(8, cols - p);
      uint32x4_t rr[4], t[4];
      for (int i = 0; i < 4; ++i)
        rr[i] =
            vreinterpretq_u32_u16(vld1q_u16(gemv_chunk(w + (r + i) * ldw + p, len, 8, tail[i])));
      transpose4(rr, t);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        if (2 * q >= len) break;
        const int64_t k = p + 2 * q;
        const uint32_t xp = uint32_t(x[k]) | (k + 1 < cols ? uint32_t(x[k + 1]) << 16 : 0u);
        const uint32x4_t xi = vdupq_n_u32(xp);
        const float32x4_t xo = daz(vreinterpretq_f32_u32(vandq_u32(xi, high)));
        const float32x4_t xe = daz(vreinterpretq_f32_u32(vshlq_n_u32(xi, 16)));
        const float32x4_t wo = daz(vreinterpretq_f32_u32(vandq_u32(t[q], high)));
        const float32x4_t we = daz(vreinterpretq_f32_u32(vshlq_n_u32(t[q], 16)));
        acc = bf16_step(bf16_step(acc, xo, wo), xe, we);
      }
    }
    vst1q_f32(y + r, acc);
  }
  gemv_rows_bf16_ref(rows - full, cols, w + full * ldw, ldw, x, b ? b + full : nullptr, y + full);
}

// ---- bfloat16 conversions ---------------------------------------------------------------------
// float32 → bf16 as c10 rounds (kernels.h): u + 0x7FFF + (bit 16 of u), top half; NaN → 0x7FC0.
void f32_to_bf16_neon(int64_t n, const float* x, uint16_t* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), lsb));
    const uint16x4_t h = vshrn_n_u32(r, 16);
    vst1_u16(out + i, vbsl_u16(vmovn_u32(vceqq_f32(v, v)), h, vdup_n_u16(0x7FC0)));
  }
  f32_to_bf16_ref(n - i, x + i, out + i);
}
void bf16_to_f32_neon(int64_t n, const uint16_t* x, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(out + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(x + i), 16)));
  bf16_to_f32_ref(n - i, x + i, out + i);
}

// ---- V: 4 floats in a q register ----------------------------------------------------------------
struct V {
  using T = float32x4_t;
  using M = uint32x4_t;
  static constexpr int W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  // The first n lanes (0 <= n <= 4) from p, zeros after; nothing past them is read.
  static T load_first(const float* p, int64_t n) {
    float buf[4] = {};
    for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
    return vld1q_f32(buf);
  }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static T set1(float f) { return vdupq_n_f32(f); }
  static T add(T a, T b) { return vaddq_f32(a, b); }
  static T sub(T a, T b) { return vsubq_f32(a, b); }
  static T mul(T a, T b) { return vmulq_f32(a, b); }
  static T div(T a, T b) { return vdivq_f32(a, b); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  // bf16 (kernels.h's rounding): 4 widened exactly; rounded to nearest even with NaN as 0x7FC0,
  // kept as float32; two rounded vectors paired (lo's bf16 in the low half of each 32-bit lane,
  // hi's above); and a rounded vector's top halves stored.
  static T load_bf16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static T round_bf16(T v) { return round_bf16_x4(v); }
  static T pair_bf16(T lo, T hi) {
    return vreinterpretq_f32_u32(
        vorrq_u32(vshrq_n_u32(vreinterpretq_u32_f32(lo), 16), vreinterpretq_u32_f32(hi)));
  }
  static void store_bf16(uint16_t* p, T v) {
    vst1_u16(p, vshrn_n_u32(vreinterpretq_u32_f32(v), 16));
  }
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
      .f32_to_bf16 = f32_to_bf16_neon,
      .bf16_to_f32 = bf16_to_f32_neon,
      .gemm_bf16_blocking = {kBf16MR, kBf16NR, 256, 256, 768},
      .gemm_bf16_ukernel = gemm_bf16_ukernel_neon_4x8,
      .gemm_bf16_pack_pairs = nullptr,
      .gemm_bf16_pack_lines = nullptr,
      .gemv_rows_bf16 = gemv_rows_bf16_neon,
      .gemv_packed_bf16 = nullptr,
      .bf16_probe = nullptr,
      .sgemm_row_dots = sgemm_row_dots_simd,
      .sgemm_row_axpys = sgemm_row_axpys_simd,
      // The reference: FPCR's flush judges tininess before rounding, unlike the unit (see the GEMM
      // kernel above), and the route's bf16 axpys are a small share of a step.
      .gemm_bf16_row_axpys = gemm_bf16_row_axpys_ref,
  };
  return &t;
}

}  // namespace tg::kernels
