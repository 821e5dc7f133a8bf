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
  // Where the figures come from: "cpuid", "cpuid 0x80000005/6" (AMD's legacy leaves), "sysfs" or
  // "none".
  const char* source = "none";
  // The L3 streams the GEMM's B panel to one core as fast as its L2 does. Measured so on AMD
  // (Zen 4: a 2 MiB panel past a 1 MiB L2 ran at the probe's 90%); not on the Intel Xeon here
  // (a 4 MiB panel in L3 ran 2048^3 at 157 GFLOP/s, a 1 MiB one in L2 at 197), so only AMD's.
  bool l3_streams_panel = false;
};

// Detected once, at the first call: the CPU's own report (x86: CPUID leaf 4, or 0x8000001D on
// AMD, else AMD's legacy leaves 0x80000005/6), else sysfs (/sys/devices/system/cpu/cpu0/cache:
// Linux on any CPU), else nothing.
const CacheInfo& cache_info();

// "L1d 32 KiB 8-way, L2 1 MiB 8-way, L3 32 MiB 16-way shared by 16 (cpuid)", or "caches unknown".
std::string describe(const CacheInfo& c);

// The per-architecture part (cpu_x86.cpp, cpu_arm.cpp, cpu_other.cpp): fills out from the CPU's
// report of its caches; false where there is no such report.
bool cpuid_caches(CacheInfo& out);

// AMD's legacy cache leaves, decoded from their registers (pure, so tests can feed it values):
// CPUID 0x80000005 ECX (L1d: KiB in [31:24], ways in [23:16], 0xFF fully associative) and
// 0x80000006 ECX (L2: KiB in [31:16], a ways code in [15:12]) and EDX (L3: [31:18] × 512 KiB,
// ways code in [15:12]). For AMD CPUs, or hypervisors, that leave 0x8000001D absent or empty. These
// leaves do not say who shares a cache (shared_by stays 0). False when they report no L1d.
bool amd_legacy_caches(uint32_t ecx_80000005, uint32_t ecx_80000006, uint32_t edx_80000006,
                       CacheInfo& out);

}  // namespace tg::kernels
