// Helpers shared by the kernel tests (test_kernels.cpp, test_attention_kernels.cpp): random
// buffers and a loop over every kernel path this machine runs.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"

namespace tg::testing {

// n floats uniform in [lo, hi).
inline std::vector<float> randv(std::mt19937& g, int64_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n > 0 ? n : 0));
  for (auto& x : v) x = d(g);
  return v;
}

// Whether a and b hold the same floats bit for bit (-0 is not +0; empty vectors are equal).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// Runs body once per available path with that path active; restores the default afterwards.
template <class F>
void for_each_isa(F body) {
  namespace k = tg::kernels;
  const std::string before = k::active_isa();
  for (const std::string& isa : k::available_isas()) {
    k::set_isa(isa);
    INFO("isa = " << isa);
    body(isa);
  }
  k::set_isa(before);
}

}  // namespace tg::testing
