// AVX-512 kernels (F, DQ, BW, VL), compiled with -mavx512f -mavx512dq -mavx512bw -mavx512vl
// -mavx2 -mfma only; dispatch.cpp calls them only after cpu_x86.cpp found those features.
// Contents: the sgemm micro-kernel, the bf16 GEMM's and gemv (widening to float32), the bf16
// conversions, the vector type V for simd_generic.h, and the table (avx512_bf16.cpp copies it).
// Shape legend: see kernels.h; packed panel layout: see table.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/kernels/avx512_shared.h"
#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// ---- sgemm micro-kernel, 12 × 32 ------------------------------------------------------------
// Register allocation (ROWS = 12): zmm0-23 hold the 12×32 tile of C (row i in acc[i][0],
// acc[i][1]), two zmm hold the current row of the packed B micro-panel (32 floats), and A values
// are broadcast from memory, so 24 FMAs need 2 vector loads + 12 broadcasts per k: the two FMA
// ports, not the load ports, are the bottleneck.
// Edge tiles: packed panels are zero-padded to 12 rows and 32 columns, but a tile of m ≤ 4 or
// m ≤ 8 rows runs the ROWS = 4 / 8 instance, which computes only those rows (e.g. M = 64 = 5·12 + 4
// would otherwise waste 8 of 64 rows of work); the store is clipped with a lane mask for n < 32
// and a row bound for m < ROWS. A row's FMAs are the same whatever ROWS is, so results do not
// depend on which instance computed a tile.
// MODE kRowA: A is read in place from a row-major matrix (row i at a + i·lda, rows ≥ m repeat
// row m − 1 so nothing past A is read) instead of from a packed micro-panel; for small GEMMs. The
// 12 row pointers need 12 general registers, so a few live in spare zmm/stack slots: ~1 extra
// load per 24 FMAs, far cheaper than packing A when there are only a few column panels.
// MODE kColA: A is read in place from a transposed matrix (a(i, p) = a[p·lda + i]): the packed
// layout with a row stride of lda instead of 12, so only full tiles (m = 12) may use it.
constexpr int kMR = 12;
// B prefetch distance in k-steps (4 KiB of a packed panel ahead): far enough for a B read in
// place from memory, and no cost for L2-resident packed panels.
constexpr int64_t kPrefetchB = 32;
// A stored transposed (kColA) is read 12 floats per k-step from rows lda apart: fetch them
// this many k-steps ahead, as the packing loop would.
constexpr int64_t kPrefetchA = 8;
enum AMode { kPacked, kRowA, kColA };
template <int ROWS, int MODE>
void sgemm_ukernel_avx512_t(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  constexpr bool ROW_A = MODE == kRowA;
  const float* rows[ROWS];
  if (ROW_A)
    for (int i = 0; i < ROWS; ++i) rows[i] = a + std::min<int64_t>(i, m - 1) * lda;
  __m512 acc[ROWS][2];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    // Fetch the C tile now so its (often 4 KiB-aliased) rows are in L1 by the final update.
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 31), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < kc; ++p) {
    // B streams from L2 (or memory): ask for it kPrefetchB k-steps ahead (two lines per step).
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * ldb), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * ldb + 16), _MM_HINT_T0);
    if (MODE == kColA) {
      _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchA * lda), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchA * lda + 11), _MM_HINT_T0);
    }
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
      const __m512 ai = _mm512_set1_ps(ROW_A ? rows[i][p] : a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MODE == kRowA ? 0 : MODE == kColA ? lda : kMR;
    b += ldb;
  }
  if (m == ROWS && n == 32) {
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
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
  for (int i = 0; i < ROWS; ++i) {
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

// The smallest instance that covers m rows.
template <int MODE>
void sgemm_ukernel_avx512_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                               float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  if (m > 8)
    sgemm_ukernel_avx512_t<12, MODE>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
  else if (m > 4)
    sgemm_ukernel_avx512_t<8, MODE>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
  else
    sgemm_ukernel_avx512_t<4, MODE>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}

void sgemm_ukernel_avx512_12x32(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                                int64_t ldc, int64_t m, int64_t n, bool accumulate) {
  sgemm_ukernel_avx512_rows<kPacked>(kc, a, 0, b, ldb, c, ldc, m, n, accumulate);
}
void sgemm_ukernel_avx512_12x32_rowa(int64_t kc, const float* a, int64_t lda, const float* b,
                                     int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                     bool accumulate) {
  sgemm_ukernel_avx512_rows<kRowA>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}
void sgemm_ukernel_avx512_12x32_cola(int64_t kc, const float* a, int64_t lda, const float* b,
                                     int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                     bool accumulate) {
  sgemm_ukernel_avx512_t<kMR, kColA>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate);
}

// Loads `rows` source rows of 16 consecutive floats (row i at src + i·stride; only the first
// `len` floats of each, the rest and rows ≥ `rows` read as zero), transposes them, and stores
// result row q (q < len) as `rows` floats at out + q·ostride.
inline void transpose_rows(const float* src, int64_t stride, int rows, int64_t len, float* out,
                           int64_t ostride) {
  __m512 r[16];
  const __mmask16 kl = len >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << len) - 1u);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(kl, src + i * stride) : _mm512_setzero_ps();
  transpose16x16(r);
  const __mmask16 kr = __mmask16((1u << rows) - 1u);
#pragma GCC unroll 16
  for (int q = 0; q < 16; ++q)
    if (q < len) _mm512_mask_storeu_ps(out + q * ostride, kr, r[q]);
}

// Packs one 12×kc micro-panel of row-major A: 16 k-steps at a time, the 12 row pieces are
// transposed in registers (4 zero rows pad the square) and stored 12 floats per k.
void sgemm_pack_a_avx512_12(int64_t kc, const float* A, int64_t rsA, float* out) {
  for (int64_t p = 0; p < kc; p += 16)
    transpose_rows(A + p, rsA, kMR, std::min<int64_t>(16, kc - p), out + p * kMR, kMR);
}

// Packs one kc×32 micro-panel of a transposed B (column j at B + j·csB, contiguous in k): per 16
// k-steps, each 16-column half is a 16×16 transpose stored as half-rows of the panel.
void sgemm_pack_b_avx512_32(int64_t kc, const float* B, int64_t csB, float* out) {
  const float* B16 = B + 16 * csB;
  for (int64_t p = 0; p < kc; p += 16) {
    const int64_t len = std::min<int64_t>(16, kc - p);
    transpose_rows(B + p, csB, 16, len, out + p * 32, 32);
    transpose_rows(B16 + p, csB, 16, len, out + p * 32 + 16, 32);
  }
}

// Packs pair panels from rows of k (table.h: gemm_bf16_pack_pairs), one pair of rows at a time
// across the given panels. Per panel, up to 32 columns at a time: each row's piece in one masked
// load, two vpermt2w pick the pairs (word 2j from row 2q's j, 2j + 1 from row 2q + 1's: index 32 +
// j), one or two masked stores. An odd kc's last row has no partner: its load's mask is empty
// (zeros, nothing read). The rows kPackPairsAhead pairs on are prefetched: they are pages apart,
// where the hardware prefetcher does not follow.
void gemm_bf16_pack_pairs_avx512(int64_t kc, int64_t panels, int64_t w, const uint16_t* src,
                                 int64_t rs, uint16_t* out, int64_t ps) {
  constexpr int64_t kPackPairsAhead = 4;
  alignas(64) uint16_t idx[64];
  for (int l = 0; l < 64; ++l) idx[l] = uint16_t((l & 1) * 32 + l / 2);
  const __m512i lo_idx = _mm512_load_si512(idx), hi_idx = _mm512_load_si512(idx + 32);
  const int64_t width = panels * w;  // columns read from each row
  for (int64_t k = 0; k < kc; k += 2, out += 2 * w) {
    const uint16_t* r0 = src + k * rs;
    const uint16_t* r1 = k + 1 < kc ? r0 + rs : r0;
    const __mmask32 has_r1 = k + 1 < kc ? ~__mmask32(0) : 0;
    if (k + 2 * kPackPairsAhead < kc)
      for (int64_t c = 0; c < width; c += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(r0 + 2 * kPackPairsAhead * rs + c), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r1 + 2 * kPackPairsAhead * rs + c), _MM_HINT_T0);
      }
    uint16_t* o = out;
    for (int64_t p = 0; p < panels; ++p, o += ps) {
      for (int64_t c = 0; c < w; c += 32) {
        const int64_t len = std::min<int64_t>(32, w - c), at = p * w + c;
        const __mmask32 m = len == 32 ? ~__mmask32(0) : __mmask32((1u << len) - 1u);
        const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + at);
        const __m512i b = _mm512_maskz_loadu_epi16(m & has_r1, r1 + at);
        const __m512i lo = _mm512_permutex2var_epi16(a, lo_idx, b);
        if (len <= 16) {
          _mm512_mask_storeu_epi32(o + 2 * c, __mmask16((1u << len) - 1u), lo);
          continue;
        }
        _mm512_storeu_si512(o + 2 * c, lo);
        _mm512_mask_storeu_epi32(o + 2 * c + 32, __mmask16((1u << (len - 16)) - 1u),
                                 _mm512_permutex2var_epi16(a, hi_idx, b));
      }
    }
  }
}

// Packs one pair panel from lines along k (table.h: gemm_bf16_pack_lines): per 16 pairs of k and
// 16 lines, each line's 32 bf16 in one load (masked for an odd kc's last pair, which gets a zero
// half, and nothing past kc is read; lines past `lines` are zeros), transposed on the pairs' 32
// bits (transpose16x16), and stored as 16 pair-rows of the group's lanes of the panel.
// W: the panel's width and lines, when known at compile time (whole panels of the tables'
// widths: a quarter faster on Zen 5, the zero rows and the addressing folded), else 0.
template <int64_t W>
void pack_lines_t(int64_t kc, int64_t lines, int64_t w, const uint16_t* src, int64_t rs,
                  uint16_t* out) {
  if constexpr (W > 0) lines = w = W;
  const int64_t kp = (kc + 1) / 2;
  for (int64_t q0 = 0; q0 < kp; q0 += 16) {
    const int64_t len = std::min<int64_t>(32, kc - 2 * q0), pairs = std::min<int64_t>(16, kp - q0);
    const __mmask32 m = len == 32 ? ~__mmask32(0) : __mmask32((1u << len) - 1u);
    for (int64_t g = 0; g < w; g += 16) {
      const int64_t rows = std::clamp<int64_t>(lines - g, 0, 16);
      const __mmask16 kw = __mmask16((1u << std::min<int64_t>(16, w - g)) - 1u);
      const uint16_t* line = src + g * rs + 2 * q0;
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if (i >= rows)
          r[i] = _mm512_setzero_ps();
        else if (len == 32)  // whole: a plain load
          r[i] = _mm512_loadu_ps(line + i * rs);
        else
          r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, line + i * rs));
      }
      transpose16x16(r);
      uint16_t* o = out + (q0 * w + g) * 2;
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q)  // unrolled, so r stays in registers
        if (q < pairs) _mm512_mask_storeu_ps(o + q * w * 2, kw, r[q]);
    }
  }
}

void gemm_bf16_pack_lines_avx512(int64_t kc, int64_t lines, int64_t w, const uint16_t* src,
                                 int64_t rs, uint16_t* out) {
  if (lines == w && w == 8) return pack_lines_t<8>(kc, lines, w, src, rs, out);
  if (lines == w && w == 12) return pack_lines_t<12>(kc, lines, w, src, rs, out);
  if (lines == w && w == 32) return pack_lines_t<32>(kc, lines, w, src, rs, out);
  pack_lines_t<0>(kc, lines, w, src, rs, out);
}

// ---- bf16 GEMM micro-kernel, 8 × 32, widening to float32 --------------------------------------
// For CPUs without AVX512_BF16 (TAPEGRAD_ISA=avx512 forces it where the unit exists): the unit's
// arithmetic from float32 FMAs, as avx2.cpp's kernel does it (exact products; MXCSR's DAZ and
// FTZ for the unit's denormal handling, set for the call). A pair (32 bits) widens with a mask
// (the odd k) and a shift (the even k). Registers: 16 accumulators, 4 widened B halves, 2 A.
constexpr int kBf16MR = 8, kBf16NR = 32;
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
void gemm_bf16_ukernel_avx512_8x32(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                                   int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                   const Bf16TileOut& out) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kFtzDaz);
  __asm__ volatile("" ::: "memory");  // no load of C or the panels before the mode is set
  const uint32_t bits = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1u);
  const __mmask16 k0 = static_cast<__mmask16>(bits), k1 = static_cast<__mmask16>(bits >> 16);
  __m512 acc[kBf16MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < kBf16MR; ++i) {
    const bool load = accumulate && i < m;
    acc[i][0] = load ? _mm512_maskz_loadu_ps(k0, c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = load ? _mm512_maskz_loadu_ps(k1, c + i * ldc + 16) : _mm512_setzero_ps();
  }
  const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
  for (int64_t q = 0; q < kp; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 32);
    const __m512 b0o = _mm512_castsi512_ps(_mm512_and_si512(b0, high));
    const __m512 b0e = _mm512_castsi512_ps(_mm512_slli_epi32(b0, 16));
    const __m512 b1o = _mm512_castsi512_ps(_mm512_and_si512(b1, high));
    const __m512 b1e = _mm512_castsi512_ps(_mm512_slli_epi32(b1, 16));
#pragma GCC unroll 8
    for (int i = 0; i < kBf16MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, 4);
      const __m512i ai = _mm512_set1_epi32(pair);
      const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(ai, high));
      const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(ai, 16));
      acc[i][0] = _mm512_fmadd_ps(ae, b0e, _mm512_fmadd_ps(ao, b0o, acc[i][0]));
      acc[i][1] = _mm512_fmadd_ps(ae, b1e, _mm512_fmadd_ps(ao, b1o, acc[i][1]));
    }
    a += 2 * kBf16MR;
    b += 2 * kBf16NR;
  }
#pragma GCC unroll 8
  for (int i = 0; i < kBf16MR; ++i) {
    if (i >= m) break;
    store_bf16_tile_row(out.mode, c + i * ldc, out.c16 + i * out.ld16, acc[i][0], acc[i][1], k0,
                        k1);
  }
  __asm__ volatile("" ::: "memory");  // every store done before the mode is restored
  _mm_setcsr(csr);
}

// ---- bf16 gemv (kernels.h: gemv_rows_bf16), widening to float32 ------------------------------
// avx512_shared.h's loop with the GEMM kernel's step above: two FMAs per pair (odd k first) under
// DAZ and FTZ, set for the call.
struct WidenStep {
  __m512 operator()(__m512 acc, __m512i xi, __m512i wi) const {
    const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
    const __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(xi, high));
    const __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(xi, 16));
    const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wi, high));
    const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wi, 16));
    return _mm512_fmadd_ps(xe, we, _mm512_fmadd_ps(xo, wo, acc));
  }
};

// Runs body under DAZ and FTZ, the unit's reading of denormals.
template <class F>
void with_ftz_daz(F body) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kFtzDaz);
  __asm__ volatile("" ::: "memory");  // no load of b or the operands before the mode is set
  body();
  __asm__ volatile("" ::: "memory");  // every store done before the mode is restored
  _mm_setcsr(csr);
}

void gemv_rows_bf16_avx512(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                           const uint16_t* x, const float* b, float* y) {
  with_ftz_daz([&] { gemv_rows_bf16_x16(rows, cols, w, ldw, x, b, y, WidenStep{}); });
}

void gemv_packed_bf16_avx512(int64_t rows, int64_t cols, const uint32_t* panels, const uint16_t* x,
                             const float* b, float* y) {
  with_ftz_daz([&] { gemv_packed_x16(rows, cols, panels, x, b, y, WidenStep{}); });
}

// ---- one row of A times a transposed B in place (table.h: SgemmRow, dots) -------------------
// One lane per row of B (a column of C), so each lane runs its chain in k order, one FMA a link,
// as the micro-kernel does. Per 16 k, a group's 16 rows are loaded (masked past the K block and
// past n: zeros, nothing read beyond) and transposed in registers, so r[q] holds k = p + q of
// every row: the packing's transposition without the panel it writes. G groups side by side keep
// G chains in flight; rows (<= 16·G) masks the last group's store. As gemv_block (avx512_shared.h),
// each group's chunk prefetches 1 KiB of the next block, in memory order, into L2: the 16·G rows
// are too many streams for the hardware prefetchers (the cached keys come from memory).
template <int G>
void sgemm_row_dots_groups(int64_t rows, int64_t k, int64_t kc, const float* a, const float* b,
                           int64_t ldb, float* c, bool accumulate) {
  __m512 sum[G];
  __mmask16 kr[G];
  for (int j = 0; j < G; ++j) {
    kr[j] = __mmask16((1u << std::clamp<int64_t>(rows - 16 * j, 0, 16)) - 1u);
    sum[j] = accumulate ? _mm512_maskz_loadu_ps(kr[j], c + 16 * j) : _mm512_setzero_ps();
  }
  const char* next = reinterpret_cast<const char*>(b + 16 * G * ldb);
  for (int64_t p0 = 0; p0 < k; p0 += kc) {
    const int64_t p1 = std::min(k, p0 + kc);
    __m512 acc[G];
    for (int j = 0; j < G; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t p = p0; p < p1; p += 16) {
      const int64_t len = std::min<int64_t>(16, p1 - p);
      const __mmask16 kl = len >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << len) - 1u);
#pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          _mm_prefetch(next + (((p / 16) * G + j) * 16 + i) * 64, _MM_HINT_T1);
          r[i] = 16 * j + i < rows ? _mm512_maskz_loadu_ps(kl, b + (16 * j + i) * ldb + p)
                                   : _mm512_setzero_ps();
        }
        transpose16x16(r);
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) {
          if (q >= len) break;
          acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(a[p + q]), r[q], acc[j]);
        }
      }
    }
    for (int j = 0; j < G; ++j)
      sum[j] = p0 == 0 && !accumulate ? acc[j] : _mm512_add_ps(acc[j], sum[j]);
  }
  for (int j = 0; j < G; ++j) _mm512_mask_storeu_ps(c + 16 * j, kr[j], sum[j]);
}

// Blocks of 64 rows, then groups of 16, the last one partial.
void sgemm_row_dots_avx512(int64_t n, int64_t k, int64_t kc, const float* a, const float* b,
                           int64_t ldb, float* c, bool accumulate) {
  int64_t r = 0;
  for (; r + 64 <= n; r += 64)
    sgemm_row_dots_groups<4>(64, k, kc, a, b + r * ldb, ldb, c + r, accumulate);
  for (; r < n; r += 16)
    sgemm_row_dots_groups<1>(std::min<int64_t>(16, n - r), k, kc, a, b + r * ldb, ldb, c + r,
                             accumulate);
}

// ---- one row of A times a row-major B in bf16 (table.h: gemm_bf16_row_axpys) -----------------
// One lane per column of C: per pair of k, the two rows' pieces widen to float32 (16 bf16 each,
// masked past n) and take two FMAs, the odd k first, under DAZ and FTZ: gemm_bf16's chain, as the
// GEMM kernel above computes it, from C (a denormal read as zero: DAZ) or +0. An odd k's last pair
// has a zero odd half (a zero product, which turns an acc of -0 into +0, as the unit's padded pair
// does). Four vectors of columns side by side: four chains in flight. The rows kAxpyAhead ahead
// are prefetched: the cached values come from memory, and without it the loads, not the chains,
// bound the kernel.
inline __m512 widen_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
constexpr int64_t kAxpyAhead = 16;
inline __m512 bf16_set1(uint16_t h) {
  return _mm512_castsi512_ps(_mm512_set1_epi32(int(uint32_t(h) << 16)));
}
void gemm_bf16_row_axpys_avx512(int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                                int64_t ldb, float* c, bool accumulate) {
  with_ftz_daz([&] {
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
      __mmask16 m[4];
      __m512 acc[4];
      for (int v = 0; v < 4; ++v) {
        const int64_t cnt = std::clamp<int64_t>(n - j0 - 16 * v, 0, 16);
        m[v] = __mmask16((1u << cnt) - 1u);
        acc[v] = accumulate ? _mm512_maskz_loadu_ps(m[v], c + j0 + 16 * v) : _mm512_setzero_ps();
      }
      const uint16_t* bj = b + j0;
      for (int64_t p = 0; p < k; p += 2) {
        const bool odd = p + 1 < k;
        for (int64_t r = p + kAxpyAhead; r < p + kAxpyAhead + 2; ++r) {  // 64 columns: 2 lines
          _mm_prefetch(reinterpret_cast<const char*>(bj + r * ldb), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(bj + r * ldb + 32), _MM_HINT_T0);
        }
        const __m512 ao = bf16_set1(odd ? a[p + 1] : uint16_t(0)), ae = bf16_set1(a[p]);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const __m512 bo =
              odd ? widen_bf16(bj + (p + 1) * ldb + 16 * v, m[v]) : _mm512_setzero_ps();
          acc[v] = _mm512_fmadd_ps(ae, widen_bf16(bj + p * ldb + 16 * v, m[v]),
                                   _mm512_fmadd_ps(ao, bo, acc[v]));
        }
      }
      for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(c + j0 + 16 * v, m[v], acc[v]);
    }
  });
}

// ---- bfloat16 conversions ---------------------------------------------------------------------
// float32 → bf16 as c10 rounds (kernels.h): u + 0x7FFF + (bit 16 of u), top half; NaN → 0x7FC0.
// Not vcvtneps2bf16 (AVX512_BF16): it flushes denormals, which c10 keeps. Tails: masked.
void f32_to_bf16_avx512(int64_t n, const float* x, uint16_t* out) {
  const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const __m512i nan = _mm512_set1_epi32(0x7FC0);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, nan);
    _mm256_mask_storeu_epi16(out + i, k, _mm512_cvtepi32_epi16(r));
  }
}
void bf16_to_f32_avx512(int64_t n, const uint16_t* x, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m256i h = _mm256_maskz_loadu_epi16(k, x + i);
    _mm512_mask_storeu_epi32(out + i, k, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// ---- V: 16 floats in a zmm ---------------------------------------------------------------------
struct V {
  using T = __m512;
  using M = __mmask16;
  static constexpr int W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  // The first n lanes (0 <= n <= 16) from p, zeros after; nothing past them is read.
  static T load_first(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1u), p);
  }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float f) { return _mm512_set1_ps(f); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T sqrt(T a) { return _mm512_sqrt_ps(a); }
  // bf16 (kernels.h's rounding): 16 widened exactly; rounded to nearest even with NaN as
  // 0x7FC0, kept as float32; two rounded vectors paired (lo's bf16 in the low half of each 32-bit
  // lane, hi's above); and a rounded vector's top halves stored.
  static T load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static T round_bf16(T v) { return round_bf16_x16(v); }
  static T pair_bf16(T lo, T hi) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16), _mm512_castps_si512(hi)));
  }
  static void store_bf16(uint16_t* p, T v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
  }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T round_nearest(T a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // y · 2^n in one correctly rounded vscalefps, denormal results included: over all 2^32 float
  // inputs exp_v gives the same bits as with the two-normal-factor form the other ISAs use.
  static T ldexp_int(T y, T n) { return _mm512_scalef_ps(y, n); }
  static T ldexp_normal(T y, T n) { return _mm512_scalef_ps(y, n); }
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
// B panel 256×1024 floats (1 MiB) stays in L2. A larger KC would push the two micro-panels
// past L1.
const KernelTable* avx512_table() {
  static const KernelTable t = {
      .name = "avx512",
      .sgemm_blocking = {kMR, 32, 240, 256, 1024},
      .sgemm_ukernel = sgemm_ukernel_avx512_12x32,
      .sgemm_ukernel_rowa = sgemm_ukernel_avx512_12x32_rowa,
      .sgemm_ukernel_cola = sgemm_ukernel_avx512_12x32_cola,
      .sgemm_pack_a_rowmajor = sgemm_pack_a_avx512_12,
      .sgemm_pack_b_colmajor = sgemm_pack_b_avx512_32,
#include "core/kernels/simd_table_entries.inc"
      .fma_probe = fma_probe_avx512,
      .f32_to_bf16 = f32_to_bf16_avx512,
      .bf16_to_f32 = bf16_to_f32_avx512,
      .gemm_bf16_blocking = {kBf16MR, kBf16NR, 240, 256, 1024},
      .gemm_bf16_ukernel = gemm_bf16_ukernel_avx512_8x32,
      .gemm_bf16_pack_pairs = gemm_bf16_pack_pairs_avx512,
      .gemm_bf16_pack_lines = gemm_bf16_pack_lines_avx512,
      .gemv_rows_bf16 = gemv_rows_bf16_avx512,
      .gemv_packed_bf16 = gemv_packed_bf16_avx512,
      .bf16_probe = nullptr,
      .sgemm_row_dots = sgemm_row_dots_avx512,
      .sgemm_row_axpys = sgemm_row_axpys_simd,
      .gemm_bf16_row_axpys = gemm_bf16_row_axpys_avx512,
  };
  return &t;
}

}  // namespace tg::kernels
