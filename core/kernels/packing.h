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

}  // namespace tg::kernels
