// Portable GEMM driver, Goto/BLIS style: packing plus the five blocking loops around one table's
// micro-kernel. No intrinsics here; only the micro-kernel depends on the ISA.
//
// Shape legend: C[M, N] (+)= A[M, K] · B[K, N], A and B with general row/col strides.
//
// Loop nest (gemm_nest):
//   jc: N in steps of NC      ─ B panels kc×nc are packed once per (jc, pc) and stay in L2
//                               (small row-major Bs are read in place instead)
//    pg: K in groups of KC    ─ one K block per group, or several when B is narrow (N < NC)
//     ic: M in steps of MC    ─ the A block mc×kc is packed, or kept from the first jc when
//                               N > NC, or read in place when N spans only a few NR panels
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
#include <mutex>
#include <new>
#include <vector>

#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

// bench_matmul --blocking: MC, KC, NC replacing every table's (0: none), read as one snapshot.
std::mutex g_override_mutex;
int64_t g_override[3] = {0, 0, 0};

// C = beta*C for the K == 0 case and for betas other than 0 and 1.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : C[i * ldc + j] * beta;
}

}  // namespace

void set_sgemm_blocking_override(int64_t mc, int64_t kc, int64_t nc) {
  const std::lock_guard<std::mutex> lock(g_override_mutex);
  g_override[0] = mc, g_override[1] = kc, g_override[2] = nc;
}

namespace {

// Below this many multiply-adds a GEMM stays on one thread (waking a worker costs ~10 µs).
constexpr int64_t kParallelMacs = int64_t(1) << 21;
// A row-major B of at most this many elements (256 KiB) is read in place by the micro-kernel
// instead of being packed: it stays in L2 anyway, and for small GEMMs packing B costs ~10%.
constexpr int64_t kDirectBElems = int64_t(1) << 16;
// So is a row-major B of at most this many columns, however long K is (e.g. the tiny preset's
// dY·W, 128×128×50257): 8 or more rows share a page and one KC block (≤ 128 KiB) stays in L2
// across the row panels, so packing would copy all of B for no locality. Measured on that shape:
// 1.17-1.20× OpenBLAS → 1.28-1.29× on 2 threads, 1.04 → 1.06-1.07 on one.
constexpr int64_t kDirectBCols = 128;
// With at most this many column panels, A is read in place instead of packed (when the table has
// an in-place-A micro-kernel for its layout): packing costs about as much as one panel's compute.
// For a transposed A (dYᵀ·X, M = 50257, N = K = 128; attention's Pᵀ·dO, 256×64×256), measured
// by alternating both in one process (best of 40-200): 169 → 192 and 172 → 207 GFLOP/s on 2
// threads, 87 → 125 for the attention shape on one.
constexpr int64_t kDirectAPanels = 4;
// Up to this many floats (16 MiB) of packed A are kept across column blocks: reading the packed
// copy back is cheaper than transposing the source again.
constexpr int64_t kKeepPackedA = int64_t(1) << 22;

// K blocks packed together into one B panel: a narrow B (N < NC) fits several in the space of
// one full KC×NC panel, and packing them at once lets a team meet at its barriers once per group
// instead of once per K block (e.g. 128×50257·50257×128: 197 K blocks of 26 µs of work each).
int64_t k_blocks_per_panel(const GemmBlocking& bk, int64_t N) {
  return std::max<int64_t>(1, bk.nc / ((std::min(N, bk.nc) + bk.nr - 1) / bk.nr * bk.nr));
}

GemmBlocking blocking_of(const KernelTable& t) {
  GemmBlocking bk = t.sgemm_blocking;
  const std::lock_guard<std::mutex> lock(g_override_mutex);
  if (g_override[0] > 0) bk.mc = g_override[0], bk.kc = g_override[1], bk.nc = g_override[2];
  return bk;
}

// How one GEMM runs: decided once per call, before any thread starts.
struct Plan {
  bool direct_a, direct_b;  // A (row-major) / B read in place instead of packed
  bool col_a;               // A stored transposed read in place (its edge row panel packed)
  bool split_rows;          // a team splits rows (else the columns of each NC block)
  bool keep_a;              // the packed A of all rows × K is kept across column blocks
  int64_t rb_panels;        // row panels per row block (the A block packed at a time)
  int64_t a_rows;           // rows of the kept packed A per K column (all row panels)
  int64_t kg;               // K extent of one packed B group (a multiple of KC)
};

Plan make_plan(const KernelTable& t, const GemmBlocking& bk, int team, int64_t M, int64_t N,
               int64_t K, int64_t rsA, int64_t csA, int64_t csB) {
  const int64_t MR = bk.mr, NR = bk.nr, NC = bk.nc;
  Plan p{};
  p.direct_b = csB == 1 && (K * N <= kDirectBElems || N <= kDirectBCols);
  const bool few_panels = (N + NR - 1) / NR <= kDirectAPanels;
  p.direct_a = csA == 1 && t.sgemm_ukernel_rowa != nullptr && few_panels;
  p.col_a = !p.direct_a && rsA == 1 && t.sgemm_ukernel_cola != nullptr && few_panels;
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
  // whole where a row split handles each A row once (about a cycle per element, measured: e.g.
  // 512×768·768×2304 and 128³ run faster split by rows, X·Wᵀ with N = 2304 by columns).
  const double per_member = double(M) * N * K / 32 / team;
  const double rows_extra = (imbalance(MR, M) - 1) * per_member;
  const double cols_extra =
      (imbalance(NR, std::min(N, NC)) - 1) * per_member + double(M) * K * (team - 1) / team;
  p.split_rows = rows_extra <= cols_extra;
  p.rb_panels = std::max<int64_t>(1, bk.mc / MR);
  p.a_rows = (M + MR - 1) / MR * MR;
  p.keep_a = !p.direct_a && !p.col_a && N > NC && p.a_rows * K <= kKeepPackedA;
  p.kg = bk.kc * k_blocks_per_panel(bk, N);
  return p;
}

// When a team splits rows, each member's share of a K group's row panels, [front, back): the
// owner takes blocks of kOwnPanels from the front, and a member whose own share is done takes
// single panels from the back of the others'. A member that falls behind (a burst from a
// neighbour on its core; the edge panel) then no longer keeps the rest waiting at the barrier.
// Who computes a tile does not change its FMAs, so results stay bit-identical. In-process A/B
// against the static split on a busy machine (40 alternating runs, 2 threads): best within ±3%,
// median 2-7% higher for the row-split shapes of GPT-2 (e.g. dY·W 512×768×768: 176 -> 188
// GFLOP/s; dYᵀ·X 3072×768×512: 194 -> 208).
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

// The loop nest, run by member `tid` of a team of `team` threads (team = 1: alone).
// Rows split (plan.split_rows): the team shares one packed B panel `bp` (each member packs a
// share of its micro-panels), with a barrier on either side of the compute so the panel is
// complete before use and not overwritten while in use; in between, each member computes its
// share of the row panels, then helps with the others' (`ranges`, see PanelRange; null when
// alone: blocks of MC rows). The kept packed A `a_kept` is one buffer for the team (whoever
// computes rows at jc = 0 packs them). Columns split: each member packs exactly the B
// micro-panels it computes with, into its own buffer, and packs all of A itself, so the members
// never wait for each other.
void gemm_nest(const KernelTable& t, const GemmBlocking& bk, const Plan& plan, int tid, int team,
               Barrier& barrier, PanelRange* ranges, float* bp, float* a_kept, int64_t M, int64_t N,
               int64_t K, const float* A, int64_t rsA, int64_t csA, const float* B, int64_t rsB,
               int64_t csB, float beta, float* C, int64_t ldc) {
  const int64_t MR = bk.mr, NR = bk.nr, KC = bk.kc, NC = bk.nc, KG = plan.kg;
  const bool direct_a = plan.direct_a, col_a = plan.col_a, direct_b = plan.direct_b;
  const bool split_rows = plan.split_rows;
  const int64_t row_panels = (M + MR - 1) / MR, RBP = plan.rb_panels;
  auto share = [&](int64_t units, int64_t unit, int64_t extent, int64_t& lo, int64_t& hi) {
    lo = std::min(extent, units * tid / team * unit);
    hi = std::min(extent, units * (tid + 1) / team * unit);
  };
  int64_t panel0 = 0, panel1 = row_panels;  // this member's row panels
  if (split_rows) share(row_panels, 1, row_panels, panel0, panel1);
  const int64_t block_panels = (std::min(N, NC) + NR - 1) / NR;
  thread_local Scratch a_buf, b_own;
  float* const bq = split_rows ? bp : b_own.get(KG * ((block_panels + team - 1) / team + 1) * NR);
  // Packed A: one row block × KC, or the kept A of all rows × K.
  float* const a_all = !plan.keep_a ? a_buf.get(KC * RBP * MR)
                       : split_rows ? a_kept
                                    : a_buf.get(plan.a_rows * K);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    const int64_t col_panels = (nc + NR - 1) / NR;
    int64_t c0 = 0, c1 = nc;
    if (!split_rows) share(col_panels, NR, nc, c0, c1);
    // Packed B micro-panel jr (a column offset) of K block pc lives at
    // bq + (pc - pg) * bw + (jr - b_base) * kc, pg being the first K block of its group.
    const int64_t b_base = split_rows ? 0 : c0;
    const int64_t bw = split_rows ? col_panels * NR : (c1 - c0 + NR - 1) / NR * NR;
    for (int64_t pg = 0; pg < K; pg += KG) {
      const int64_t pg_end = std::min(K, pg + KG);
      for (int64_t pc = pg; pc < pg_end; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        float* const bk_pc = bq + (pc - pg) * bw;
        if (!direct_b) {
          int64_t b0 = c0, b1 = c1;
          if (split_rows) share(col_panels, NR, nc, b0, b1);
          if (b1 > b0)
            pack_b(t, kc, b1 - b0, B + pc * rsB + (jc + b0) * csB, rsB, csB, NR,
                   bk_pc + (b0 - b_base) * kc);
        } else if (nc % NR != 0 && (split_rows ? tid == 0 : c1 == nc && c1 > c0)) {
          // In place, except the zero-padded edge panel.
          const int64_t e = nc - nc % NR;
          pack_b(t, kc, nc - e, B + pc * rsB + jc + e, rsB, csB, NR, bk_pc + (e - b_base) * kc);
        }
      }
      // Every member resets its own range only once all have left the previous group's.
      const bool stealing = ranges != nullptr;
      if (stealing) ranges[tid].reset(panel0, panel1);
      if (split_rows) barrier.arrive_and_wait();  // the group's B panels are packed
      int64_t p0 = panel0 - RBP, np = 0, victim = 0;
      // The next block of row panels [p0, p0 + np), or false when the group is done.
      auto next_block = [&]() {
        if (!stealing) {
          p0 += RBP;
          np = std::min(RBP, panel1 - p0);
          return p0 < panel1;
        }
        if (victim == 0 && ranges[tid].take(std::min(kOwnPanels, RBP), false, p0, np)) return true;
        for (victim = std::max<int64_t>(victim, 1); victim < team; ++victim)
          if (ranges[(tid + victim) % team].take(1, true, p0, np)) {
            g_taken_over.fetch_add(1, std::memory_order_relaxed);
            return true;
          }
        return false;
      };
      while (next_block()) {
        const int64_t ic = p0 * MR, mc = std::min(np * MR, M - ic);
        for (int64_t pc = pg; pc < pg_end; pc += KC) {
          const int64_t kc = std::min(KC, K - pc);
          const bool accumulate = pc > 0 || beta != 0.f;
          const float* const bk_pc = bq + (pc - pg) * bw;
          float* const ap = plan.keep_a ? a_all + pc * plan.a_rows + ic * kc : a_all;
          if (!direct_a && !col_a && (!plan.keep_a || jc == 0))
            pack_a(t, mc, kc, A + ic * rsA + pc * csA, rsA, csA, MR, ap);
          else if (col_a && mc % MR != 0)
            pack_a(t, mc % MR, kc, A + (ic + mc - mc % MR) * rsA + pc * csA, rsA, csA, MR,
                   ap + (mc - mc % MR) * kc);
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t m = std::min(MR, mc - ir);
            const float* a = ap + ir * kc;
            for (int64_t jr = c0; jr < c1; jr += NR) {
              const int64_t n = std::min(NR, c1 - jr);
              const bool in_place = direct_b && n == NR;
              const float* b = in_place ? B + pc * rsB + jc + jr : bk_pc + (jr - b_base) * kc;
              const int64_t ldb = in_place ? rsB : NR;
              float* c = C + (ic + ir) * ldc + jc + jr;
              if (col_a && m == MR)
                t.sgemm_ukernel_cola(kc, A + (ic + ir) * rsA + pc * csA, csA, b, ldb, c, ldc, m, n,
                                     accumulate);
              else if (direct_a)
                t.sgemm_ukernel_rowa(kc, A + (ic + ir) * rsA + pc, rsA, b, ldb, c, ldc, m, n,
                                     accumulate);
              else
                t.sgemm_ukernel(kc, a, b, ldb, c, ldc, m, n, accumulate);
            }
          }
        }
      }
      if (split_rows) barrier.arrive_and_wait();  // everyone is done with these B panels
    }
  }
}

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
  const GemmBlocking bk = blocking_of(t);
  const Plan plan = make_plan(t, bk, team, M, N, K, rsA, csA, csB);
  thread_local Scratch b_buf, a_shared;
  float* bp = b_buf.get(plan.kg * ((std::min(bk.nc, N) + bk.nr - 1) / bk.nr * bk.nr));
  float* a_kept = plan.keep_a && plan.split_rows ? a_shared.get(plan.a_rows * K) : nullptr;
  if (team <= 1) {
    Barrier solo(1);
    gemm_nest(t, bk, plan, 0, 1, solo, nullptr, bp, a_kept, M, N, K, A, rsA, csA, B, rsB, csB, beta,
              C, ldc);
    return;
  }
  std::vector<PanelRange> ranges(plan.split_rows ? team : 0);
  parallel_team(team, [&](int tid, int size, Barrier& barrier) {
    PanelRange* const steal = plan.split_rows && size > 1 ? ranges.data() : nullptr;
    gemm_nest(t, bk, plan, tid, size, barrier, steal, bp, a_kept, M, N, K, A, rsA, csA, B, rsB, csB,
              beta, C, ldc);
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
