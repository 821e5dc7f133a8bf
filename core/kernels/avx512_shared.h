// What avx512.cpp and avx512_bf16.cpp both compile: the 16×16 transpose, the bf16 rounding and
// micro-tile store, and the bf16 gemv's loop (kernels.h: gemv_rows_bf16), whose step is the only
// difference between the two paths (float32 FMAs under DAZ/FTZ, or vdpbf16ps). Include only from
// files built with the AVX-512 flags. The anonymous namespace gives each file its own copy,
// compiled with its own flags (one shared inline definition could be taken from the avx512_bf16
// file by a CPU without that unit).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/kernels/kernels.h"

namespace tg::kernels {
namespace {

// Transposes the 16×16 block r[0..15] (row i in r[i]) in place: unpacks interleave row pairs,
// then row quads, within each 128-bit lane; two rounds of lane shuffles gather the four lanes.
// 64 shuffles per 256 floats, against 16 scattered loads per 16 floats for a gather.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + q], lane L: rows 4g..4g+3 of column 4L + q.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  // Row 4L + q of the result is lane L of u[q], u[4 + q], u[8 + q], u[12 + q].
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512 v01 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);  // lanes 0,1 of each
    const __m512 v23 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE);  // lanes 2,3 of each
    const __m512 w01 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
    const __m512 w23 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
    r[q] = _mm512_shuffle_f32x4(v01, w01, 0x88);
    r[4 + q] = _mm512_shuffle_f32x4(v01, w01, 0xDD);
    r[8 + q] = _mm512_shuffle_f32x4(v23, w23, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(v23, w23, 0xDD);
  }
}

// ---- bf16 rounding (kernels.h: f32_to_bf16), kept as float32 -----------------------------------
// c10's round to nearest even on the bits: u + 0x7FFF + (bit 16 of u), the top half kept; every
// NaN becomes 0x7FC0. Integer arithmetic, so MXCSR's DAZ/FTZ (set in the widening GEMM) change
// nothing. Not vcvtneps2bf16: it flushes denormals, which c10 keeps.
inline __m512 round_bf16_x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)),
                       _mm512_set1_epi32(int(0xFFFF0000u)));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r,
                                                     _mm512_set1_epi32(0x7FC00000)));
}

// One row of a bf16 GEMM micro-tile, 32 columns in lo and hi (lanes past the tile's n off in k0
// and k1), stored as table.h's Bf16TileOut says: float32 to c, or rounded once and then widened
// back to c (f32_rounded) or narrowed to its bf16 bits at c16 (bf16).
inline void store_bf16_tile_row(Bf16Out mode, float* c, uint16_t* c16, __m512 lo, __m512 hi,
                                __mmask16 k0, __mmask16 k1) {
  if (mode != Bf16Out::f32) lo = round_bf16_x16(lo), hi = round_bf16_x16(hi);
  if (mode != Bf16Out::bf16) {
    _mm512_mask_storeu_ps(c, k0, lo);
    _mm512_mask_storeu_ps(c + 16, k1, hi);
    return;
  }
  _mm512_mask_cvtepi32_storeu_epi16(c16, k0, _mm512_srli_epi32(_mm512_castps_si512(lo), 16));
  _mm512_mask_cvtepi32_storeu_epi16(c16 + 16, k1, _mm512_srli_epi32(_mm512_castps_si512(hi), 16));
}

// ---- bf16 gemv, 16 rows per lane group -----------------------------------------------------
// One zmm lane per row, so each lane runs its row's chain in order. Per chunk of 16 pairs of k,
// a group's 16 rows' 64 bytes are loaded (masked past cols: zeros, nothing read beyond the row)
// and transposed on the pairs' 32 bits, so t[q] holds pair q of every row; step(acc, x's pair q
// broadcast, t[q]) is one link of the chain (both halves of the pair, odd k first). Exactly
// (cols + 1) / 2 links run: a zero pair more would turn an acc of -0 into +0.

// The links of one chunk (len values from column p) into acc.
template <class Step>
inline __m512 gemv_links(__m512 acc, const __m512 t[16], const uint16_t* x, int64_t p, int64_t len,
                         int64_t cols, Step step) {
  if (len == 32) {  // whole pairs: x's pair q read as one 32-bit word
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) {
      int32_t xp;
      std::memcpy(&xp, x + p + 2 * q, 4);
      acc = step(acc, _mm512_set1_epi32(xp), _mm512_castps_si512(t[q]));
    }
    return acc;
  }
#pragma GCC unroll 16
  for (int q = 0; q < 16; ++q) {  // the last chunk; an odd cols pads x's last pair with a zero
    if (2 * q >= len) break;
    const int64_t k = p + 2 * q;
    const uint32_t xp = uint32_t(x[k]) | (k + 1 < cols ? uint32_t(x[k + 1]) << 16 : 0u);
    acc = step(acc, _mm512_set1_epi32(int(xp)), _mm512_castps_si512(t[q]));
  }
  return acc;
}

// Rows [0, rows) of w into y, rows <= 16·G: G groups of 16 side by side (the rows of the last
// group past `rows` read as zeros, nothing read or stored beyond), so G chains are in flight (with
// one group, GPT-2's out_head from memory ran 2.5× slower on Zen 5: the loads waited on one chain).
// Each group's chunk also prefetches 1 KiB of the next block, in memory order, into L2 (its 16·G
// rows are as many streams, too many for the hardware prefetchers; ~10% on out_head). In cache
// the 16×16 transposes, 4 shuffles a link, bound the kernel; a prefetch past the matrix is
// harmless.
template <int G, class Step>
void gemv_block(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw, const uint16_t* x,
                const float* b, float* y, Step step) {
  __m512 acc[G];
  __mmask16 kr[G];
  for (int j = 0; j < G; ++j) {
    kr[j] = __mmask16((1u << std::clamp<int64_t>(rows - 16 * j, 0, 16)) - 1u);
    acc[j] = b != nullptr ? _mm512_maskz_loadu_ps(kr[j], b + 16 * j) : _mm512_setzero_ps();
  }
  const char* next = reinterpret_cast<const char*>(w + 16 * G * ldw);
  for (int64_t p = 0; p < cols; p += 32) {
    const int64_t len = std::min<int64_t>(32, cols - p);
    const __mmask32 mask = len >= 32 ? ~__mmask32(0) : __mmask32((1u << len) - 1u);
#pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const uint16_t* wj = w + 16 * j * ldw + p;
      __m512 t[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        _mm_prefetch(next + (((p / 32) * G + j) * 16 + i) * 64, _MM_HINT_T1);
        t[i] = 16 * j + i < rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, wj + i * ldw))
                                 : _mm512_setzero_ps();
      }
      transpose16x16(t);
      acc[j] = gemv_links(acc[j], t, x, p, len, cols, step);
    }
  }
  for (int j = 0; j < G; ++j) _mm512_mask_storeu_ps(y + 16 * j, kr[j], acc[j]);
}

// Blocks of 64 rows, then groups of 16, the last one partial (a short key range of the batched
// GEMMs' one-row route would otherwise take the scalar reference).
template <class Step>
void gemv_rows_bf16_x16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                        const uint16_t* x, const float* b, float* y, Step step) {
  int64_t r = 0;
  for (; r + 64 <= rows; r += 64)
    gemv_block<4>(64, cols, w + r * ldw, ldw, x, b ? b + r : nullptr, y + r, step);
  for (; r < rows; r += 16)
    gemv_block<1>(std::min<int64_t>(16, rows - r), cols, w + r * ldw, ldw, x, b ? b + r : nullptr,
                  y + r, step);
}

// ---- the packed bf16 gemv (kernels.h: gemv_packed_bf16) ---------------------------------------
// The panels already hold t[q] of the loop above, so a link is one 64-byte load and the step: G
// groups' chains side by side again, each group a stream the prefetchers follow. rows (≤ 16·G)
// masks the last group's padding rows out of b and y.
template <int G, class Step>
void gemv_packed_groups(int64_t rows, int64_t cols, const uint32_t* p, const uint16_t* x,
                        const float* b, float* y, Step step) {
  const int64_t pairs = (cols + 1) / 2, whole = cols / 2;
  __m512 acc[G];
  __mmask16 mask[G];
  for (int j = 0; j < G; ++j) {
    const int64_t n = std::clamp<int64_t>(rows - 16 * j, 0, 16);
    mask[j] = __mmask16((1u << n) - 1u);
    acc[j] = b != nullptr ? _mm512_maskz_loadu_ps(mask[j], b + 16 * j) : _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < whole; ++q) {
    int32_t xp;
    std::memcpy(&xp, x + 2 * q, 4);
    const __m512i xi = _mm512_set1_epi32(xp);
#pragma GCC unroll 4
    for (int j = 0; j < G; ++j)
      acc[j] = step(acc[j], xi, _mm512_loadu_si512(p + (j * pairs + q) * 16));
  }
  if (whole < pairs) {  // an odd cols: x's last pair padded with a zero, as in the panels
    const __m512i xi = _mm512_set1_epi32(int(x[cols - 1]));
    for (int j = 0; j < G; ++j)
      acc[j] = step(acc[j], xi, _mm512_loadu_si512(p + (j * pairs + whole) * 16));
  }
  for (int j = 0; j < G; ++j) _mm512_mask_storeu_ps(y + 16 * j, mask[j], acc[j]);
}

// Blocks of 64 rows, then groups of 16, the last one partial.
template <class Step>
void gemv_packed_x16(int64_t rows, int64_t cols, const uint32_t* p, const uint16_t* x,
                     const float* b, float* y, Step step) {
  const int64_t pairs = (cols + 1) / 2;  // group r / 16 starts at word r · pairs
  int64_t r = 0;
  for (; r + 64 <= rows; r += 64)
    gemv_packed_groups<4>(64, cols, p + r * pairs, x, b ? b + r : nullptr, y + r, step);
  for (; r < rows; r += 16)
    gemv_packed_groups<1>(std::min<int64_t>(16, rows - r), cols, p + r * pairs, x,
                          b ? b + r : nullptr, y + r, step);
}

}  // namespace
}  // namespace tg::kernels
