// What the benchmarks print about the machine in their header and --json: the CPU model, its
// cache sizes and flags, and the load average (Linux: /proc/cpuinfo, sysfs and /proc/loadavg), so
// that every figure names where and under what load it was measured.
#pragma once
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/kernels/cache_info.h"

namespace bench {

// "AMD EPYC 7B13 (family 25, model 1)": the first "model name" line, plus the x86 family and
// model numbers (a VM may report only "AMD EPYC"); or "unknown CPU".
inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&](const char* key, std::string& out) {
    const size_t colon = line.find(':');
    if (!out.empty() || line.rfind(key, 0) != 0 || colon == std::string::npos) return;
    const std::string k = line.substr(0, colon);
    if (k.find_last_not_of(" \t") + 1 != std::string(key).size())
      return;  // "model" != "model name"
    out = line.substr(colon + 1);
    out.erase(0, out.find_first_not_of(" \t"));
  };
  while (std::getline(f, line)) {
    value("model name", name), value("Model", name);
    value("cpu family", family), value("model", model);
  }
  if (name.empty()) return "unknown CPU";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

// "L1d 32K, L2 512K, L3 32768K" for cpu0 (each level once, instruction caches left out); without
// sysfs's cache folder (some VMs), what CPUID told the GEMM's blocking (kernels::describe), which
// may also be "caches unknown".
inline std::string cache_sizes() {
  std::ostringstream os;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
    std::string l, t, s;
    if (!(level >> l) || !(type >> t) || !(size >> s)) break;
    if (t == "Instruction") continue;
    os << (os.tellp() > 0 ? ", " : "") << "L" << l << (t == "Data" ? "d" : "") << " " << s;
  }
  return os.tellp() > 0 ? os.str() : tg::kernels::describe(tg::kernels::cache_info());
}

// Whether /proc/cpuinfo's first "flags" line lists `flag` ("avx512_bf16", "amx_bf16").
inline bool cpu_has_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0 || line.find(':') == std::string::npos) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w)
      if (w == flag) return true;
    return false;
  }
  return false;
}

// The CPU's bf16 units as every bf16 figure names them: "avx512_bf16 yes, amx_bf16 no".
inline std::string bf16_units() {
  const auto yn = [](bool b) { return b ? "yes" : "no"; };
  return std::string("avx512_bf16 ") + yn(cpu_has_flag("avx512_bf16")) + ", amx_bf16 " +
         yn(cpu_has_flag("amx_bf16"));
}

// The load averages over 1, 5 and 15 minutes ("3.04 3.84 5.13"), and the first of them in
// `one_minute`; "unknown" (and NaN) where /proc/loadavg cannot be read.
inline std::string load_average(double& one_minute) {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) {
    one_minute = std::numeric_limits<double>::quiet_NaN();
    return "unknown";
  }
  one_minute = std::strtod(a.c_str(), nullptr);
  return a + " " + b + " " + c;
}

}  // namespace bench
