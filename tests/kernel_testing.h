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
#include "core/threadpool.h"

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

// ---- one row of A, batched (kernels.h: the batched GEMMs' route for M == 1)
// ---------------------- {batch, N, K}: tails of the 16- and 64-wide groups, K = 0, 1 and odd (past
// KC too), and sizes the threads split.
struct RowShape {
  int64_t batch, N, K;
};
inline constexpr RowShape kRowShapes[] = {{1, 1, 1},     {3, 17, 5},    {2, 5, 0},     {4, 64, 1},
                                          {12, 255, 64}, {1, 1000, 64}, {2, 130, 701}, {5, 79, 33}};
// One case's operands: B stored transposed (dots, rows ldb > K apart: rsB 1, csB ldb) or row-major
// (axpys, ldb > N), the batch's A, B and C sA, sB, sC elements apart.
struct RowLayout {
  int64_t ldb, sA, sB, sC, rsB, csB;
  RowLayout(int64_t N, int64_t K, bool dots)
      : ldb(dots ? K + 3 : N + 5),
        sA(K + 2),
        sB((dots ? N : K) * ldb + 1),
        sC(N + 7),
        rsB(dots ? 1 : ldb),
        csB(dots ? ldb : 1) {}
};

// Runs cases(g, out) at 1, 2 and 3 threads, g seeded with `seed` each time: the C's it appends to
// out must be the same bits at every thread count. Restores the thread count.
template <class F>
void same_bits_at_1_2_3_threads(uint32_t seed, F cases) {
  const int before = tg::num_threads();
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    tg::set_num_threads(threads);
    INFO("threads = " << threads);
    std::mt19937 g(seed);
    std::vector<float> all;
    cases(g, all);
    if (threads == 1) first = all;
    CHECK(same_bits(all, first));
  }
  tg::set_num_threads(before);
}

}  // namespace tg::testing
