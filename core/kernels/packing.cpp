// Packing loops for the micro-kernels' panel layouts (table.h); see packing.h.
#include "core/kernels/packing.h"

#include <algorithm>
#include <cstring>

namespace tg::kernels {

namespace {

// Rows ahead that packing prefetches (source rows are usually pages apart).
constexpr int64_t kPackAhead = 4;
// Panels the bf16 pair packing writes side by side (pack_pairs).
constexpr int64_t kPairChunk = 8;

}  // namespace

void pack_a(const KernelTable& t, int64_t mc, int64_t kc, const float* A, int64_t rsA, int64_t csA,
            int64_t MR, float* out) {
  const bool fast = t.sgemm_pack_a_rowmajor != nullptr && csA == 1 && rsA * MR < (int64_t(1) << 31);
  int64_t i0 = 0;
  if (rsA == 1 && csA != 1) {
    // Transposed A (Aᵀ stored row-major): row p of Aᵀ holds the block's mc values side by side.
    // One micro-panel at a time, down the kc rows: the panel is written in order, and the rows'
    // cache lines, fetched one line ahead, serve the next panels from L1, as the in-place kernels
    // read them (walking each row of Aᵀ across all panels instead touches kc rows pages apart).
    const int64_t full = mc / MR;
    for (int64_t ip = 0; ip < full; ++ip) {
      const float* a = A + ip * MR;
      float* o = out + ip * MR * kc;
      for (int64_t p = 0; p < kc; ++p) {
        __builtin_prefetch(a + p * csA + 16);
        copy_tile_row(o + p * MR, a + p * csA, MR);
      }
    }
    i0 = full * MR;
    out += full * MR * kc;
  }
  for (; i0 < mc; i0 += MR) {
    const int64_t m = std::min(MR, mc - i0);
    if (m == MR && fast) {
      t.sgemm_pack_a_rowmajor(kc, A + i0 * rsA, rsA, out);
    } else if (m == MR && csA == 1) {
      // Row-major A: read each row contiguously, write with stride MR.
      for (int64_t i = 0; i < MR; ++i) {
        const float* a = A + (i0 + i) * rsA;
        for (int64_t p = 0; p < kc; ++p) out[p * MR + i] = a[p];
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t i = 0; i < m; ++i) out[p * MR + i] = A[(i0 + i) * rsA + p * csA];
        for (int64_t i = m; i < MR; ++i) out[p * MR + i] = 0.f;
      }
    }
    out += MR * kc;
  }
}

void pack_b(const KernelTable& t, int64_t kc, int64_t nc, const float* B, int64_t rsB, int64_t csB,
            int64_t NR, float* out) {
  const int64_t full = nc / NR;  // full micro-panels
  if (rsB == 1 && t.sgemm_pack_b_colmajor != nullptr && csB * NR < (int64_t(1) << 31)) {
    for (int64_t jp = 0; jp < full; ++jp)
      t.sgemm_pack_b_colmajor(kc, B + jp * NR * csB, csB, out + jp * NR * kc);
  } else if (csB == 1) {
    // Row-major B: walk each source row once, left to right (one stream the prefetcher can
    // follow), and scatter its NR-wide pieces to the micro-panels.
    for (int64_t p = 0; p < kc; ++p) {
      const float* b = B + p * rsB;
      float* o = out + p * NR;
      for (int64_t jp = 0; jp < full; ++jp, b += NR, o += NR * kc) {
        // The next rows start in other pages, where the hardware prefetcher cannot follow.
        __builtin_prefetch(b + kPackAhead * rsB);
        __builtin_prefetch(b + kPackAhead * rsB + NR - 1);
        copy_tile_row(o, b, NR);
      }
    }
  } else if (rsB == 1) {
    // Transposed B (Bᵀ stored row-major): read each column contiguously.
    for (int64_t jp = 0; jp < full; ++jp) {
      float* o = out + jp * NR * kc;
      for (int64_t j = 0; j < NR; ++j) {
        const float* b = B + (jp * NR + j) * csB;
        for (int64_t p = 0; p < kc; ++p) o[p * NR + j] = b[p];
      }
    }
  } else {
    for (int64_t jp = 0; jp < full; ++jp) {
      float* o = out + jp * NR * kc;
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = 0; j < NR; ++j) o[p * NR + j] = B[p * rsB + (jp * NR + j) * csB];
    }
  }
  const int64_t j0 = full * NR, n = nc - j0;
  if (n > 0) {  // the zero-padded edge panel
    float* o = out + full * NR * kc;
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t j = 0; j < n; ++j) o[p * NR + j] = B[p * rsB + (j0 + j) * csB];
      for (int64_t j = n; j < NR; ++j) o[p * NR + j] = 0.f;
    }
  }
}

// ---- bfloat16 panels: pairs of k side by side (out[(q·W + i)·2 + t] holds k = 2q + t) ----------

namespace {

// Whether pairs of bf16 at p, `stride` bf16 apart, can be read as floats: whole pairs, 4-byte
// aligned, a float stride within the float routines' bound (below 2^31 / W).
bool as_floats(const uint16_t* p, int64_t kc, int64_t stride, int64_t W) {
  return kc % 2 == 0 && stride % 2 == 0 && reinterpret_cast<uintptr_t>(p) % 4 == 0 &&
         stride / 2 * W < (int64_t(1) << 31);
}

// The pair panels of a source whose rows are k (row k at src + k·rs, columns side by side):
// `panels` whole w-wide panels by the table's gemm_bf16_pack_pairs, kPairChunk panels at a time,
// each chunk walked down all kc rows, so it writes kPairChunk sequential streams. Walking whole
// rows (pack_b's float order) writes a line into every panel per pair of rows, and the panels,
// 12 to 32 KiB apart, share the L1's sets: on Zen 5 that packed 2-3× slower than chunks of 8.
void pack_pairs(const KernelTable& t, int64_t kc, int64_t panels, int64_t w, const uint16_t* src,
                int64_t rs, uint16_t* out) {
  const int64_t ps = w * 2 * ((kc + 1) / 2);
  for (int64_t p = 0; p < panels; p += kPairChunk)
    t.gemm_bf16_pack_pairs(kc, std::min(kPairChunk, panels - p), w, src + p * w, rs, out + p * ps,
                           ps);
}

// The lines (rows of A, columns of B) of a source the table's bf16 packing entries pack, from
// the first, into w-wide panels at out: every line where lines run along k (k step ks == 1:
// gemm_bf16_pack_lines), the whole panels' where rows are k (line step ls == 1:
// gemm_bf16_pack_pairs), else none (the table has no entries: the portable loops).
int64_t pack_by_table(const KernelTable& t, int64_t kc, int64_t lines, int64_t w,
                      const uint16_t* src, int64_t ks, int64_t ls, uint16_t* out) {
  const int64_t panel = w * 2 * ((kc + 1) / 2);
  if (ks == 1 && t.gemm_bf16_pack_lines != nullptr) {
    for (int64_t i = 0; i < lines; i += w, out += panel)
      t.gemm_bf16_pack_lines(kc, std::min(w, lines - i), w, src + i * ls, ls, out);
    return lines;
  }
  if (ls == 1 && t.gemm_bf16_pack_pairs != nullptr) {
    const int64_t whole = lines / w;
    if (whole > 0) pack_pairs(t, kc, whole, w, src, ks, out);
    return whole * w;
  }
  return 0;
}

}  // namespace

void pack_a_bf16(const KernelTable& t, int64_t mc, int64_t kc, const uint16_t* A, int64_t rsA,
                 int64_t csA, int64_t MR, uint16_t* out) {
  const int64_t kp = (kc + 1) / 2, whole = kc / 2;
  const bool fast = t.sgemm_pack_a_rowmajor != nullptr && t.sgemm_blocking.mr == MR && csA == 1 &&
                    as_floats(A, kc, rsA, MR);
  // The rows before `first` are packed (the float route, where it serves, measured faster).
  const int64_t first = fast ? 0 : pack_by_table(t, kc, mc, MR, A, csA, rsA, out);
  out += first * 2 * kp;
  for (int64_t i0 = first; i0 < mc; i0 += MR, out += MR * 2 * kp) {
    const int64_t m = std::min(MR, mc - i0);
    if (fast && m == MR) {
      t.sgemm_pack_a_rowmajor(kp, reinterpret_cast<const float*>(A + i0 * rsA), rsA / 2,
                              reinterpret_cast<float*>(out));
      continue;
    }
    if (m < MR || kc % 2 != 0) std::memset(out, 0, sizeof(uint16_t) * MR * 2 * kp);
    if (csA == 1) {
      // Row-major A: one pair (32 bits) at a time along each row, written MR pairs apart.
      for (int64_t i = 0; i < m; ++i) {
        const uint16_t* a = A + (i0 + i) * rsA;
        for (int64_t q = 0; q < whole; ++q) std::memcpy(out + (q * MR + i) * 2, a + 2 * q, 4);
        if (kc % 2 != 0) out[(whole * MR + i) * 2] = a[kc - 1];
      }
    } else {
      // Transposed or strided A: row k of Aᵀ holds the panel's m values of that k.
      for (int64_t k = 0; k < kc; ++k) {
        const uint16_t* a = A + i0 * rsA + k * csA;
        uint16_t* o = out + (k / 2) * MR * 2 + k % 2;
        for (int64_t i = 0; i < m; ++i) o[2 * i] = a[i * rsA];
      }
    }
  }
}

void pack_b_bf16(const KernelTable& t, int64_t kc, int64_t nc, const uint16_t* B, int64_t rsB,
                 int64_t csB, int64_t NR, uint16_t* out) {
  const int64_t kp = (kc + 1) / 2;
  const bool fast = t.sgemm_pack_b_colmajor != nullptr && t.sgemm_blocking.nr == NR && rsB == 1 &&
                    as_floats(B, kc, csB, NR);
  // The columns before `first` are packed (the float route, where it serves, measured faster).
  const int64_t first = fast ? 0 : pack_by_table(t, kc, nc, NR, B, rsB, csB, out);
  out += first * 2 * kp;
  for (int64_t j0 = first; j0 < nc; j0 += NR, out += NR * 2 * kp) {
    const int64_t n = std::min(NR, nc - j0);
    if (fast && n == NR) {
      t.sgemm_pack_b_colmajor(kp, reinterpret_cast<const float*>(B + j0 * csB), csB / 2,
                              reinterpret_cast<float*>(out));
      continue;
    }
    if (n < NR || kc % 2 != 0) std::memset(out, 0, sizeof(uint16_t) * NR * 2 * kp);
    if (csB == 1) {
      // Row-major B: two rows interleaved element by element (the compiler's unpack).
      for (int64_t q = 0; q < kp; ++q) {
        const uint16_t* r0 = B + 2 * q * rsB + j0;
        uint16_t* o = out + q * NR * 2;
        if (2 * q + 1 < kc) {
          const uint16_t* r1 = r0 + rsB;
          __builtin_prefetch(r0 + kPackAhead * rsB);
          __builtin_prefetch(r1 + kPackAhead * rsB);
          for (int64_t j = 0; j < n; ++j) o[2 * j] = r0[j], o[2 * j + 1] = r1[j];
        } else {
          for (int64_t j = 0; j < n; ++j) o[2 * j] = r0[j];
        }
      }
    } else {
      // Transposed or strided B: down each column, one pair of k at a time.
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* b = B + (j0 + j) * csB;
        for (int64_t k = 0; k < kc; ++k) out[((k / 2) * NR + j) * 2 + k % 2] = b[k * rsB];
      }
    }
  }
}

}  // namespace tg::kernels
