// CPU detection for x86-64 (compiled only there): cpuid for the instruction sets, xgetbv for the
// register state the OS saves (a CPU with AVX-512 under an OS that does not enable ZMM state
// must not use it).
#include <cpuid.h>

#include <cstring>

#include "core/kernels/cache_info.h"
#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

struct Features {
  bool avx2_fma = false;
  bool avx512 = false;       // F + DQ + BW + VL, the subset avx512.cpp is compiled for
  bool avx512_bf16 = false;  // and AVX512_BF16 (vdpbf16ps), for avx512_bf16.cpp
};

Features detect() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5);
  const bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  f.avx2_fma = ymm_state && avx2 && fma;
  f.avx512 = f.avx2_fma && zmm_state && f512 && dq && bw && vl;
  // AVX512_BF16: leaf 7 subleaf 1, EAX bit 5 (subleaf 1 exists when subleaf 0's EAX >= 1).
  if (f.avx512 && a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
  return f;
}

// The caches that CPUID's deterministic cache leaf describes: leaf 4 on Intel, 0x8000001D on AMD
// and Hygon (the same layout). Each subleaf is one cache: type and level in EAX, ways,
// partitions and line size in EBX, sets in ECX, and the logical CPUs sharing it in EAX.
bool cpuid_cache_leaf(unsigned leaf, CacheInfo& out) {
  bool any = false;
  for (unsigned i = 0; i < 16; ++i) {
    unsigned a, b, c, d;
    __cpuid_count(leaf, i, a, b, c, d);
    const unsigned type = a & 0x1F, level = (a >> 5) & 0x7;
    if (type == 0) break;     // no more caches
    if (type == 2) continue;  // instruction cache
    const int64_t ways = ((b >> 22) & 0x3FF) + 1, parts = ((b >> 12) & 0x3FF) + 1;
    const int64_t line = (b & 0xFFF) + 1, sets = int64_t(c) + 1;
    const bool fully_associative = a & (1u << 9);
    CacheLevel* slot = level == 1   ? &out.l1d
                       : level == 2 ? &out.l2
                       : level == 3 ? &out.l3
                                    : nullptr;
    if (slot == nullptr) continue;
    const int shared_by = int((a >> 14) & 0xFFF) + 1;  // logical CPUs sharing it
    // ways·parts·line < 2^33; times sets it could overflow, so a size past 1 TiB (a hypervisor's
    // nonsense) counts as unknown (0).
    const int64_t way_bytes = ways * parts * line;
    const int64_t bytes = sets <= (int64_t(1) << 40) / way_bytes ? way_bytes * sets : 0;
    *slot = {bytes, fully_associative ? 0 : int(ways), shared_by};
    any = true;
  }
  return any;
}

}  // namespace

bool cpuid_caches(CacheInfo& out) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  const bool amd =
      std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  if (amd) {
    // 0x8000001D exists when CPUID 0x80000001 reports the topology extensions (ECX bit 22). A
    // hypervisor may hide them (the Zen 5 VM of issue 34: no topology extensions, no sysfs cache
    // folder): then the legacy leaves 0x80000005/6, which every AMD CPU since K7 has.
    const unsigned max_ext = static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr));
    const bool topo =
        max_ext >= 0x8000001Du && __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 22));
    if (!topo || !cpuid_cache_leaf(0x8000001D, out)) {
      if (max_ext < 0x80000006u) return false;
      unsigned c5, c6, d6;
      __cpuid(0x80000005, a, b, c5, d);
      __cpuid(0x80000006, a, b, c6, d6);
      out = CacheInfo{};
      if (!amd_legacy_caches(c5, c6, d6, out)) return false;
      out.source = "cpuid 0x80000005/6";
      out.l3_streams_panel = true;
      return true;
    }
  } else {
    if (max_leaf < 4 || !cpuid_cache_leaf(4, out)) return false;
  }
  out.source = "cpuid";
  out.l3_streams_panel = amd;
  return true;
}

void native_isas(IsaEntry out[kNativeIsas]) {
  const Features f = detect();
  out[0] = {"avx2", f.avx2_fma ? avx2_table() : nullptr, "this CPU (or OS) lacks AVX2+FMA"};
  out[1] = {"avx512", f.avx512 ? avx512_table() : nullptr,
            "this CPU (or OS) lacks AVX-512 F/DQ/BW/VL"};
  out[2] = {"avx512_bf16", f.avx512_bf16 ? avx512_bf16_table() : nullptr,
            "this CPU (or OS) lacks AVX-512 F/DQ/BW/VL with AVX512_BF16"};
  out[3] = {"neon", nullptr, "this binary is built for x86-64, not aarch64"};
}

}  // namespace tg::kernels
