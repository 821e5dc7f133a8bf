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
  void operator()(void* p) const { std::free(p); }
};

// n elements of T, 64-byte aligned, freed with the pointer; throws std::bad_alloc.
template <class T>
inline std::unique_ptr<T, FreeDeleter> aligned_array(int64_t n) {
  const size_t bytes = ((static_cast<size_t>(n) * sizeof(T) + 63) / 64) * 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();
  return std::unique_ptr<T, FreeDeleter>(p);
}
inline std::unique_ptr<float, FreeDeleter> aligned_floats(int64_t n) {
  return aligned_array<float>(n);
}

// A 64-byte-aligned scratch buffer per thread and role, grown on demand (floats; bfloat16 bits
// for the bf16 GEMM).
template <class T>
class ScratchOf {
 public:
  T* get(int64_t n) {
    if (n > cap_) {
      buf_ = aligned_array<T>(n);  // on bad_alloc, cap_ stays: the old buffer is still valid
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<T, FreeDeleter> buf_;
  int64_t cap_ = 0;
};
using Scratch = ScratchOf<float>;

// Packs A[0:mc, 0:kc] (general strides) into MR-row micro-panels, k-major, zero-padding the last
// panel: out holds ceil(mc / MR) panels of MR·kc floats.
void pack_a(const KernelTable& t, int64_t mc, int64_t kc, const float* A, int64_t rsA, int64_t csA,
            int64_t MR, float* out);
// Packs B[0:kc, 0:nc] (general strides) into NR-column micro-panels, zero-padding the last panel:
// out holds ceil(nc / NR) panels of kc·NR floats.
void pack_b(const KernelTable& t, int64_t kc, int64_t nc, const float* B, int64_t rsB, int64_t csB,
            int64_t NR, float* out);

// The bf16 GEMM's panels (table.h: GemmBf16Ukernel), k in pairs side by side; kc may be odd,
// the missing last k of a pair and rows or columns past the edge are zero. A pair is 32 bits, as
// a float is, and the panels hold pairs where the float panels hold floats: where t's float
// tile matches, the float packing routines of t (transposes in registers) move the pairs whole;
// the other layouts go through t's bf16 packing entries (table.h: gemm_bf16_pack_pairs for
// row-major B and transposed A, gemm_bf16_pack_lines for row-major A and transposed B) where it
// has them, else through portable loops (the scalar table's: the reference the tests hold the
// entries to, byte for byte).
// A[0:mc, 0:kc] into MR-row micro-panels: out holds ceil(mc / MR) panels of MR·2·ceil(kc / 2).
void pack_a_bf16(const KernelTable& t, int64_t mc, int64_t kc, const uint16_t* A, int64_t rsA,
                 int64_t csA, int64_t MR, uint16_t* out);
// B[0:kc, 0:nc] into NR-column micro-panels: out holds ceil(nc / NR) panels of NR·2·ceil(kc / 2).
void pack_b_bf16(const KernelTable& t, int64_t kc, int64_t nc, const uint16_t* B, int64_t rsB,
                 int64_t csB, int64_t NR, uint16_t* out);

// A[M, K] (rows rs, columns cs apart) as the micro-kernels read it, the one rule the GEMM driver
// (gemm.cpp) and the attention tiles (attention.cpp) share: in place by rows with the table's
// sgemm_ukernel_rowa (cs == 1), in place by columns with sgemm_ukernel_cola (rs == 1; whole MR-row
// panels only, so an edge panel is packed), else from packed MR-row micro-panels (sgemm_ukernel).
class ASource {
 public:
  ASource() = default;
  // in_place false: always packed (an A that meets many column panels repays its packing).
  ASource(const KernelTable& t, const float* A, int64_t rs, int64_t cs, bool in_place)
      : t_(&t), a_(A), rs_(rs), cs_(cs) {
    if (!in_place) return;
    if (cs == 1 && t.sgemm_ukernel_rowa != nullptr)
      kind_ = Kind::rows;
    else if (rs == 1 && t.sgemm_ukernel_cola != nullptr)
      kind_ = Kind::cols;
  }

  // Whether some panels are read in place.
  bool in_place() const { return kind_ != Kind::packed; }
  // Whether a row panel of m rows is read from its packed copy.
  bool packed(int64_t m) const {
    return kind_ == Kind::packed || (kind_ == Kind::cols && m < t_->sgemm_blocking.mr);
  }

  // Packs the row panels of A[i : i + m, k0 : k0 + kc] that are read packed into out (panel p at
  // out + p·MR·kc); the others are left alone.
  void pack(int64_t i, int64_t m, int64_t k0, int64_t kc, float* out) const {
    const int64_t MR = t_->sgemm_blocking.mr, full = m / MR * MR;
    if (full > 0 && packed(MR)) pack_a(*t_, full, kc, at(i, k0), rs_, cs_, MR, out);
    if (full < m && packed(m - full))
      pack_a(*t_, m - full, kc, at(i + full, k0), rs_, cs_, MR, out + full * kc);
  }

  // c (+)= A[i : i + m, k0 : k0 + kc] · b, one m×n tile by the micro-kernel that reads this panel;
  // ap: the panel's packed copy, as pack left it.
  void tile(int64_t i, int64_t k0, int64_t kc, const float* ap, const float* b, int64_t ldb,
            float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate) const {
    if (packed(m))
      t_->sgemm_ukernel(kc, ap, b, ldb, c, ldc, m, n, accumulate);
    else if (kind_ == Kind::rows)
      t_->sgemm_ukernel_rowa(kc, at(i, k0), rs_, b, ldb, c, ldc, m, n, accumulate);
    else
      t_->sgemm_ukernel_cola(kc, at(i, k0), cs_, b, ldb, c, ldc, m, n, accumulate);
  }

 private:
  enum class Kind { packed, rows, cols };
  const float* at(int64_t i, int64_t k) const { return a_ + i * rs_ + k * cs_; }

  const KernelTable* t_ = nullptr;
  const float* a_ = nullptr;
  int64_t rs_ = 0, cs_ = 0;
  Kind kind_ = Kind::packed;
};

}  // namespace tg::kernels
