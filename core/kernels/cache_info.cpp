// Cache detection shared by every architecture; see cache_info.h.
#include "core/kernels/cache_info.h"

#include <fstream>
#include <sstream>

namespace tg::kernels {

namespace {

// "32K" / "1024K" / "32M" (sysfs's spelling) in bytes; 0 when unreadable.
int64_t parse_size(const std::string& s) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = s.substr(used);
  if (v < 0 || v >= (int64_t(1) << 32)) return 0;  // no cache is that large: unreadable
  if (unit == "K") return v << 10;
  if (unit == "M") return v << 20;
  if (unit == "G") return v << 30;
  return unit.empty() ? v : 0;
}

// CPUs in a sysfs list such as "0-7,16-23"; 0 when unreadable.
int count_cpus(const std::string& list) {
  int n = 0;
  std::istringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    const size_t dash = range.find('-');
    try {
      n += dash == std::string::npos
               ? 1
               : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return n;
}

// sysfs's view of cpu0's caches (Linux on x86 and ARM alike; ARM cores report no CPUID).
bool sysfs_caches(CacheInfo& out) {
  bool any = false;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
    int l = 0;
    std::string t, s;
    if (!(level >> l) || !(type >> t) || !(size >> s)) break;
    if (t == "Instruction") continue;
    CacheLevel c{parse_size(s), 0, 0};
    std::ifstream ways(dir + "ways_of_associativity"), shared(dir + "shared_cpu_list");
    if (!(ways >> c.ways)) c.ways = 0;
    std::string list;
    if (shared >> list) c.shared_by = count_cpus(list);
    CacheLevel* slot = l == 1 ? &out.l1d : l == 2 ? &out.l2 : l == 3 ? &out.l3 : nullptr;
    if (slot == nullptr || c.bytes <= 0) continue;
    *slot = c;
    any = true;
  }
  if (any) out.source = "sysfs";
  return any;
}

CacheInfo detect() {
  CacheInfo c;
  if (!cpuid_caches(c) || c.l1d.bytes <= 0) {
    c = CacheInfo{};
    sysfs_caches(c);
  }
  return c;
}

// "32 KiB" or "1 MiB" (whole MiB only).
std::string human(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

// Ways from the 4-bit associativity code of 0x80000006 (AMD APM vol. 3, CPUID Fn8000_0006): the
// lower bound of each range; 0 for fully associative (0xF) and for the reserved codes (7, 9: "see
// 0x8000001D"), which tell nothing here.
int amd_ways(uint32_t code) {
  static constexpr int kWays[16] = {0, 1, 2, 3, 4, 6, 8, 0, 16, 0, 32, 48, 64, 96, 128, 0};
  return kWays[code & 0xF];
}

}  // namespace

bool amd_legacy_caches(uint32_t ecx_80000005, uint32_t ecx_80000006, uint32_t edx_80000006,
                       CacheInfo& out) {
  const uint32_t l1_ways = (ecx_80000005 >> 16) & 0xFF;
  out.l1d = {int64_t(ecx_80000005 >> 24) << 10, l1_ways == 0xFF ? 0 : int(l1_ways), 0};
  // Ways code 0: the level is disabled (absent).
  const uint32_t l2_code = (ecx_80000006 >> 12) & 0xF, l3_code = (edx_80000006 >> 12) & 0xF;
  out.l2 = l2_code == 0 ? CacheLevel{}
                        : CacheLevel{int64_t(ecx_80000006 >> 16) << 10, amd_ways(l2_code), 0};
  out.l3 = l3_code == 0 ? CacheLevel{}
                        : CacheLevel{int64_t(edx_80000006 >> 18) << 19, amd_ways(l3_code), 0};
  return out.l1d.bytes > 0;
}

const CacheInfo& cache_info() {
  static const CacheInfo c = detect();
  return c;
}

std::string describe(const CacheInfo& c) {
  std::ostringstream os;
  const std::pair<const char*, const CacheLevel*> levels[] = {
      {"L1d", &c.l1d}, {"L2", &c.l2}, {"L3", &c.l3}};
  for (const auto& [name, l] : levels) {
    if (l->bytes <= 0) continue;
    os << (os.tellp() > 0 ? ", " : "") << name << " " << human(l->bytes);
    if (l->ways > 0) os << " " << l->ways << "-way";
    if (l == &c.l3 && l->shared_by > 1) os << " shared by " << l->shared_by;
  }
  if (os.tellp() == 0) return "caches unknown";
  os << " (" << c.source << ")";
  return os.str();
}

}  // namespace tg::kernels
