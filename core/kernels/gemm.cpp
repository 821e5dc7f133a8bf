// Portable GEMM driver, Goto/BLIS style: packing plus the five blocking loops around one table's
// micro-kernel. No intrinsics here; only the micro-kernel depends on the ISA.
//
// Shape legend: C[M, N] (+)= A[M, K] · B[K, N], A and B with general row/col strides.
// Block sizes MC, KC, NC: gemm_blocking.cpp (from the caches).
//
// Loop nest (class Nest: run, run_k_group, macro_kernel):
//   jc: N in steps of NC      ─ B panels kc×nc are packed once per (jc, pc) and stay in L2 or
//                               the L3 share (small row-major Bs are read in place instead)
//    group_k0: K in groups  ─ one K block per group, or several when B is narrow (N < NC)
//     ic: M in steps of MC    ─ the A block mc×kc comes from a_block: packed, kept from the first
//                               jc when N > NC, or read in place when N spans few NR panels
//      pc: the group's K blocks of KC ─ the first pc applies beta, later ones accumulate
//       ir: mc in steps of MR  ─ the A micro-panel MR×kc stays in L1 across the jr sweep
//                                (BLIS's skx order with the operands' roles swapped)
//        jr: nc in steps of NR ─ micro-kernel: MR×NR tile of C in registers, kc rank-1 updates
// Threads (sgemm): a team splits the rows, sharing each packed B panel (every member packs a
// share; one done with its rows takes rows left in the others' shares), or the columns of each NC
// block, each member packing its own panels and never waiting, whichever costs less (make_plan). A
// C element is always computed by the same sequence of FMAs (the K blocking never depends on the
// split or on who computes a tile), which makes results bit-identical for any thread count.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

// C = beta*C for the K == 0 case and for betas other than 0 and 1.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : C[i * ldc + j] * beta;
}

// Below this many multiply-adds a GEMM stays on one thread: waking a worker costs more.
constexpr int64_t kParallelMacs = int64_t(1) << 21;
// A row-major B of at most this many elements (256 KiB) is read in place by the micro-kernel
// instead of being packed: it stays in L2 anyway, and packing it is a visible cost of small GEMMs.
constexpr int64_t kDirectBElems = int64_t(1) << 16;
// With at most this many column panels, A is read in place instead of packed (when the table has
// an in-place-A micro-kernel for its layout): packing costs about as much as one panel's compute.
constexpr int64_t kDirectAPanels = 4;
// Up to this many floats (5 MiB) of packed A are kept across column blocks, in a scratch buffer
// that stays with the thread: reading the packed copy back is cheaper than transposing the
// source again, and the bound keeps any one thread's buffer small.
constexpr int64_t kKeepPackedA = int64_t(5) << 18;

// K blocks packed together into one B panel: a narrow B (N < NC) fits several in the space of
// one full KC×NC panel, and packing them at once lets a team meet at its barriers once per group
// instead of once per K block (e.g. 128×50257·50257×128 has 197 K blocks of little work each).
int64_t k_blocks_per_panel(const GemmBlocking& bk, int64_t N) {
  return std::max<int64_t>(1, bk.nc / ((std::min(N, bk.nc) + bk.nr - 1) / bk.nr * bk.nr));
}

// The operands of one call: C[M, N] (+)= A[M, K] · B[K, N] (beta 0: overwrite, 1: accumulate).
struct Gemm {
  int64_t M, N, K;
  const float* A;
  int64_t rsA, csA;
  const float* B;
  int64_t rsB, csB;
  float beta;
  float* C;
  int64_t ldc;
};

// How one GEMM runs: decided once per call, before any thread starts.
struct Plan {
  ASource a;        // how the micro-kernels read A: in place or packed (packing.h)
  bool keep_a;      // packed A: packed at the first column block, kept for the others (N > NC)
  bool direct_b;    // B (row-major) read in place instead of packed
  bool split_rows;  // a team splits rows (else the columns of each NC block)
  int64_t row_block_panels;  // row panels per row block (the A block packed at a time)
  int64_t a_rows;            // rows of the kept packed A per K column (all row panels)
  int64_t group_depth;       // K extent of one packed B group (a multiple of KC)
};

Plan make_plan(const KernelTable& t, const GemmBlocking& bk, int team, const Gemm& g) {
  const int64_t MR = bk.mr, NR = bk.nr, NC = bk.nc, M = g.M, N = g.N, K = g.K;
  Plan p{};
  p.direct_b = g.csB == 1 && K * N <= kDirectBElems;
  const bool few_panels = (N + NR - 1) / NR <= kDirectAPanels;
  p.a = ASource(t, g.A, g.rsA, g.csA, few_panels);
  p.a_rows = (M + MR - 1) / MR * MR;
  p.keep_a = !p.a.in_place() && N > NC && p.a_rows * K <= kKeepPackedA;
  // The busiest member's share of `extent` (rows, or the columns of one NC block) relative to an
  // even split, when members take whole panels of `unit`.
  auto imbalance = [&](int64_t unit, int64_t extent) {
    const int64_t units = (extent + unit - 1) / unit;
    int64_t worst = 0;
    for (int m = 0; m < team; ++m)
      worst = std::max(worst, std::min(extent, units * (m + 1) / team * unit) -
                                  std::min(extent, units * m / team * unit));
    return double(worst) * team / double(extent);
  };
  // Cost of each split beyond an ideal one, in cycles: the busiest member's extra compute (about
  // 32 multiply-adds per cycle), and for the column split the A that every member reads and packs
  // whole where a row split handles each A row once (about a cycle per element).
  const double per_member = double(M) * N * K / 32 / team;
  const double rows_extra = (imbalance(MR, M) - 1) * per_member;
  const double cols_extra =
      (imbalance(NR, std::min(N, NC)) - 1) * per_member + double(M) * K * (team - 1) / team;
  p.split_rows = rows_extra <= cols_extra;
  p.row_block_panels = std::max<int64_t>(1, bk.mc / MR);
  p.group_depth = bk.kc * k_blocks_per_panel(bk, N);
  return p;
}

// When a team splits rows, each member's share of a K group's row panels, [front, back): the
// owner takes blocks of kOwnPanels from the front, and a member whose own share is done takes
// single panels from the back of the others'. A member that falls behind (a burst from a
// neighbour on its core; the edge panel) then no longer keeps the rest waiting at the barrier.
// Who computes a tile does not change its FMAs, so results stay bit-identical.
constexpr int64_t kOwnPanels = 4;
std::atomic<int64_t> g_taken_over{0};
class alignas(64) PanelRange {
 public:
  void reset(int64_t front, int64_t back) {
    r_.store(uint64_t(front) << 32 | uint64_t(back), std::memory_order_relaxed);
  }
  // Up to n panels [p0, p0 + np) from the front, or from the back; false when none is left.
  bool take(int64_t n, bool from_back, int64_t& p0, int64_t& np) {
    uint64_t r = r_.load(std::memory_order_relaxed);
    while (true) {
      const int64_t f = int64_t(r >> 32), b = int64_t(r & 0xFFFFFFFFu);
      if (f >= b) return false;
      np = std::min(n, b - f);
      const int64_t nf = from_back ? f : f + np, nb = from_back ? b - np : b;
      if (r_.compare_exchange_weak(r, uint64_t(nf) << 32 | uint64_t(nb),
                                   std::memory_order_relaxed)) {
        p0 = from_back ? nb : f;
        return true;
      }
    }
  }

 private:
  std::atomic<uint64_t> r_{0};
};

// Member `tid` of a team of `team` threads (team = 1: alone; ranges: null unless rows are split
// by a team, see PanelRange).
struct Member {
  int tid, team;
  Barrier& barrier;
  PanelRange* ranges;
  // [lo, hi): this member's share of `units` units of `unit` elements, clipped to `extent`.
  void share(int64_t units, int64_t unit, int64_t extent, int64_t& lo, int64_t& hi) const {
    lo = std::min(extent, units * tid / team * unit);
    hi = std::min(extent, units * (tid + 1) / team * unit);
  }
};

// The row panels one member computes in a K group, a block at a time: alone, blocks of the row
// block size over all rows; in a team that splits rows, blocks of kOwnPanels from the front of
// its own share, then single panels from the back of the others' (PanelRange).
class RowBlocks {
 public:
  RowBlocks(const Member& me, int64_t panel0, int64_t panel1, int64_t row_block_panels)
      : me_(me), p0_(panel0 - row_block_panels), end_(panel1), block_panels_(row_block_panels) {}
  // The next block [p0, p0 + np), or false when the group is done.
  bool next(int64_t& p0, int64_t& np) {
    if (me_.ranges == nullptr) {
      p0_ += block_panels_;
      p0 = p0_, np = std::min(block_panels_, end_ - p0_);
      return p0_ < end_;
    }
    if (victim_ == 0 &&
        me_.ranges[me_.tid].take(std::min(kOwnPanels, block_panels_), false, p0, np))
      return true;
    for (victim_ = std::max(victim_, 1); victim_ < me_.team; ++victim_)
      if (me_.ranges[(me_.tid + victim_) % me_.team].take(1, true, p0, np)) {
        g_taken_over.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    return false;
  }

 private:
  const Member& me_;
  int64_t p0_, end_, block_panels_;
  int victim_ = 0;  // 0: own share; then the offset of the member taken from
};

// The columns of one NC block that a member computes, and where their packed B lives: micro-panel
// jr (a column offset in the block) of K block pc is at
//   b + (pc - group_k0) * width + (jr - base) * kc,
// group_k0 being the first K block of its group.
struct ColBlock {
  int64_t jc, nc;       // the block: columns [jc, jc + nc) of C
  int64_t c0, c1;       // this member's columns within it (all when a team splits rows)
  int64_t base, width;  // first packed column, and packed columns per K block
  float* b;
};

// The loop nest as run by one member. Rows split (plan.split_rows): the team shares one packed B
// panel (each member packs a share of its micro-panels), with a barrier on either side of the
// compute so that the panel is complete before use and not overwritten while in use; in between,
// each member computes its share of the row panels, then helps with the others'. The kept packed
// A is one buffer for the team (whoever computes rows at jc = 0 packs them). Columns split: each
// member packs exactly the B micro-panels it computes with, into its own buffer, and all of A
// itself, so the members never wait for each other.
class Nest {
 public:
  Nest(const KernelTable& t, const GemmBlocking& bk, const Plan& plan, const Gemm& g,
       const Member& me, float* b_shared, float* a_kept)
      : t_(t), bk_(bk), plan_(plan), g_(g), me_(me) {
    const int64_t row_panels = (g.M + bk.mr - 1) / bk.mr;
    panel0_ = 0, panel1_ = row_panels;
    if (plan.split_rows) me.share(row_panels, 1, row_panels, panel0_, panel1_);
    thread_local Scratch a_buf, b_own;
    const int64_t block_panels = (std::min(g.N, bk.nc) + bk.nr - 1) / bk.nr;
    b_ = plan.split_rows
             ? b_shared
             : b_own.get(plan.group_depth * ((block_panels + me.team - 1) / me.team + 1) * bk.nr);
    a_ = !plan.keep_a ? a_buf.get(bk.kc * plan.row_block_panels * bk.mr) : a_kept;
  }

  // jc: N in steps of NC, then group_k0: K in groups of group_depth (one packed B panel each).
  void run() {
    for (int64_t jc = 0; jc < g_.N; jc += bk_.nc) {
      const ColBlock cb = col_block(jc);
      for (int64_t group_k0 = 0; group_k0 < g_.K; group_k0 += plan_.group_depth)
        run_k_group(cb, group_k0, std::min(g_.K, group_k0 + plan_.group_depth));
    }
  }

 private:
  ColBlock col_block(int64_t jc) const {
    const int64_t NR = bk_.nr, nc = std::min(bk_.nc, g_.N - jc), col_panels = (nc + NR - 1) / NR;
    ColBlock cb{jc, nc, 0, nc, 0, col_panels * NR, b_};
    if (!plan_.split_rows) {
      me_.share(col_panels, NR, nc, cb.c0, cb.c1);
      cb.base = cb.c0, cb.width = (cb.c1 - cb.c0 + NR - 1) / NR * NR;
    }
    return cb;
  }

  // One K group: pack its B, then compute the member's row blocks against it.
  void run_k_group(const ColBlock& cb, int64_t group_k0, int64_t group_k1) {
    for (int64_t pc = group_k0; pc < group_k1; pc += bk_.kc)
      pack_b_block(cb, pc, cb.b + (pc - group_k0) * cb.width);
    // Every member resets its own range only once all have left the previous group's.
    if (me_.ranges != nullptr) me_.ranges[me_.tid].reset(panel0_, panel1_);
    if (plan_.split_rows) me_.barrier.arrive_and_wait();  // the group's B panels are packed
    RowBlocks blocks(me_, panel0_, panel1_, plan_.row_block_panels);
    int64_t p0 = 0, np = 0;
    while (blocks.next(p0, np)) {
      const int64_t ic = p0 * bk_.mr, mc = std::min(np * bk_.mr, g_.M - ic);
      for (int64_t pc = group_k0; pc < group_k1; pc += bk_.kc) {
        const int64_t kc = std::min(bk_.kc, g_.K - pc);
        macro_kernel(cb, a_block(cb, ic, mc, pc, kc), ic, mc, pc, kc,
                     cb.b + (pc - group_k0) * cb.width);
      }
    }
    if (plan_.split_rows) me_.barrier.arrive_and_wait();  // everyone is done with these B panels
  }

  // Packs this member's share of K block pc of the column block into bp (a B read in place: only
  // its zero-padded edge panel, by one member).
  void pack_b_block(const ColBlock& cb, int64_t pc, float* bp) {
    const int64_t NR = bk_.nr, kc = std::min(bk_.kc, g_.K - pc);
    const float* const b = g_.B + pc * g_.rsB + cb.jc * g_.csB;
    if (!plan_.direct_b) {
      int64_t b0 = cb.c0, b1 = cb.c1;
      if (plan_.split_rows) me_.share((cb.nc + NR - 1) / NR, NR, cb.nc, b0, b1);
      if (b1 > b0)
        pack_b(t_, kc, b1 - b0, b + b0 * g_.csB, g_.rsB, g_.csB, NR, bp + (b0 - cb.base) * kc);
    } else if (cb.nc % NR != 0 &&
               (plan_.split_rows ? me_.tid == 0 : cb.c1 == cb.nc && cb.c1 > cb.c0)) {
      const int64_t e = cb.nc - cb.nc % NR;
      pack_b(t_, kc, cb.nc - e, b + e, g_.rsB, g_.csB, NR, bp + (e - cb.base) * kc);
    }
  }

  // The packed panels of the A block [ic, ic + mc) × [pc, pc + kc) that the micro-kernels read
  // packed (plan_.a): packed now, or kept from the first column block.
  const float* a_block(const ColBlock& cb, int64_t ic, int64_t mc, int64_t pc, int64_t kc) {
    if (!plan_.keep_a) {
      plan_.a.pack(ic, mc, pc, kc, a_);
      return a_;
    }
    float* const ap = a_ + pc * plan_.a_rows + ic * kc;
    if (cb.jc == 0) plan_.a.pack(ic, mc, pc, kc, ap);
    return ap;
  }

  // ir over the A block's micro-panels (each stays in L1 across the jr sweep), jr over the
  // member's B micro-panels: BLIS's macro-kernel with the operands' roles swapped.
  void macro_kernel(const ColBlock& cb, const float* ap, int64_t ic, int64_t mc, int64_t pc,
                    int64_t kc, const float* bp) {
    const bool accumulate = pc > 0 || g_.beta != 0.f;
    for (int64_t ir = 0; ir < mc; ir += bk_.mr) {
      const int64_t m = std::min(bk_.mr, mc - ir);
      for (int64_t jr = cb.c0; jr < cb.c1; jr += bk_.nr) {
        const int64_t n = std::min(bk_.nr, cb.c1 - jr);
        const bool in_place = plan_.direct_b && n == bk_.nr;
        const float* b = in_place ? g_.B + pc * g_.rsB + cb.jc + jr : bp + (jr - cb.base) * kc;
        plan_.a.tile(ic + ir, pc, kc, ap + ir * kc, b, in_place ? g_.rsB : bk_.nr,
                     g_.C + (ic + ir) * g_.ldc + cb.jc + jr, g_.ldc, m, n, accumulate);
      }
    }
  }

  const KernelTable& t_;
  const GemmBlocking& bk_;
  const Plan& plan_;
  const Gemm& g_;
  const Member& me_;
  int64_t panel0_, panel1_;  // this member's row panels
  float* b_;                 // packed B: the team's (rows split) or this member's own
  float* a_;                 // packed A: one row block × KC, or the kept A of all rows × K
};

// Runs the nest on up to `team` threads (1: the caller alone).
void sgemm_team(const KernelTable& t, int team, int64_t M, int64_t N, int64_t K, const float* A,
                int64_t rsA, int64_t csA, const float* B, int64_t rsB, int64_t csB, float beta,
                float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || (beta != 0.f && beta != 1.f)) {
    scale_c(M, N, beta, C, ldc);
    if (K <= 0) return;
    beta = 1.f;
  }
  const GemmBlocking bk = gemm_blocking_for(t);
  const Gemm g{M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc};
  const Plan plan = make_plan(t, bk, team, g);
  thread_local Scratch b_buf, a_shared;
  float* bp = b_buf.get(plan.group_depth * ((std::min(bk.nc, N) + bk.nr - 1) / bk.nr * bk.nr));
  const bool kept = plan.keep_a;
  float* a_team = kept && plan.split_rows ? a_shared.get(plan.a_rows * K) : nullptr;
  // A team that splits columns packs all of A in every member: each keeps its own copy.
  auto kept_a = [&]() -> float* {
    thread_local Scratch a_own;
    return !kept ? nullptr : a_team != nullptr ? a_team : a_own.get(plan.a_rows * K);
  };
  if (team <= 1) {
    Barrier solo(1);
    const Member me{0, 1, solo, nullptr};
    Nest(t, bk, plan, g, me, bp, kept_a()).run();
    return;
  }
  std::vector<PanelRange> ranges(plan.split_rows ? team : 0);
  parallel_team(team, [&](int tid, int size, Barrier& barrier) {
    const Member me{tid, size, barrier, plan.split_rows && size > 1 ? ranges.data() : nullptr};
    Nest(t, bk, plan, g, me, bp, kept_a()).run();
  });
}

}  // namespace

int64_t sgemm_panels_taken_over() { return g_taken_over.load(std::memory_order_relaxed); }

void sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
           const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  const KernelTable& t = active_table();
  const int nt = num_threads();
  const bool small = M * N * std::max<int64_t>(K, 1) < kParallelMacs;
  sgemm_team(t, small ? 1 : nt, M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}

void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t strideA,
                   int64_t rsA, int64_t csA, const float* B, int64_t strideB, int64_t rsB,
                   int64_t csB, float beta, float* C, int64_t strideC, int64_t ldc) {
  const KernelTable& t = active_table();
  if (sgemm_batched_row(t, batch, M, N, K, A, strideA, csA, B, strideB, rsB, csB, beta, C, strideC))
    return;
  const int nt = num_threads();
  if (batch >= nt && nt > 1 && batch * M * N * std::max<int64_t>(K, 1) >= kParallelMacs) {
    // Whole GEMMs per task: each C is still computed by the single-threaded nest.
    parallel_for(batch, [&](int64_t b) {
      sgemm_team(t, 1, M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
                 C + b * strideC, ldc);
    });
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    sgemm(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta, C + b * strideC,
          ldc);
}

}  // namespace tg::kernels
