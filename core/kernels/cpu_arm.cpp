// CPU detection for aarch64 (compiled only there): Advanced SIMD (NEON) is mandatory in ARMv8-A.
#include "core/kernels/cache_info.h"
#include "core/kernels/table.h"

namespace tg::kernels {

void native_isas(IsaEntry out[kNativeIsas]) {
  out[0] = {"avx2", nullptr, "this binary is built for aarch64, not x86-64"};
  out[1] = {"avx512", nullptr, "this binary is built for aarch64, not x86-64"};
  out[2] = {"avx512_bf16", nullptr, "this binary is built for aarch64, not x86-64"};
  out[3] = {"neon", neon_table(), ""};
}

// No CPUID here: the caches come from sysfs (cache_info.cpp) or the tables' own blocking.
bool cpuid_caches(CacheInfo&) { return false; }

}  // namespace tg::kernels
