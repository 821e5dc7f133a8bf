// What the benchmarks print about the machine in their header and --json: the CPU model and its
// cache sizes (Linux: /proc/cpuinfo and sysfs), so that every figure names where it was measured.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

namespace bench {

// "AMD EPYC 7B13" (the first "model name" line), or "unknown CPU".
inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0 && line.rfind("Model", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    if (!v.empty()) return v;
  }
  return "unknown CPU";
}

// "L1d 32K, L2 512K, L3 32768K" for cpu0 (each level once, instruction caches left out), or
// "caches unknown".
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
  return os.tellp() > 0 ? os.str() : "caches unknown";
}

}  // namespace bench
