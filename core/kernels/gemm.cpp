// Portable GEMM driver, Goto/BLIS style: packing plus the five blocking loops around one table's
// micro-kernel. No intrinsics here; only the micro-kernel depends on the ISA.
//
// Shape legend: C[M, N] (+)= A[M, K] · B[K, N], A and B with general row/col strides.
//
// Loop nest of sgemm_blocked (one thread's slice):
//   jc: N in steps of NC   ─ B panel kc×nc is packed once per (jc, pc) and stays in L2
//    pc: K in steps of KC  ─ the first pc applies beta, later ones accumulate
//     ic: M in steps of MC ─ A block mc×kc is packed
//      ir: mc in steps of MR  ─ the A micro-panel MR×kc stays in L1 across the jr sweep
//       jr: nc in steps of NR ─ micro-kernel: MR×NR tile of C in registers, kc rank-1 updates
// Threads (sgemm): the problem is cut into slices along N (or M when N is narrow), each slice
// running the whole nest. A C element is always computed by the same sequence of FMAs (the K
// blocking never depends on the slice), which makes results bit-identical for any thread count.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

std::atomic<int64_t> g_override_mc{0}, g_override_kc{0}, g_override_nc{0};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A 64-byte-aligned scratch buffer per thread and role, grown on demand.
class Scratch {
 public:
  float* get(int64_t n) {
    if (n > cap_) {
      const size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
      buf_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<float, FreeDeleter> buf_;
  int64_t cap_ = 0;
};

// Packs A[0:mc, 0:kc] into MR-row micro-panels, k-major, zero-padding the last panel.
void pack_a(const KernelTable& t, int64_t mc, int64_t kc, const float* A, int64_t rsA, int64_t csA,
            int64_t MR, float* out) {
  const bool fast = t.sgemm_pack_a_rowmajor != nullptr && csA == 1 && rsA * MR < (int64_t(1) << 31);
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
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

// Packs B[0:kc, 0:nc] into NR-column micro-panels, zero-padding the last panel.
void pack_b(int64_t kc, int64_t nc, const float* B, int64_t rsB, int64_t csB, int64_t NR,
            float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int64_t n = std::min(NR, nc - j0);
    if (n == NR && csB == 1) {
      for (int64_t p = 0; p < kc; ++p) std::memcpy(out + p * NR, B + p * rsB + j0, NR * 4);
    } else if (n == NR && rsB == 1) {
      // Transposed B (Bᵀ stored row-major): read each column contiguously.
      for (int64_t j = 0; j < NR; ++j) {
        const float* b = B + (j0 + j) * csB;
        for (int64_t p = 0; p < kc; ++p) out[p * NR + j] = b[p];
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t j = 0; j < n; ++j) out[p * NR + j] = B[p * rsB + (j0 + j) * csB];
        for (int64_t j = n; j < NR; ++j) out[p * NR + j] = 0.f;
      }
    }
    out += NR * kc;
  }
}

// C = beta*C for the K == 0 case and for betas other than 0 and 1.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : C[i * ldc + j] * beta;
}

}  // namespace

void set_sgemm_blocking_override(int64_t mc, int64_t kc, int64_t nc) {
  g_override_kc.store(kc);
  g_override_nc.store(nc);
  g_override_mc.store(mc);
}

void sgemm_blocked(const KernelTable& t, int64_t M, int64_t N, int64_t K, const float* A,
                   int64_t rsA, int64_t csA, const float* B, int64_t rsB, int64_t csB, float beta,
                   float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || (beta != 0.f && beta != 1.f)) {
    scale_c(M, N, beta, C, ldc);
    if (K <= 0) return;
    beta = 1.f;
  }
  GemmBlocking bk = t.sgemm_blocking;
  if (g_override_mc.load() > 0)
    bk.mc = g_override_mc.load(), bk.kc = g_override_kc.load(), bk.nc = g_override_nc.load();
  const int64_t MR = bk.mr, NR = bk.nr;
  const int64_t KC = bk.kc;
  const int64_t MC = bk.mc, NC = bk.nc;
  thread_local Scratch a_buf, b_buf;
  float* bp = b_buf.get(KC * ((std::min(NC, N) + NR - 1) / NR) * NR);
  float* ap = a_buf.get(KC * ((std::min(MC, M) + MR - 1) / MR) * MR);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool accumulate = pc > 0 || beta != 0.f;
      pack_b(kc, nc, B + pc * rsB + jc * csB, rsB, csB, NR, bp);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a(t, mc, kc, A + ic * rsA + pc * csA, rsA, csA, MR, ap);
        for (int64_t ir = 0; ir < mc; ir += MR) {
          const int64_t m = std::min(MR, mc - ir);
          const float* a = ap + ir * kc;
          for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t n = std::min(NR, nc - jr);
            t.sgemm_ukernel(kc, a, bp + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc, m, n,
                            accumulate);
          }
        }
      }
    }
  }
}

namespace {

// Below this many multiply-adds a GEMM stays on one thread (waking a worker costs ~10 µs).
constexpr int64_t kParallelMacs = int64_t(1) << 21;

// Cuts one GEMM into `parts` slices along N (or M when N is too narrow), aligned to the micro-tile.
void sgemm_split(const KernelTable& t, int parts, int64_t M, int64_t N, int64_t K, const float* A,
                 int64_t rsA, int64_t csA, const float* B, int64_t rsB, int64_t csB, float beta,
                 float* C, int64_t ldc) {
  const int64_t NR = t.sgemm_blocking.nr, MR = t.sgemm_blocking.mr;
  const bool along_n = (N + NR - 1) / NR >= parts && N >= M / 2;
  const int64_t tile = along_n ? NR : MR;
  const int64_t extent = along_n ? N : M;
  const int64_t tiles = (extent + tile - 1) / tile;
  parts = static_cast<int>(std::min<int64_t>(parts, tiles));
  parallel_for(parts, [&](int64_t p) {
    const int64_t lo = std::min(extent, (tiles * p / parts) * tile);
    const int64_t hi = std::min(extent, (tiles * (p + 1) / parts) * tile);
    if (hi <= lo) return;
    if (along_n)
      sgemm_blocked(t, M, hi - lo, K, A, rsA, csA, B + lo * csB, rsB, csB, beta, C + lo, ldc);
    else
      sgemm_blocked(t, hi - lo, N, K, A + lo * rsA, rsA, csA, B, rsB, csB, beta, C + lo * ldc, ldc);
  });
}

}  // namespace

void sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
           const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  const KernelTable& t = active_table();
  const int nt = num_threads();
  if (nt == 1 || M * N * std::max<int64_t>(K, 1) < kParallelMacs) {
    sgemm_blocked(t, M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
    return;
  }
  sgemm_split(t, nt, M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}

void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t strideA,
                   int64_t rsA, int64_t csA, const float* B, int64_t strideB, int64_t rsB,
                   int64_t csB, float beta, float* C, int64_t strideC, int64_t ldc) {
  const KernelTable& t = active_table();
  const int nt = num_threads();
  if (batch >= nt && nt > 1 && batch * M * N * std::max<int64_t>(K, 1) >= kParallelMacs) {
    // Whole GEMMs per task: each C is still computed by the single-threaded nest.
    parallel_for(batch, [&](int64_t b) {
      sgemm_blocked(t, M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta,
                    C + b * strideC, ldc);
    });
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    sgemm(M, N, K, A + b * strideA, rsA, csA, B + b * strideB, rsB, csB, beta, C + b * strideC,
          ldc);
}

}  // namespace tg::kernels
