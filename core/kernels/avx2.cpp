// AVX2 + FMA kernels, compiled with -mavx2 -mfma only; dispatch.cpp calls them only after
// cpu_x86.cpp found AVX2, FMA and OS support for the ymm state.
// Contents: the sgemm micro-kernel, the bf16 GEMM's and gemv (widening to float32), the bf16
// conversions, the vector type V for simd_generic.h, and the table.
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

// Lane masks for maskload/maskstore: row `n` enables the first n of 8 lanes.
alignas(32) constexpr int32_t kLaneMask[9][8] = {
    {0, 0, 0, 0, 0, 0, 0, 0},         {-1, 0, 0, 0, 0, 0, 0, 0},
    {-1, -1, 0, 0, 0, 0, 0, 0},       {-1, -1, -1, 0, 0, 0, 0, 0},
    {-1, -1, -1, -1, 0, 0, 0, 0},     {-1, -1, -1, -1, -1, 0, 0, 0},
    {-1, -1, -1, -1, -1, -1, 0, 0},   {-1, -1, -1, -1, -1, -1, -1, 0},
    {-1, -1, -1, -1, -1, -1, -1, -1},
};
__m256i lane_mask(int64_t n) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kLaneMask[n < 0 ? 0 : n > 8 ? 8 : n]));
}

// ---- sgemm micro-kernel, 6 × 16 ----------------------------------------------------------------
// Register allocation: ymm0-11 hold the 6×16 tile of C (row i in acc[i][0], acc[i][1]), two ymm
// hold the current row of the packed B micro-panel (16 floats), one ymm the broadcast A value:
// 15 of the 16 ymm registers. Per k: 2 loads + 6 broadcasts feed 12 FMAs.
// Edge tiles: the full tile is computed from zero-padded panels; stores are clipped with
// maskstore for n < 16 and a row bound for m < 6.
// MODE kRowA: A is read in place from a row-major matrix (row i at a + i·lda; rows ≥ m repeat
// row m − 1 so nothing past A is read) instead of a packed micro-panel; for small GEMMs.
// MODE kColA: A is read in place from a transposed matrix (a(i, p) = a[p·lda + i]): the packed
// layout with a row stride of lda instead of 6, so only full tiles (m = 6) may use it.
constexpr int kMR = 6, kNR = 16;
// kColA reads A's 6 values of each k-step from rows lda apart: fetch them this many steps ahead.
constexpr int64_t kPrefetchA = 8;
enum AMode { kPacked, kRowA, kColA };
template <int MODE>
void sgemm_ukernel_avx2_t(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  constexpr bool ROW_A = MODE == kRowA;
  const float* rows[kMR];
  if (ROW_A)
    for (int i = 0; i < kMR; ++i) rows[i] = a + std::min<int64_t>(i, m - 1) * lda;
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    if (MODE == kColA) {
      _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchA * lda), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchA * lda + kMR - 1), _MM_HINT_T0);
    }
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(ROW_A ? rows[i] + p : a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MODE == kRowA ? 0 : MODE == kColA ? lda : kMR;
    b += ldb;
  }
  if (m == kMR && n == kNR) {
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(ci));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, acc[i][0]);
      _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
    return;
  }
  const __m256i k0 = lane_mask(n), k1 = lane_mask(n - 8);
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    if (i >= m) break;
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_maskload_ps(ci, k0));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_maskload_ps(ci + 8, k1));
    }
    _mm256_maskstore_ps(ci, k0, acc[i][0]);
    _mm256_maskstore_ps(ci + 8, k1, acc[i][1]);
  }
}

void sgemm_ukernel_avx2_6x16(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                             int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  sgemm_ukernel_avx2_t<kPacked>(kc, a, 0, b, ldb, c, ldc, m, n, accumulate);
}
void sgemm_ukernel_avx2_6x16_rowa(int64_t kc, const float* a, int64_t lda, const float* b,
                                  int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                  bool accumulate) {
  sgemm_ukernel_avx2_t<kRowA>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}
void sgemm_ukernel_avx2_6x16_cola(int64_t kc, const float* a, int64_t lda, const float* b,
                                  int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                  bool accumulate) {
  sgemm_ukernel_avx2_t<kColA>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}

// t[p][i] = r[i][p] for i, p < 8: an 8×8 transpose in registers (r[i] holds 8 consecutive floats
// of source row i).
inline void transpose8(const __m256 r[8], __m256 t[8]) {
  const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
  // s0..s3: rows 0-3 of p {0,4}, {1,5}, {2,6}, {3,7} (one p per 128-bit lane); s4..s7: rows 4-7.
  const __m256 s0 = _mm256_shuffle_ps(u0, u2, 0x44), s1 = _mm256_shuffle_ps(u0, u2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(u1, u3, 0x44), s3 = _mm256_shuffle_ps(u1, u3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(u4, u6, 0x44), s5 = _mm256_shuffle_ps(u4, u6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(u5, u7, 0x44), s7 = _mm256_shuffle_ps(u5, u7, 0xEE);
  t[0] = _mm256_permute2f128_ps(s0, s4, 0x20), t[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  t[2] = _mm256_permute2f128_ps(s2, s6, 0x20), t[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  t[4] = _mm256_permute2f128_ps(s0, s4, 0x31), t[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  t[6] = _mm256_permute2f128_ps(s2, s6, 0x31), t[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Packs one 6×kc micro-panel of row-major A. Eight k at a time: six row loads, an 8×8 transpose
// in registers (rows 6 and 7 zero) and eight stores of 8 floats, each overlapping the next by the
// two padding lanes (the last masked, as nothing follows it); the k left over, one masked gather
// and one masked store each (a gather per k is far slower when A's rows are pages apart).
void sgemm_pack_a_avx2_6(int64_t kc, const float* A, int64_t rsA, float* out) {
  const __m256i rows = lane_mask(kMR);
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m256 r[8], t[8];
    for (int i = 0; i < kMR; ++i) r[i] = _mm256_loadu_ps(A + i * rsA + p);
    r[6] = r[7] = _mm256_setzero_ps();
    transpose8(r, t);
    float* o = out + p * kMR;
    for (int q = 0; q < 7; ++q) _mm256_storeu_ps(o + q * kMR, t[q]);
    _mm256_maskstore_ps(o + 7 * kMR, rows, t[7]);
  }
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 0, 0),
                                         _mm256_set1_epi32(static_cast<int32_t>(rsA)));
  for (; p < kc; ++p) {
    const __m256 v =
        _mm256_mask_i32gather_ps(_mm256_setzero_ps(), A + p, idx, _mm256_castsi256_ps(rows), 4);
    _mm256_maskstore_ps(out + p * kMR, rows, v);
  }
}

// Packs one kc×16 micro-panel of a transposed B (column j at B + j·csB). Eight k at a time: two
// 8×8 transposes of eight column pieces each; the k left over, two gathers of 8 column values
// each (a gather per k is far slower: columns are pages apart).
void sgemm_pack_b_avx2_16(int64_t kc, const float* B, int64_t csB, float* out) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 r[8], t[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(B + (half * 8 + j) * csB + p);
      transpose8(r, t);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * 16 + half * 8, t[q]);
    }
  }
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(static_cast<int32_t>(csB)));
  const float* B8 = B + 8 * csB;
  for (; p < kc; ++p) {
    _mm256_storeu_ps(out + p * 16, _mm256_i32gather_ps(B + p, idx, 4));
    _mm256_storeu_ps(out + p * 16 + 8, _mm256_i32gather_ps(B8 + p, idx, 4));
  }
}

// One pair-row of bf16 panels from rows r0 and r1 (nullptr: zeros), n columns (a multiple of 4)
// left to right. Per 16 columns, unpacks pair each row's words within 128-bit lanes, giving four
// pieces of 4 pairs (16 bytes), each stored in its panel (w a multiple of 4: a piece never
// straddles two); the columns past the last 16, 4 at a time.
void pack_pair_row_avx2(int64_t n, int64_t w, const uint16_t* r0, const uint16_t* r1, uint16_t* out,
                        int64_t ps) {
  int64_t off = 0;  // pairs into the current panel
  auto put = [&](__m128i piece) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * off), piece);
    if ((off += 4) == w) off = 0, out += ps;
  };
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + j));
    const __m256i b = r1 != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + j))
                                    : _mm256_setzero_si256();
    const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
    put(_mm256_castsi256_si128(lo));       // columns j .. j + 3
    put(_mm256_castsi256_si128(hi));       // j + 4 .. j + 7
    put(_mm256_extracti128_si256(lo, 1));  // j + 8 .. j + 11
    put(_mm256_extracti128_si256(hi, 1));  // j + 12 .. j + 15
  }
  for (; j < n; j += 4) {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + j));
    const __m128i b = r1 != nullptr ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1 + j))
                                    : _mm_setzero_si128();
    put(_mm_unpacklo_epi16(a, b));
  }
}

// Packs pair panels from rows of k (table.h: gemm_bf16_pack_pairs), one pair of rows at a time
// across the given panels, the rows kPackPairsAhead pairs on prefetched (they are pages apart,
// where the hardware prefetcher does not follow). Widths not a multiple of 4 (none of this table's)
// take the portable rule.
void gemm_bf16_pack_pairs_avx2(int64_t kc, int64_t panels, int64_t w, const uint16_t* src,
                               int64_t rs, uint16_t* out, int64_t ps) {
  constexpr int64_t kPackPairsAhead = 4;
  const int64_t n = panels * w;
  for (int64_t k = 0; k < kc; k += 2, out += 2 * w) {
    const uint16_t* r0 = src + k * rs;
    const uint16_t* r1 = k + 1 < kc ? r0 + rs : nullptr;
    if (w % 4 == 0) {
      if (k + 2 * kPackPairsAhead < kc)
        for (int64_t c = 0; c < n; c += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(r0 + 2 * kPackPairsAhead * rs + c),
                       _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(r0 + (2 * kPackPairsAhead + 1) * rs + c),
                       _MM_HINT_T0);
        }
      pack_pair_row_avx2(n, w, r0, r1, out, ps);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      out[j / w * ps + j % w * 2] = r0[j];
      out[j / w * ps + j % w * 2 + 1] = r1 != nullptr ? r1[j] : 0;
    }
  }
}

// Packs one pair panel from lines along k (table.h: gemm_bf16_pack_lines): per 8 lines and 8
// pairs of k, each line's 16 bf16 in one load (the last k, from a zero-padded copy: an odd kc's
// last pair gets a zero half and nothing past kc is read; lines past `lines` are zeros), an 8×8
// transpose on the pairs' 32 bits, and 8 pair-rows stored, 8 or 4 lanes (w a multiple of 4: the
// widths 4 and 16 of this table; other widths take the portable rule).
void gemm_bf16_pack_lines_avx2(int64_t kc, int64_t lines, int64_t w, const uint16_t* src,
                               int64_t rs, uint16_t* out) {
  const int64_t kp = (kc + 1) / 2;
  if (w % 4 != 0) {
    for (int64_t q = 0; q < kp; ++q)
      for (int64_t i = 0; i < w; ++i)
        for (int64_t t = 0; t < 2; ++t)
          out[(q * w + i) * 2 + t] = i < lines && 2 * q + t < kc ? src[i * rs + 2 * q + t] : 0;
    return;
  }
  for (int64_t g = 0; g < w; g += 8) {
    const int64_t rows = std::clamp<int64_t>(lines - g, 0, 8), width = std::min<int64_t>(8, w - g);
    for (int64_t q0 = 0; q0 < kp; q0 += 8) {
      const int64_t len = std::min<int64_t>(16, kc - 2 * q0);
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) {
        const uint16_t* line = src + (g + i) * rs + 2 * q0;
        alignas(32) uint16_t tail[16];
        if (i < rows && len < 16) {  // zeroed here only: whole chunks skip it
          std::memset(tail, 0, sizeof tail);
          std::memcpy(tail, line, sizeof(uint16_t) * size_t(len));
          line = tail;
        }
        r[i] =
            i >= rows ? _mm256_setzero_ps() : _mm256_loadu_ps(reinterpret_cast<const float*>(line));
      }
      transpose8(r, t);
      const int64_t pairs = std::min<int64_t>(8, kp - q0);
      for (int64_t q = 0; q < pairs; ++q) {
        float* o = reinterpret_cast<float*>(out + ((q0 + q) * w + g) * 2);
        if (width == 8)
          _mm256_storeu_ps(o, t[q]);
        else
          _mm_storeu_ps(o, _mm256_castps256_ps128(t[q]));
      }
    }
  }
}

// ---- bf16 GEMM micro-kernel, 4 × 16, widening to float32 ----------------------------------------
// The bf16 unit's arithmetic (kernels.h) from float32 FMAs: the product of two bf16 is exact in
// float32, so an FMA rounds the same sum the unit does, in the unit's order (the odd k of a pair
// first); the unit's zero for denormal inputs and its flush of results tiny after rounding are
// MXCSR's DAZ and FTZ (x86 detects tininess after rounding, as the unit does), set for the call and
// restored. Measured identical to vdpbf16ps over 31 million crafted and random steps on Zen 5. A
// pair (32 bits) widens with a mask (the odd k, its high half) and a shift (the even k). Registers:
// 8 accumulators, 4 widened B halves, 2 widened A values: 14 of 16 ymm.
constexpr int kBf16MR = 4, kBf16NR = 16;
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)

// float32 → bf16 as c10 rounds (kernels.h): u + 0x7FFF + (bit 16 of u), the top half kept, as a
// float32; every NaN becomes 0x7FC0. Integer arithmetic: DAZ/FTZ change nothing.
inline __m256 round_bf16_x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)),
                       _mm256_set1_epi32(int(0xFFFF0000u)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), nan));
}

// One row of the micro-tile, 16 columns in lo and hi (n of them; mask0 and mask1 their lanes),
// stored as table.h's Bf16TileOut says: float32 to c, or rounded once and then widened back to c
// (f32_rounded) or narrowed to its bf16 bits at c16 (bf16; no 16-bit masked store on AVX2, so a
// short row goes through a buffer).
inline void store_bf16_tile_row(Bf16Out mode, float* c, uint16_t* c16, __m256 lo, __m256 hi,
                                __m256i mask0, __m256i mask1, int64_t n) {
  if (mode != Bf16Out::f32) lo = round_bf16_x8(lo), hi = round_bf16_x8(hi);
  if (mode != Bf16Out::bf16) {
    _mm256_maskstore_ps(c, mask0, lo);
    _mm256_maskstore_ps(c + 8, mask1, hi);
    return;
  }
  // packus works per 128-bit lane (lo 0-3, hi 0-3, lo 4-7, hi 4-7); the permute puts them in order.
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(lo), 16),
                                                   _mm256_srli_epi32(_mm256_castps_si256(hi), 16)),
                               0xD8);
  if (n >= kBf16NR) return _mm256_storeu_si256(reinterpret_cast<__m256i*>(c16), packed);
  alignas(32) uint16_t row[kBf16NR];
  _mm256_store_si256(reinterpret_cast<__m256i*>(row), packed);
  std::memcpy(c16, row, sizeof(uint16_t) * size_t(n));
}

void gemm_bf16_ukernel_avx2_4x16(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                                 int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                 const Bf16TileOut& out) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kFtzDaz);
  __asm__ volatile("" ::: "memory");  // no load of C or the panels before the mode is set
  const __m256i mask0 = lane_mask(n), mask1 = lane_mask(n - 8);
  __m256 acc[kBf16MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < kBf16MR; ++i) {
    const bool load = accumulate && i < m;
    acc[i][0] = load ? _mm256_maskload_ps(c + i * ldc, mask0) : _mm256_setzero_ps();
    acc[i][1] = load ? _mm256_maskload_ps(c + i * ldc + 8, mask1) : _mm256_setzero_ps();
  }
  const __m256i high = _mm256_set1_epi32(int(0xFFFF0000u));
  for (int64_t q = 0; q < kp; ++q) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256 b0o = _mm256_castsi256_ps(_mm256_and_si256(b0, high));
    const __m256 b0e = _mm256_castsi256_ps(_mm256_slli_epi32(b0, 16));
    const __m256 b1o = _mm256_castsi256_ps(_mm256_and_si256(b1, high));
    const __m256 b1e = _mm256_castsi256_ps(_mm256_slli_epi32(b1, 16));
#pragma GCC unroll 4
    for (int i = 0; i < kBf16MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, 4);
      const __m256i ai = _mm256_set1_epi32(pair);
      const __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(ai, high));
      const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(ai, 16));
      acc[i][0] = _mm256_fmadd_ps(ae, b0e, _mm256_fmadd_ps(ao, b0o, acc[i][0]));
      acc[i][1] = _mm256_fmadd_ps(ae, b1e, _mm256_fmadd_ps(ao, b1o, acc[i][1]));
    }
    a += 2 * kBf16MR;
    b += 2 * kBf16NR;
  }
#pragma GCC unroll 4
  for (int i = 0; i < kBf16MR; ++i) {
    if (i >= m) break;
    store_bf16_tile_row(out.mode, c + i * ldc, out.c16 + i * out.ld16, acc[i][0], acc[i][1], mask0,
                        mask1, n);
  }
  __asm__ volatile("" ::: "memory");  // every store done before the mode is restored
  _mm_setcsr(csr);
}

// ---- bf16 gemv (kernels.h: gemv_rows_bf16), 8 rows at a time, widening to float32 -----------
// One ymm lane per row, so each lane runs its row's chain in order, with the GEMM kernel's FMAs
// and MXCSR modes above (the same bits as gemm_bf16). Rows are read in place: 8 rows × 8 pairs
// of k (32 bytes each) are loaded and transposed (transpose8 on the pairs' 32 bits) so that t[q]
// holds pair q of the 8 rows; the last, short chunk is copied into a zeroed buffer first (no
// 16-bit masked load on AVX2). Rows past the last group of 8 take the reference.
constexpr int64_t kGemvRows = 8;
void gemv_rows_bf16_avx2(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                         const uint16_t* x, const float* b, float* y) {
  const int64_t full = rows / kGemvRows * kGemvRows;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kFtzDaz);
  __asm__ volatile("" ::: "memory");  // no load of b or the operands before the mode is set
  const __m256i high = _mm256_set1_epi32(int(0xFFFF0000u));
  // x's pair q: its odd k (the high half) and its even k, widened; an odd cols pads a zero.
  auto pair_step = [&](__m256 acc, int64_t k, __m256 wq) {
    const uint32_t xp = uint32_t(x[k]) | (k + 1 < cols ? uint32_t(x[k + 1]) << 16 : 0u);
    const __m256i xi = _mm256_set1_epi32(int(xp)), wi = _mm256_castps_si256(wq);
    const __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xi, high));
    const __m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(xi, 16));
    const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(wi, high));
    const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(wi, 16));
    return _mm256_fmadd_ps(xe, we, _mm256_fmadd_ps(xo, wo, acc));
  };
  alignas(32) uint16_t tail[kGemvRows][16];
  for (int64_t r = 0; r < full; r += kGemvRows) {
    __m256 acc = b != nullptr ? _mm256_loadu_ps(b + r) : _mm256_setzero_ps();
    for (int64_t p = 0; p < cols; p += 16) {
      const int64_t len = std::min<int64_t>(16, cols - p);
      __m256 rr[8], t[8];
      for (int i = 0; i < 8; ++i)
        rr[i] = _mm256_loadu_ps(
            reinterpret_cast<const float*>(gemv_chunk(w + (r + i) * ldw + p, len, 16, tail[i])));
      transpose8(rr, t);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {  // unrolled: t stays in registers
        if (2 * q >= len) break;
        acc = pair_step(acc, p + 2 * q, t[q]);
      }
    }
    _mm256_storeu_ps(y + r, acc);
  }
  __asm__ volatile("" ::: "memory");  // every store done before the mode is restored
  _mm_setcsr(csr);
  gemv_rows_bf16_ref(rows - full, cols, w + full * ldw, ldw, x, b ? b + full : nullptr, y + full);
}

// ---- one row of A times a row-major B in bf16 (table.h: gemm_bf16_row_axpys) -----------------
// One lane per column of C: per pair of k, the two rows' 8-column pieces widen to float32 and take
// the GEMM kernel's two FMAs (odd k first) under its MXCSR modes; an odd k's last pair has a zero
// odd half, as the padded pair. Columns past the last whole 8 take the reference (no 16-bit
// masked loads).
void gemm_bf16_row_axpys_avx2(int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                              int64_t ldb, float* c, bool accumulate) {
  const int64_t full = n / 8 * 8;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kFtzDaz);
  __asm__ volatile("" ::: "memory");  // no load of the operands before the mode is set
  auto widen = [](const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  };
  auto set1 = [](uint16_t h) {
    return _mm256_castsi256_ps(_mm256_set1_epi32(int(uint32_t(h) << 16)));
  };
  for (int64_t j = 0; j < full; j += 8) {
    __m256 acc = accumulate ? _mm256_loadu_ps(c + j) : _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p += 2) {
      const bool odd = p + 1 < k;
      const __m256 bo = odd ? widen(b + (p + 1) * ldb + j) : _mm256_setzero_ps();
      acc = _mm256_fmadd_ps(set1(a[p]), widen(b + p * ldb + j),
                            _mm256_fmadd_ps(set1(odd ? a[p + 1] : uint16_t(0)), bo, acc));
    }
    _mm256_storeu_ps(c + j, acc);
  }
  __asm__ volatile("" ::: "memory");  // every store done before the mode is restored
  _mm_setcsr(csr);
  gemm_bf16_row_axpys_ref(n - full, k, a, b + full, ldb, c + full, accumulate);
}

// ---- V: 8 floats in a ymm ----------------------------------------------------------------------
struct V {
  using T = __m256;
  using M = __m256;  // all-ones / all-zeros lanes
  static constexpr int W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  // The first n lanes (0 <= n <= 8) from p, zeros after; nothing past them is read.
  static T load_first(const float* p, int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane));
  }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float f) { return _mm256_set1_ps(f); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  // bf16 (kernels.h's rounding): 8 widened exactly; rounded to nearest even with NaN as 0x7FC0,
  // kept as float32; two rounded vectors paired (lo's bf16 in the low half of each 32-bit lane,
  // hi's above); and a rounded vector's top halves stored.
  static T load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static T round_bf16(T v) { return round_bf16_x8(v); }
  static T pair_bf16(T lo, T hi) {
    return _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(lo), 16), _mm256_castps_si256(hi)));
  }
  static void store_bf16(uint16_t* p, T v) {
    const __m256i s = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(s, s), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static T sqrt(T a) { return _mm256_sqrt_ps(a); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T round_nearest(T a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // y · 2^n as y · 2^(n>>1) · 2^(n − (n>>1)): each factor is a normal float for n in [-150, 128].
  static T ldexp_int(T y, T n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const T s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const T s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
  }
  static T ldexp_normal(T y, T n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  }
  static float hsum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(T v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static M is_nan(T v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }
  static M lt(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static T select(M m, T a, T b) { return _mm256_blendv_ps(b, a, m); }
  static M mask_u8(const uint8_t* p) {
    const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i zero = _mm256_cmpeq_epi32(w, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_xor_si256(zero, _mm256_set1_epi32(-1)));
  }
};

// ---- bfloat16 conversions ---------------------------------------------------------------------
// float32 → bf16 as c10 rounds (kernels.h), through V's bf16 members (the AdamW kernel's too); the
// tails by the reference.
void f32_to_bf16_avx2(int64_t n, const float* x, uint16_t* out) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store_bf16(out + i, V::round_bf16(V::load(x + i)));
  f32_to_bf16_ref(n - i, x + i, out + i);
}
void bf16_to_f32_avx2(int64_t n, const uint16_t* x, float* out) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(out + i, V::load_bf16(x + i));
  bf16_to_f32_ref(n - i, x + i, out + i);
}

#include "core/kernels/simd_generic.h"

// Peak probe: 12 independent FMA chains (more than 2 ports × 4-cycle latency = 8 in flight).
double fma_probe_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.f + 0.01f * i);
  const __m256 mul = _mm256_set1_ps(0.9999999f), add = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  volatile float sink = V::hsum(s);
  (void)sink;
  return double(iters) * 12 * 8 * 2;
}

}  // namespace

// Blocking: A micro-panel 6×256 floats = 6 KiB in L1, B panel 256×1024 floats = 1 MiB in L2.
const KernelTable* avx2_table() {
  static const KernelTable t = {
      .name = "avx2",
      .sgemm_blocking = {kMR, kNR, 240, 256, 1024},
      .sgemm_ukernel = sgemm_ukernel_avx2_6x16,
      .sgemm_ukernel_rowa = sgemm_ukernel_avx2_6x16_rowa,
      .sgemm_ukernel_cola = sgemm_ukernel_avx2_6x16_cola,
      .sgemm_pack_a_rowmajor = sgemm_pack_a_avx2_6,
      .sgemm_pack_b_colmajor = sgemm_pack_b_avx2_16,
#include "core/kernels/simd_table_entries.inc"
      .fma_probe = fma_probe_avx2,
      .f32_to_bf16 = f32_to_bf16_avx2,
      .bf16_to_f32 = bf16_to_f32_avx2,
      .gemm_bf16_blocking = {kBf16MR, kBf16NR, 240, 256, 1024},
      .gemm_bf16_ukernel = gemm_bf16_ukernel_avx2_4x16,
      .gemm_bf16_pack_pairs = gemm_bf16_pack_pairs_avx2,
      .gemm_bf16_pack_lines = gemm_bf16_pack_lines_avx2,
      .gemv_rows_bf16 = gemv_rows_bf16_avx2,
      .gemv_packed_bf16 = nullptr,
      .bf16_probe = nullptr,
      .sgemm_row_dots = sgemm_row_dots_simd,
      .sgemm_row_axpys = sgemm_row_axpys_simd,
      .gemm_bf16_row_axpys = gemm_bf16_row_axpys_avx2,
  };
  return &t;
}

}  // namespace tg::kernels
