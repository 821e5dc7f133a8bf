// Portable bf16 GEMM driver (kernels.h: gemm_bf16): packing into bf16 panels (pairs of k side by
// side, half the bytes of float panels) plus the blocking loops around one table's
// GemmBf16Ukernel. No intrinsics here; only the micro-kernel depends on the ISA.
//
// Loop nest, as gemm.cpp's without its small-GEMM shortcuts (A and B are always packed):
//   jc: N in steps of NC        ─ the B panel kc×nc (bf16) stays in L2
//    pc: K in steps of 2·KC     ─ KC counts pairs of k; the first pc starts from beta, later ones
//                                 continue the chain from C (table.h), so KC changes no bit
//     ic: M in steps of MC      ─ the A block mc×kc is packed just before its row panels are read
//                                 (or kept from the first column block when N > NC)
//      ir: MR rows, jr: NR columns ─ the micro-kernel
// Threads: a team splits the rows (members pack shares of one B panel, with a barrier on each
// side of its use) or the columns of each NC block (each member packs its own B micro-panels and
// the whole A block, and never waits), whichever leaves the busiest member less extra work. Each
// C element is one chain computed whole by one member, so results are the same bits for any
// thread count.
// Output modes (kernels.h: Bf16Out): a tile's last K block stores it rounded to bf16 (the
// micro-kernel rounds its registers). A bf16 C is never float32: with one K block the micro-kernel
// reads no C, and with several each member keeps its float32 sums (its rows × NC) between them.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

// Below this many multiply-adds a bf16 GEMM stays on one thread (as sgemm's kParallelMacs).
constexpr int64_t kParallelMacs = int64_t(1) << 21;
// Up to this many bf16 (5 MiB) of packed A are kept across column blocks (N > NC), as gemm.cpp
// keeps its float panels: reading the packed copy back costs less than packing A again.
constexpr int64_t kKeepPackedA = int64_t(5) << 19;
// Up to this many float32 sums of a bf16 C (16 MiB) are kept by a thread for its next GEMM.
constexpr int64_t kKeepSums = int64_t(1) << 22;

struct GemmBf16 {
  int64_t M, N, K;
  const uint16_t* A;
  int64_t rsA, csA;
  const uint16_t* B;
  int64_t rsB, csB;
  bool beta1;  // C is read (beta 1) or overwritten (beta 0)
  GemmBf16Out C;
};

// [lo, hi): member tid's share of `units` units of `unit`, clipped to extent.
void share(int tid, int team, int64_t units, int64_t unit, int64_t extent, int64_t& lo,
           int64_t& hi) {
  lo = std::min(extent, units * tid / team * unit);
  hi = std::min(extent, units * (tid + 1) / team * unit);
}

// The busiest member's share of `extent` in whole `unit`s, relative to an even split.
double imbalance(int team, int64_t unit, int64_t extent) {
  int64_t worst = 0;
  for (int m = 0; m < team; ++m) {
    int64_t lo, hi;
    share(m, team, (extent + unit - 1) / unit, unit, extent, lo, hi);
    worst = std::max(worst, hi - lo);
  }
  return double(worst) * team / double(extent);
}

// Split rows unless that leaves more extra work than splitting columns, which costs every member
// packing all of A (about a cycle per element against ~64 multiply-adds per cycle of compute).
bool split_rows(const GemmBlocking& bk, int team, const GemmBf16& g) {
  const double per_member = double(g.M) * g.N * g.K / 64 / team;
  const double rows_extra = (imbalance(team, bk.mr, g.M) - 1) * per_member;
  const double cols_extra = (imbalance(team, bk.nr, std::min(g.N, bk.nc)) - 1) * per_member +
                            double(g.M) * g.K * (team - 1) / team;
  return rows_extra <= cols_extra;
}

// One micro-tile: rows [i, i + m) of C, columns jc + [jr, jr + n).
struct Tile {
  int64_t i, jc, jr, m, n;
};

// The micro-kernel on one tile for the K block [pc, pc + kc). Its float32 sums live in a float32
// C's own elements, or for a bf16 C at sums (ld lds; run_member says where). The last K block
// stores the tile as C.mode says, each element rounded once.
void run_tile(const KernelTable& t, const GemmBf16& g, const Tile& x, int64_t pc, int64_t kc,
              const uint16_t* a, const uint16_t* b, float* sums, int64_t lds) {
  const int64_t col = x.jc + x.jr;
  Bf16TileOut out;
  if (pc + kc >= g.K) out.mode = g.C.mode;
  float* c;
  int64_t ldc;
  if (g.C.mode != Bf16Out::bf16) {
    c = g.C.f32 + x.i * g.C.ld + col;
    ldc = g.C.ld;
  } else {
    c = sums;
    ldc = lds;
    if (pc == 0 && g.beta1)  // beta 1: the chain starts from the bf16 C, widened
      for (int64_t r = 0; r < x.m; ++r)
        t.bf16_to_f32(x.n, g.C.bf16 + (x.i + r) * g.C.ld + col, c + r * ldc);
    out.c16 = g.C.bf16 + x.i * g.C.ld + col;
    out.ld16 = g.C.ld;
  }
  t.gemm_bf16_ukernel((kc + 1) / 2, a, b, c, ldc, x.m, x.n, pc > 0 || g.beta1, out);
}

// The nest as run by member tid of a team (team 1: alone). Rows split: the team's packed B panel
// bp, micro-panel j of the current K block at bp + j·NR·2·kp, packed by shares between barriers.
// Columns split: each member packs the micro-panels it computes into a buffer of its own (the
// members run through their blocks at their own pace). a_kept (N > NC, A small enough): all of A
// packed at the first column block and read back at the others, K block pc at a_kept + pc·a_rows
// (the team's buffer when rows are split, each member's own otherwise); nullptr: A is packed
// per block.
void run_member(const KernelTable& t, const GemmBlocking& bk, const GemmBf16& g, bool rows, int tid,
                int team, Barrier& barrier, uint16_t* bp, int64_t kp_max, uint16_t* a_kept) {
  const int64_t MR = bk.mr, NR = bk.nr, KC = 2 * bk.kc;
  const int64_t row_panels = (g.M + MR - 1) / MR;
  int64_t r0 = 0, r1 = g.M;  // this member's rows
  if (rows) share(tid, team, row_panels, MR, g.M, r0, r1);
  thread_local ScratchOf<uint16_t> a_buf;
  uint16_t* const ap = a_buf.get(std::max<int64_t>(MR, bk.mc / MR * MR) * std::min(KC, g.K + 1));
  // A bf16 C's float32 sums: with one K block, one tile's (read only when beta 1 starts them from
  // the bf16 C); across K blocks, the member's own rows × columns of a block (a member may run
  // ahead into the next block, where its columns are not the same, so none are shared).
  // Sums larger than kKeepSums are freed on return rather than kept by the thread.
  const bool many = g.C.mode == Bf16Out::bf16 && g.K > KC;
  const int64_t lds = many ? std::min(bk.nc, g.N) : NR, sums_n = many ? (r1 - r0) * lds : MR * NR;
  thread_local ScratchOf<float> sums_buf;
  std::unique_ptr<float, FreeDeleter> sums_big;
  float* sums = nullptr;
  if (g.C.mode == Bf16Out::bf16 && sums_n > kKeepSums) sums_big = aligned_array<float>(sums_n);
  if (g.C.mode == Bf16Out::bf16) sums = sums_big ? sums_big.get() : sums_buf.get(sums_n);
  const bool wait = rows && team > 1;
  const int64_t a_rows = row_panels * MR;
  if (!rows) {
    thread_local ScratchOf<uint16_t> b_own, a_own;
    const int64_t panels = ((std::min(g.N, bk.nc) + NR - 1) / NR + team - 1) / team + 1;
    bp = b_own.get(2 * kp_max * panels * NR);
    if (a_kept != nullptr && team > 1) a_kept = a_own.get(a_rows * (g.K + 1));
  }
  for (int64_t jc = 0; jc < g.N; jc += bk.nc) {
    const int64_t nc = std::min(bk.nc, g.N - jc), col_panels = (nc + NR - 1) / NR;
    int64_t c0 = 0, c1 = nc;  // this member's columns of the block
    if (!rows) share(tid, team, col_panels, NR, nc, c0, c1);
    for (int64_t pc = 0; pc < g.K; pc += KC) {
      const int64_t kc = std::min(KC, g.K - pc), kp = (kc + 1) / 2;
      // Pack this member's B micro-panels: a share of them (rows split) or the ones it computes.
      int64_t b0 = c0, b1 = c1;
      if (rows) share(tid, team, col_panels, NR, nc, b0, b1);
      if (b1 > b0)
        pack_b_bf16(t, kc, b1 - b0, g.B + pc * g.rsB + (jc + b0) * g.csB, g.rsB, g.csB, NR,
                    bp + (b0 - c0) * 2 * kp);
      if (wait) barrier.arrive_and_wait();  // the B panel is packed
      for (int64_t ic = r0; ic < r1 && c1 > c0; ic += bk.mc) {
        const int64_t mc = std::min(bk.mc, r1 - ic);
        uint16_t* const a = a_kept != nullptr ? a_kept + pc * a_rows + ic * 2 * kp : ap;
        if (a_kept == nullptr || jc == 0)
          pack_a_bf16(t, mc, kc, g.A + ic * g.rsA + pc * g.csA, g.rsA, g.csA, MR, a);
        for (int64_t ir = 0; ir < mc; ir += MR) {
          const int64_t m = std::min(MR, mc - ir);
          for (int64_t jr = c0; jr < c1; jr += NR)
            run_tile(t, g, {ic + ir, jc, jr, m, std::min(NR, c1 - jr)}, pc, kc, a + ir * 2 * kp,
                     bp + (jr - c0) * 2 * kp, many ? sums + (ic + ir - r0) * lds + (jr - c0) : sums,
                     lds);
        }
      }
      if (wait) barrier.arrive_and_wait();  // everyone is done with this B panel
    }
  }
}

// C = beta·C rounded as C.mode says, for K == 0 (scalar: nothing to compute).
void scale_only(int64_t M, int64_t N, float beta, const GemmBf16Out& C) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t at = i * C.ld + j;
      float x = 0.f;
      if (C.mode == Bf16Out::bf16 && beta != 0.f) bf16_to_f32_ref(1, C.bf16 + at, &x);
      if (C.mode != Bf16Out::bf16) x = beta == 0.f ? 0.f : C.f32[at] * beta;
      store_bf16_out(C.mode, x, C.mode == Bf16Out::bf16 ? nullptr : C.f32 + at,
                     C.mode == Bf16Out::bf16 ? C.bf16 + at : nullptr);
    }
}

void gemm_bf16_team(const KernelTable& t, int team, int64_t M, int64_t N, int64_t K,
                    const uint16_t* A, int64_t rsA, int64_t csA, const uint16_t* B, int64_t rsB,
                    int64_t csB, float beta, const GemmBf16Out& C) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_only(M, N, beta, C);
  if (beta != 0.f && beta != 1.f) {
    // A float32 C (a bf16 C takes beta 0 or 1): scaled first, then read as beta 1 reads it.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C.f32[i * C.ld + j] *= beta;
    beta = 1.f;
  }
  GemmBlocking bk = gemm_bf16_blocking_for(t);
  bk.mc = std::max(bk.mr, bk.mc / bk.mr * bk.mr);  // whole row panels per A block
  bk.nc = std::max(bk.nr, bk.nc / bk.nr * bk.nr);  // whole micro-panels per B panel
  const GemmBf16 g{M, N, K, A, rsA, csA, B, rsB, csB, beta == 1.f, C};
  const int64_t kp_max = (std::min(2 * bk.kc, K) + 1) / 2;
  thread_local ScratchOf<uint16_t> b_buf, a_buf;
  uint16_t* const bp = b_buf.get(2 * kp_max * ((std::min(bk.nc, N) + bk.nr - 1) / bk.nr * bk.nr));
  // The kept A: every row panel × K rounded up to even (only the last K block may be odd).
  const int64_t a_elems = (M + bk.mr - 1) / bk.mr * bk.mr * (K + 1);
  uint16_t* const a_kept = N > bk.nc && a_elems <= kKeepPackedA ? a_buf.get(a_elems) : nullptr;
  if (team <= 1) {
    Barrier solo(1);
    run_member(t, bk, g, true, 0, 1, solo, bp, kp_max, a_kept);
    return;
  }
  const bool rows = split_rows(bk, team, g);
  parallel_team(team, [&](int tid, int size, Barrier& barrier) {
    run_member(t, bk, g, rows, tid, size, barrier, bp, kp_max, a_kept);
  });
}

}  // namespace

void check_bf16_out(const char* op, float beta, const GemmBf16Out& C) {
  if (C.mode == Bf16Out::bf16 && beta != 0.f && beta != 1.f) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(beta));
    throw std::invalid_argument(std::string(op) + ": a bfloat16 C takes beta 0 or 1, got " + b);
  }
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
               const uint16_t* B, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C) {
  check_bf16_out("gemm_bf16", beta, C);
  const KernelTable& t = active_table();
  const bool small = M * N * std::max<int64_t>(K, 1) < kParallelMacs;
  gemm_bf16_team(t, small ? 1 : num_threads(), M, N, K, A, rsA, csA, B, rsB, csB, beta, C);
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
               const uint16_t* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  gemm_bf16(M, N, K, A, rsA, csA, B, rsB, csB, beta, bf16_out_f32(C, ldc, false));
}

void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, const GemmBf16Out& C,
                       int64_t strideC) {
  check_bf16_out("gemm_bf16_batched", beta, C);
  const KernelTable& t = active_table();
  if (gemm_bf16_batched_row(t, batch, M, N, K, A, strideA, csA, B, strideB, rsB, csB, beta, C,
                            strideC))
    return;
  const int nt = num_threads();
  if (batch >= nt && nt > 1 && batch * M * N * std::max<int64_t>(K, 1) >= kParallelMacs) {
    // Whole GEMMs per task: each C is still computed by the single-threaded nest.
    parallel_for(batch, [&](int64_t b) {
      gemm_bf16_team(t, 1, M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
                     C.at(b * strideC));
    });
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    gemm_bf16(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
              C.at(b * strideC));
}

void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t strideA, int64_t rsA, int64_t csA, const uint16_t* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                       int64_t strideC, int64_t ldc) {
  gemm_bf16_batched(batch, M, N, K, A, strideA, rsA, csA, B, strideB, rsB, csB, beta,
                    bf16_out_f32(C, ldc, false), strideC);
}

}  // namespace tg::kernels
