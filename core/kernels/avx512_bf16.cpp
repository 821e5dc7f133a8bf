// AVX512-BF16 kernels, compiled with the avx512 flags plus -mavx512bf16 only; dispatch.cpp calls
// them only after cpu_x86.cpp found AVX512_BF16 (cpuid 7.1 EAX bit 5) beside AVX-512 F/DQ/BW/VL.
// Contents: the bf16 GEMM micro-kernel and the bf16 gemv on vdpbf16ps, the bf16 probe, and the
// avx512_bf16 table (avx512.cpp's, with these bf16 entries).
// Shape legend: see kernels.h; packed panel layout: see table.h (GemmBf16Ukernel).
//
// What vdpbf16ps computes, measured on this project's AMD EPYC (Zen 5, family 26 model 2) with
// crafted values and 31 million random steps against models: per float lane,
//   acc = R(acc + a[2i+1]·b[2i+1]), then acc = R(acc + a[2i]·b[2i])
// (the odd element first, as Intel's SDM writes it: acc 1, products 2^-24 odd and -2^-24 even
// give 1 - 2^-24; the other order gives 1), each product exact and not rounded on its own (acc
// 2^-126 plus a product 2^-140 gives 2^-126 + 2^-140; products 2^200 then -2^200 give inf, as
// inf + -2^200), R round to nearest even whatever MXCSR says; bf16 denormal inputs and a
// denormal acc read as zero of their sign; a result is flushed to zero of its sign when it is
// tiny after rounding at float's precision with unbounded exponent (a sum 2^-126 - 2^-152 gives
// 2^-126, 2^-126 - 3·2^-152 gives 0: x86's tininess after rounding), also between the two halves
// (a first product 2^-130 is gone before the second is added). NaNs: the product's NaN wins over
// acc's, quieted with its payload kept; inf·0 gives the default NaN. kernels.h's definition and
// the scalar reference (ref.cpp: bf16_step) follow this, bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/kernels/avx512_shared.h"
#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// ---- bf16 GEMM micro-kernel, 12 × 32 ----------------------------------------------------------
// Register allocation (ROWS = 12): zmm0-23 hold the 12×32 tile of C, two zmm hold one pair-row of
// the packed B micro-panel (32 columns × 2 k), and each row's pair of A is broadcast from memory:
// 24 vdpbf16ps (16 lanes × 2 multiply-adds each) need 2 loads + 12 broadcasts per pair of k, so
// the two FMA pipes, not the loads, bound it, as in avx512.cpp's sgemm kernel.
// The tile starts from C (accumulate) or zero and continues the chain (table.h), so K blocks
// change no bit. Edge tiles: ROWS = 4 or 8 for m <= 4 or 8 (a row's operations do not depend on
// ROWS); stores clipped by a lane mask for n < 32 and a row bound for m < ROWS. A tile's last K
// block may round its sums to bf16 on the way out (store_bf16_tile_row, avx512_shared.h).
constexpr int kMR = 12, kNR = 32;
// B prefetch distance in pairs of k (4 KiB of packed panel ahead: 32 pairs of 128 bytes).
constexpr int64_t kPrefetchB = 32;

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

template <int ROWS>
void gemm_bf16_ukernel_t(int64_t kp, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc,
                         int64_t m, int64_t n, bool accumulate, const Bf16TileOut& out) {
  const uint32_t bits = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1u);
  const __mmask16 k0 = static_cast<__mmask16>(bits), k1 = static_cast<__mmask16>(bits >> 16);
  __m512 acc[ROWS][2];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    const bool load = accumulate && i < m;
    acc[i][0] = load ? _mm512_maskz_loadu_ps(k0, c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = load ? _mm512_maskz_loadu_ps(k1, c + i * ldc + 16) : _mm512_setzero_ps();
  }
  auto step = [&]() {
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * 2 * kNR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * 2 * kNR + 32), _MM_HINT_T0);
    const __m512bh b0 = as_bh(_mm512_loadu_si512(b)), b1 = as_bh(_mm512_loadu_si512(b + 32));
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, 4);
      const __m512bh ai = as_bh(_mm512_set1_epi32(pair));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += 2 * kMR;
    b += 2 * kNR;
  };
  // The first ROWS steps also fetch row q of the tile to the right (c + 32: the next jr tile,
  // which starts by loading C when it accumulates), so its loads do not wait on L2 or memory. A
  // prefetch past the matrix is harmless.
  int64_t q = 0;
  for (; q < kp && q < ROWS; ++q) {
    _mm_prefetch(reinterpret_cast<const char*>(c + q * ldc + kNR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + q * ldc + kNR + 16), _MM_HINT_T0);
    step();
  }
  for (; q < kp; ++q) step();
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    if (i >= m) break;
    store_bf16_tile_row(out.mode, c + i * ldc, out.c16 + i * out.ld16, acc[i][0], acc[i][1], k0,
                        k1);
  }
}

void gemm_bf16_ukernel_avx512bf16_12x32(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                                        int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                        const Bf16TileOut& out) {
  if (m > 8)
    gemm_bf16_ukernel_t<12>(kp, a, b, c, ldc, m, n, accumulate, out);
  else if (m > 4)
    gemm_bf16_ukernel_t<8>(kp, a, b, c, ldc, m, n, accumulate, out);
  else
    gemm_bf16_ukernel_t<4>(kp, a, b, c, ldc, m, n, accumulate, out);
}

// Peak probe of the bf16 unit: 24 independent vdpbf16ps chains, each 16 lanes × 2 multiply-adds
// (on Zen 5, 16 chains read lower than the GEMM itself at times: the chains' latency, not the two
// pipes, bounded them; 24 stay within the register file); values stay normal and finite.
double bf16_probe_avx512bf16(int64_t iters) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.f + 0.01f * float(i));
  const __m512bh x = as_bh(_mm512_set1_epi32(0x3A833A83));  // 0.001 (bf16) in both halves
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * kChains * 16 * 2 * 2;
}

// The bf16 gemv (kernels.h: gemv_rows_bf16) on the unit: avx512_shared.h's loop, one vdpbf16ps
// per pair of k (the unit's own chain, so the GEMM's bits).
void gemv_rows_bf16_avx512bf16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw,
                               const uint16_t* x, const float* b, float* y) {
  gemv_rows_bf16_x16(rows, cols, w, ldw, x, b, y, [](__m512 acc, __m512i xi, __m512i wi) {
    return _mm512_dpbf16_ps(acc, as_bh(xi), as_bh(wi));
  });
}

void gemv_packed_bf16_avx512bf16(int64_t rows, int64_t cols, const uint32_t* panels,
                                 const uint16_t* x, const float* b, float* y) {
  gemv_packed_x16(rows, cols, panels, x, b, y, [](__m512 acc, __m512i xi, __m512i wi) {
    return _mm512_dpbf16_ps(acc, as_bh(xi), as_bh(wi));
  });
}

}  // namespace

// avx512.cpp's table (its float kernels, its conversions) with the bf16 unit's GEMM. Blocking
// (KC in pairs; the caches replace it when known, gemm_blocking.cpp): the A micro-panel 12×256
// pairs (12 KiB) stays in L1, the B panel 256 pairs × 1024 (1 MiB) in L2.
const KernelTable* avx512_bf16_table() {
  static const KernelTable t = [] {
    KernelTable k = *avx512_table();
    k.name = "avx512_bf16";
    k.gemm_bf16_blocking = {kMR, kNR, 240, 256, 1024};
    k.gemm_bf16_ukernel = gemm_bf16_ukernel_avx512bf16_12x32;
    k.gemv_rows_bf16 = gemv_rows_bf16_avx512bf16;
    k.gemv_packed_bf16 = gemv_packed_bf16_avx512bf16;
    k.bf16_probe = bf16_probe_avx512bf16;
    return k;
  }();
  return &t;
}

}  // namespace tg::kernels
