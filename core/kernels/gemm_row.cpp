// The batched GEMMs' route for one row of A (M == 1): each KV-cache step's attention, q·kᵀ and
// w·V with one query row per head, where the packed route would pack the whole cached K or V (its
// B) every token: O(cache) writes per token on top of the reads. Here B is read in place:
//   B stored transposed (rsB == 1, q·kᵀ: a key row per column of C): dots, one lane per row
//   B row-major (csB == 1, w·V: a value row per k): axpys, one lane per column
// with the packed route's arithmetic (table.h: SgemmRow; bf16: gemm_bf16's chain, through
// gemv_rows_bf16's kernel for the dots), so a product gives the same bits by either route.
// Threads: tasks of whole products, or of column ranges of one when the batch is smaller than the
// team; every element is computed whole by one task, so the split changes no bit.
#include <algorithm>

#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

// Below this many multiply-adds the route stays on the calling thread: waking the workers costs
// more than a few microseconds of work.
constexpr int64_t kParallelMacs = int64_t(1) << 15;
// A task's columns start at a multiple of this: whole blocks of the widest kernels (64 rows of
// AVX-512's dots, 64 columns of its axpys).
constexpr int64_t kColumnAlign = 64;

// Whether the route takes the shape (table.h: sgemm_batched_row).
bool takes(int64_t M, int64_t K, int64_t csA, int64_t rsB, int64_t csB, float beta) {
  return M == 1 && beta == 0.f && (csA == 1 || K <= 1) && (rsB == 1 || csB == 1);
}

// How the route reads B: dots (B stored transposed) or axpys (row-major), rows ldb apart; and
// where the columns from j0 on start.
struct RowB {
  bool dots;
  int64_t ldb;
  RowB(int64_t rsB, int64_t csB) : dots(rsB == 1), ldb(rsB == 1 ? csB : rsB) {}
  int64_t at(int64_t j0) const { return dots ? j0 * ldb : j0; }
};

// f(b, j0, j1) for the columns [j0, j1) of product b, over the pool when the work is enough: each
// product whole, or cut into up to ceil(threads / batch) column ranges.
template <class F>
void for_each_piece(int64_t batch, int64_t N, int64_t K, F f) {
  const int nt = num_threads();
  if (nt <= 1 || batch * N * std::max<int64_t>(K, 1) < kParallelMacs) {
    for (int64_t b = 0; b < batch; ++b) f(b, int64_t(0), N);
    return;
  }
  const int64_t units = (N + kColumnAlign - 1) / kColumnAlign;
  const int64_t pieces = std::min(units, (nt + batch - 1) / batch);
  parallel_for(batch * pieces, [&](int64_t task) {
    const int64_t b = task / pieces, s = task % pieces;
    const int64_t j0 = std::min(N, units * s / pieces * kColumnAlign);
    const int64_t j1 = std::min(N, units * (s + 1) / pieces * kColumnAlign);
    if (j1 > j0) f(b, j0, j1);
  });
}

}  // namespace

bool sgemm_batched_row(const KernelTable& t, int64_t batch, int64_t M, int64_t N, int64_t K,
                       const float* A, int64_t strideA, int64_t csA, const float* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                       int64_t strideC) {
  if (!takes(M, K, csA, rsB, csB, beta)) return false;
  const RowB rb(rsB, csB);
  const int64_t kc = gemm_blocking_for(t).kc;
  const SgemmRow row = rb.dots ? t.sgemm_row_dots : t.sgemm_row_axpys;
  for_each_piece(batch, N, K, [&](int64_t b, int64_t j0, int64_t j1) {
    row(j1 - j0, K, kc, A + b * strideA, B + b * strideB + rb.at(j0), rb.ldb, C + b * strideC + j0,
        false);
  });
  return true;
}

namespace {

// Columns [j0, j1) of one bf16 product: the route's kernel straight into a float32 C, or, for a
// rounded C, chunk by chunk into a buffer that stays in L1, rounded from there (the chunks cut
// nothing: each column is its own chain).
void bf16_row_piece(const KernelTable& t, const RowB& rb, int64_t K, const uint16_t* a,
                    const uint16_t* b, int64_t j0, int64_t j1, const GemmBf16Out& C) {
  const auto run = [&](int64_t j, int64_t n, float* c) {
    if (rb.dots)
      t.gemv_rows_bf16(n, K, b + rb.at(j), rb.ldb, a, nullptr, c);
    else
      t.gemm_bf16_row_axpys(n, K, a, b + rb.at(j), rb.ldb, c, false);
  };
  if (C.mode == Bf16Out::f32) return run(j0, j1 - j0, C.f32 + j0);
  constexpr int64_t kChunk = 256;
  float sums[kChunk];
  uint16_t half[kChunk];
  for (int64_t j = j0; j < j1; j += kChunk) {
    const int64_t n = std::min(kChunk, j1 - j);
    run(j, n, sums);
    if (C.mode == Bf16Out::bf16) {
      t.f32_to_bf16(n, sums, C.bf16 + j);
      continue;
    }
    t.f32_to_bf16(n, sums, half);
    t.bf16_to_f32(n, half, C.f32 + j);
  }
}

}  // namespace

bool gemm_bf16_batched_row(const KernelTable& t, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const uint16_t* A, int64_t strideA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta,
                           const GemmBf16Out& C, int64_t strideC) {
  if (!takes(M, K, csA, rsB, csB, beta)) return false;
  const RowB rb(rsB, csB);
  for_each_piece(batch, N, K, [&](int64_t b, int64_t j0, int64_t j1) {
    bf16_row_piece(t, rb, K, A + b * strideA, B + b * strideB, j0, j1, C.at(b * strideC));
  });
  return true;
}

}  // namespace tg::kernels
