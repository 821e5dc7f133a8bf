// What the benchmarks print about the machine in their header and --json: the CPU model and its
// cache sizes (Linux: /proc/cpuinfo and sysfs), so that every figure names where it was measured.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

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
