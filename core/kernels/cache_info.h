// The data caches of the CPU the process runs on (its first core), for the GEMM's block sizes
// (gemm_blocking.cpp) and the benchmarks' headers. Internal to core/kernels.
#pragma once
#include <cstdint>
#include <string>

namespace tg::kernels {

struct CacheLevel {
  int64_t bytes = 0;  // 0: unknown or absent
  int ways = 0;       // associativity; 0: unknown or fully associative
  int shared_by = 0;  // logical CPUs sharing it; 0: unknown
};

struct CacheInfo {
  CacheLevel l1d, l2, l3;
  const char* source = "none";  // where the figures come from: "cpuid", "sysfs" or "none"
  // The L3 streams the GEMM's B panel to one core as fast as its L2 does. Measured so on AMD
  // (Zen 4: a 2 MiB panel past a 1 MiB L2 ran at the probe's 90%); not on the Intel Xeon here
  // (a 4 MiB panel in L3 ran 2048^3 at 157 GFLOP/s, a 1 MiB one in L2 at 197), so only AMD's.
  bool l3_streams_panel = false;
};

// Detected once, at the first call: the CPU's own report (x86: CPUID leaf 4, or 0x8000001D on
// AMD), else sysfs (/sys/devices/system/cpu/cpu0/cache: Linux on any CPU), else nothing.
const CacheInfo& cache_info();

// "L1d 32 KiB 8-way, L2 1 MiB 8-way, L3 32 MiB 16-way shared by 16 (cpuid)", or "caches unknown".
std::string describe(const CacheInfo& c);

// The per-architecture part (cpu_x86.cpp, cpu_arm.cpp, cpu_other.cpp): fills out from the CPU's
// report of its caches; false where there is no such report.
bool cpuid_caches(CacheInfo& out);

}  // namespace tg::kernels
