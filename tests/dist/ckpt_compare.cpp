// ckpt_compare A B: exit 0 when two tapegrad checkpoints hold the same training state bit for
// bit: every tensor (weights, AdamW moments, tokenizer merges, epoch order) with the same name,
// dtype, shape and bytes, in the same order, and every metadata entry equal but those that
// record how the run was made rather than where it is (wall time, threads, the options line) and
// the wall time inside `history`. Otherwise one line per difference on stderr and exit 1 (2 for
// a bad command line or an unreadable file). Used by tests/dist/*.sh.
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <string>

#include "core/safetensors.h"

using namespace tg;

namespace {

// Differences found so far; only the first kShown are printed, the rest are counted.
int differences = 0;
constexpr int kShown = 12;

template <class... Args>
void report(const char* fmt, Args... args) {
  if (++differences <= kShown) std::fprintf(stderr, fmt, args...);
}

const void* bytes_of(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32:
      return t.data<float>();
    case DType::Float64:
      return t.data<double>();
    case DType::Int64:
      return t.data<int64_t>();
    case DType::Bool:
      return t.data<bool>();
  }
  return nullptr;
}

void compare_tensor(const std::string& name, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    report("%s: %s %s against %s %s\n", name.c_str(), dtype_name(a.dtype()),
           shape_str(a.shape()).c_str(), dtype_name(b.dtype()), shape_str(b.shape()).c_str());
    return;
  }
  const size_t width = dtype_size(a.dtype()), n = size_t(a.numel());
  const auto* pa = static_cast<const unsigned char*>(bytes_of(a));
  const auto* pb = static_cast<const unsigned char*>(bytes_of(b));
  size_t differ = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(pa + i * width, pb + i * width, width) != 0 && differ++ == 0) first = i;
  if (differ == 0) return;
  const double va = a.dtype() == DType::Float32 ? double(a.data<float>()[first]) : 0;
  const double vb = b.dtype() == DType::Float32 ? double(b.data<float>()[first]) : 0;
  report("%s: %zu of %zu elements differ, the first at flat index %zu (%.9g against %.9g)\n",
         name.c_str(), differ, n, first, va, vb);
}

// The metadata that depends on how a run was made, not on its state.
const std::set<std::string> kRunOnly = {"seconds", "threads", "options"};

// Drops each `,? *"seconds": *NUMBER` (no std::regex: GCC 12 warns inside it under -O1 -Werror).
std::string without_seconds(const std::string& history) {
  const std::string key = "\"seconds\":";
  std::string out;
  size_t from = 0;
  for (size_t at; (at = history.find(key, from)) != std::string::npos;) {
    size_t start = at;
    while (start > from && history[start - 1] == ' ') --start;
    if (start > from && history[start - 1] == ',') --start;
    size_t end = at + key.size();
    while (end < history.size() && history[end] == ' ') ++end;
    while (end < history.size() && std::strchr("-0123456789.eE+", history[end])) ++end;
    out.append(history, from, start - from);
    from = end;
  }
  return out.append(history, from, std::string::npos);
}

void compare_metadata(const Metadata& a, const Metadata& b) {
  std::set<std::string> keys;
  for (const auto& m : {a, b})
    for (const auto& [k, v] : m) keys.insert(k);
  for (const std::string& k : keys) {
    if (kRunOnly.count(k)) continue;
    const auto ia = a.find(k), ib = b.find(k);
    if (ia == a.end() || ib == b.end()) {
      report("metadata '%s' is in one file only\n", k.c_str());
      continue;
    }
    const bool same = k == "history" ? without_seconds(ia->second) == without_seconds(ib->second)
                                     : ia->second == ib->second;
    if (!same)
      report("metadata '%s' differs: '%.60s' against '%.60s'\n", k.c_str(), ia->second.c_str(),
             ib->second.c_str());
  }
}

void compare(const tg::SafeTensors& a, const tg::SafeTensors& b) {
  if (a.tensors.size() != b.tensors.size())
    report("%zu tensors against %zu\n", a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size() && i < b.tensors.size(); ++i) {
    const auto& [na, ta] = a.tensors[i];
    const auto& [nb, tb] = b.tensors[i];
    if (na != nb)
      report("tensor %zu is %s against %s\n", i, na.c_str(), nb.c_str());
    else
      compare_tensor(na, ta, tb);
  }
  compare_metadata(a.metadata, b.metadata);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ckpt_compare A.safetensors B.safetensors\n");
    return 2;
  }
  try {
    compare(tg::load_safetensors(argv[1]), tg::load_safetensors(argv[2]));
    if (differences > kShown) std::fprintf(stderr, "... %d more\n", differences - kShown);
    if (differences)
      std::fprintf(stderr, "%s and %s: %d differences\n", argv[1], argv[2], differences);
    return differences ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_compare: %s\n", e.what());
    return 2;
  }
}
