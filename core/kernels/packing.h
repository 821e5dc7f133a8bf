// Packing for the GEMM micro-kernels (layouts in table.h), shared by the GEMM driver (gemm.cpp)
// and the fused attention driver (attention.cpp); and the per-thread scratch buffers they pack
// into. Internal to core/kernels.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "core/kernels/table.h"

namespace tg::kernels {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// n floats, 64-byte aligned, freed with the pointer; throws std::bad_alloc.
inline std::unique_ptr<float, FreeDeleter> aligned_floats(int64_t n) {
  const size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();
  return std::unique_ptr<float, FreeDeleter>(p);
}

// A 64-byte-aligned scratch buffer per thread and role, grown on demand.
class Scratch {
 public:
  float* get(int64_t n) {
    if (n > cap_) {
      buf_ = aligned_floats(n);  // on bad_alloc, cap_ stays: the old buffer is still valid
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<float, FreeDeleter> buf_;
  int64_t cap_ = 0;
};

// Packs A[0:mc, 0:kc] (general strides) into MR-row micro-panels, k-major, zero-padding the last
// panel: out holds ceil(mc / MR) panels of MR·kc floats.
void pack_a(const KernelTable& t, int64_t mc, int64_t kc, const float* A, int64_t rsA, int64_t csA,
            int64_t MR, float* out);
// Packs B[0:kc, 0:nc] (general strides) into NR-column micro-panels, zero-padding the last panel:
// out holds ceil(nc / NR) panels of kc·NR floats.
void pack_b(const KernelTable& t, int64_t kc, int64_t nc, const float* B, int64_t rsB, int64_t csB,
            int64_t NR, float* out);

// How the micro-kernels read A, a matrix with rows rsA and columns csA apart: in place by rows
// (the table's sgemm_ukernel_rowa, for csA == 1), in place by columns (sgemm_ukernel_cola, for
// rsA == 1; full MR-row panels only, so an edge panel is packed), or from packed micro-panels.
// The one rule the GEMM driver (gemm.cpp) and the attention tiles (attention.cpp) share.
enum class AReadKind { kPacked, kRows, kCols };

// The in-place reader this table has for A's layout, else kPacked.
inline AReadKind a_read_kind(const KernelTable& t, int64_t rsA, int64_t csA) {
  if (csA == 1 && t.sgemm_ukernel_rowa != nullptr) return AReadKind::kRows;
  if (rsA == 1 && t.sgemm_ukernel_cola != nullptr) return AReadKind::kCols;
  return AReadKind::kPacked;
}

// Whether a row panel of m rows must be packed before the micro-kernel reads it.
inline bool a_panel_packed(AReadKind kind, int64_t m, int64_t MR) {
  return kind == AReadKind::kPacked || (kind == AReadKind::kCols && m < MR);
}

// One m×n tile of C (+)= A-panel · b: `a` is the panel's first element in A itself (rows rsA,
// columns csA apart), `packed` its packed copy when a_panel_packed (else unused).
inline void a_panel_ukernel(const KernelTable& t, AReadKind kind, int64_t kc, const float* a,
                            int64_t rsA, int64_t csA, const float* packed, const float* b,
                            int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                            bool accumulate) {
  if (a_panel_packed(kind, m, t.sgemm_blocking.mr))
    t.sgemm_ukernel(kc, packed, b, ldb, c, ldc, m, n, accumulate);
  else if (kind == AReadKind::kRows)
    t.sgemm_ukernel_rowa(kc, a, rsA, b, ldb, c, ldc, m, n, accumulate);
  else
    t.sgemm_ukernel_cola(kc, a, csA, b, ldb, c, ldc, m, n, accumulate);
}

}  // namespace tg::kernels
