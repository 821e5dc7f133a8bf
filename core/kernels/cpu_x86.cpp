// CPU detection for x86-64 (compiled only there): cpuid for the instruction sets, xgetbv for the
// register state the OS saves (a CPU with AVX-512 under an OS that does not enable ZMM state
// must not use it).
#include <cpuid.h>

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
  bool avx512 = false;  // F + DQ + BW + VL, the subset avx512.cpp is compiled for
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
  return f;
}

}  // namespace

void native_isas(IsaEntry out[3]) {
  const Features f = detect();
  out[0] = {"avx2", f.avx2_fma ? avx2_table() : nullptr, "this CPU (or OS) lacks AVX2+FMA"};
  out[1] = {"avx512", f.avx512 ? avx512_table() : nullptr,
            "this CPU (or OS) lacks AVX-512 F/DQ/BW/VL"};
  out[2] = {"neon", nullptr, "this binary is built for x86-64, not aarch64"};
}

}  // namespace tg::kernels
