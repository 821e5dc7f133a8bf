// The golden files PyTorch writes for the tests (tests/golden/gen_ch03.py's format, shared by
// gen_sdpa.py, gen_einsum.py, gen_mha_einsum.py, gen_torch_mha.py), and llm.c's check_tensor to
// compare with them. Text, one tensor per line, floats as %.9g so float32 round-trips exactly:
//     tapegrad-golden <kind> <version>
//     case <name> <seed>
//     tensor <key> <ndim> <dims...> <values...>
//     flag <name> <integer>          (a switch 0/1, or a size: gen_torch_mha.py)
//     end
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::testing {

struct GoldenCase {
  std::string name;
  uint64_t seed = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;  // file order
  std::map<std::string, int> flags;                     // "flag <name> <integer>" lines
  const Tensor& at(const std::string& key) const {
    for (const auto& [k, t] : tensors)
      if (k == key) return t;
    throw std::runtime_error("golden case " + name + " has no tensor '" + key + "'");
  }
};

inline constexpr int kGoldenVersion = 1;

// file (in TG_GOLDEN_DIR) of kind want_kind, written by `script` (named in the errors' hint).
inline std::vector<GoldenCase> load_goldens(const std::string& file, const std::string& want_kind,
                                            const std::string& script) {
  const std::string path = std::string(TG_GOLDEN_DIR) + "/" + file;
  const std::string hint = "; HINT: see " + script + " (how to run it is in its header)";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path + hint);
  std::string magic, kind;
  int version = 0;
  f >> magic >> kind >> version;
  if (magic != "tapegrad-golden" || kind != want_kind || version != kGoldenVersion)
    throw std::runtime_error(path + ": expected header 'tapegrad-golden " + want_kind + " " +
                             std::to_string(kGoldenVersion) + "'" + hint);
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string word;
    if (!(is >> word) || word[0] == '#') continue;
    if (word == "case") {
      cases.emplace_back();
      is >> cases.back().name >> cases.back().seed;
    } else if (word == "tensor") {
      std::string key;
      int64_t nd = 0;
      is >> key >> nd;
      Shape shape(static_cast<size_t>(nd));
      for (auto& d : shape) is >> d;
      std::vector<float> v;
      std::string x;  // strtof, unlike >>, reads the "-inf" of an additive mask
      while (is >> x) v.push_back(std::strtof(x.c_str(), nullptr));
      cases.back().tensors.emplace_back(key, from_vector(v, shape));
    } else if (word == "flag") {
      std::string key;
      is >> key >> cases.back().flags[key];
    }
  }
  return cases;
}

// llm.c's check_tensor: the first pairs and the max difference, in the failure message.
inline bool check_tensor(const std::string& what, const Tensor& got, const Tensor& want,
                         double atol, double rtol) {
  if (got.shape() != want.shape()) {
    FAIL_CHECK(what << ": shape " << shape_str(got.shape()) << " vs golden "
                    << shape_str(want.shape()));
    return false;
  }
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double maxdiff = 0;
  bool ok = true;
  std::ostringstream os;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::abs(g[i] - w[i]);
    maxdiff = std::max(maxdiff, d);
    const bool good = d <= atol + rtol * std::abs(w[i]);
    ok = ok && good;
    if (i < 5) os << "  " << (good ? "OK " : "NOT OK ") << g[i] << " " << w[i] << "\n";
  }
  INFO(what << " maxdiff " << maxdiff << "\n" << os.str());
  CHECK(ok);
  return ok;
}

}  // namespace tg::testing
