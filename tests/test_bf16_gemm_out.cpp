// The bf16 GEMM's output modes (kernels.h: Bf16Out): the kernels round their float32 sums to
// bfloat16 as each tile receives its last K block, and must give the bits of the float32 GEMM
// followed by f32_to_bf16 (gemm_bf16_ref's definition) exactly: on every path this machine runs,
// at 1, 2 and 3 threads, for K below, at and past one K block (the blocks made small so that a few
// multiply-adds cross them, and the table's own), on edge tiles, batched and through the one-row
// route. Crafted sums pin the rounding itself: ties to even, NaN as 0x7FC0, infinities, a tie at
// the top rounding to infinity, flushed and denormal operands. No NaN leeway for the rounded
// modes: their NaN is 0x7FC0, whatever NaN the sums held (mode f32 leaves the payload open).
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "tests/kernel_testing.h"

namespace k = tg::kernels;
using k::Bf16Out;
using tg::testing::for_each_isa;

namespace {

uint16_t bf(float x) {  // x must be a bf16 value
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t(u >> 16);
}
float widen(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// One C of either kind: float32 (f32, f32_rounded) or bf16 bits, both kept as 32-bit words so
// that one comparison serves (a bf16 in the low half).
struct OutC {
  Bf16Out mode;
  std::vector<float> f;
  std::vector<uint16_t> h;
  k::GemmBf16Out out(int64_t ld) {
    return mode == Bf16Out::bf16 ? k::bf16_out_bf16(h.data(), ld)
                                 : k::bf16_out_f32(f.data(), ld, mode == Bf16Out::f32_rounded);
  }
  std::vector<uint32_t> words() const {
    std::vector<uint32_t> w(mode == Bf16Out::bf16 ? h.size() : f.size());
    for (size_t i = 0; i < w.size(); ++i)
      if (mode == Bf16Out::bf16)
        w[i] = h[i];
      else
        std::memcpy(&w[i], &f[i], 4);
    return w;
  }
};

// n elements of a C in `mode`: beta 0 fills NaN (must not be read), beta 1 values in [-2, 2]
// with, for float32, a denormal (read as zero) and a tie (rounded to even by the rounded mode).
OutC make_c(std::mt19937& g, Bf16Out mode, int64_t n, float beta) {
  OutC c{mode, {}, {}};
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (auto& x : v) x = beta == 0.f ? std::nanf("") : u(g);
  if (beta != 0.f && n > 2) v[0] = 1e-40f, v[1] = 1.f + 0x1p-8f;
  if (mode != Bf16Out::bf16) {
    c.f = v;
    return c;
  }
  c.h.resize(v.size());
  k::f32_to_bf16_ref(int64_t(v.size()), v.data(), c.h.data());
  if (beta == 0.f) std::fill(c.h.begin(), c.h.end(), uint16_t(0x7FC1));
  return c;
}

void check_words(const OutC& got, const OutC& want, const std::string& what) {
  const std::vector<uint32_t> a = got.words(), b = want.words();
  REQUIRE(a.size() == b.size());
  int bad = 0;
  const auto nan = [](uint32_t w) { return (w & 0x7F800000u) == 0x7F800000u && (w & 0x7FFFFFu); };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (got.mode == Bf16Out::f32 && nan(a[i]) && nan(b[i])) continue;  // payload left open
    char line[160];
    std::snprintf(line, sizeof line, "%s [%zu]: got 0x%08x, want 0x%08x", what.c_str(), i, a[i],
                  b[i]);
    if (++bad <= 5) FAIL_CHECK(line);
  }
  CHECK(bad == 0);
}

// Wild bf16 operands (any sign, exponents from the denormals up, some zeros and infinities) with
// a NaN now and then, or tame ones in [-1, 1).
std::vector<uint16_t> operands(std::mt19937& g, int64_t n, bool wild) {
  std::vector<uint16_t> v(size_t(std::max<int64_t>(n, 1)));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& h : v) {
    const uint32_t r = g();
    if (!wild) {
      const float x = u(g);
      k::f32_to_bf16_ref(1, &x, &h);
      continue;
    }
    uint32_t e = 60 + r % 88, mantissa = (r >> 16) & 0x7Fu;  // 2^-67 .. 2^20
    if (r % 97 == 0) e = 0;                                  // denormal or zero
    if (r % 1009 == 0) e = 255, mantissa = 0;                // infinity
    if (r % 1511 == 0) e = 255, mantissa = 0x41;             // NaN with a payload
    h = uint16_t(((r >> 8) & 1u) << 15 | e << 7 | mantissa);
  }
  return v;
}

struct Case {
  int64_t M, N, K;
  bool ta, tb;  // A, B stored transposed
  float beta;
  Bf16Out mode;
  bool wild;
};

// The active path against the reference from the same C, bit for bit.
void run(std::mt19937& g, const Case& c, const std::string& what) {
  const int64_t ldc = c.N + 3;
  const std::vector<uint16_t> A = operands(g, c.M * c.K, c.wild),
                              B = operands(g, c.K * c.N, c.wild);
  const int64_t rsA = c.ta ? 1 : c.K, csA = c.ta ? c.M : 1, rsB = c.tb ? 1 : c.N,
                csB = c.tb ? c.K : 1;
  OutC C = make_c(g, c.mode, c.M * ldc, c.beta), R = C;
  k::gemm_bf16(c.M, c.N, c.K, A.data(), rsA, csA, B.data(), rsB, csB, c.beta, C.out(ldc));
  k::gemm_bf16_ref(c.M, c.N, c.K, A.data(), rsA, csA, B.data(), rsB, csB, c.beta, R.out(ldc));
  INFO(what << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.ta << " tb=" << c.tb
            << " beta=" << c.beta << " mode=" << int(c.mode) << " wild=" << c.wild);
  check_words(C, R, "gemm_bf16");
}

const Bf16Out kModes[] = {Bf16Out::f32, Bf16Out::f32_rounded, Bf16Out::bf16};

}  // namespace

TEST_CASE("bf16 GEMM output modes: the reference is the float32 GEMM, then f32_to_bf16") {
  std::mt19937 g(3);
  const int64_t M = 5, N = 7, K = 9;
  const std::vector<uint16_t> A = operands(g, M * K, true), B = operands(g, K * N, true);
  std::vector<float> F(size_t(M * N), 0.5f);
  std::vector<uint16_t> want(F.size());
  OutC R{Bf16Out::f32_rounded, F, {}}, H{Bf16Out::bf16, {}, std::vector<uint16_t>(F.size())};
  k::f32_to_bf16_ref(M * N, F.data(), H.h.data());  // 0.5 is a bf16: beta 1 reads the same C
  k::gemm_bf16_ref(M, N, K, A.data(), K, 1, B.data(), N, 1, 1.f, F.data(), N);
  k::gemm_bf16_ref(M, N, K, A.data(), K, 1, B.data(), N, 1, 1.f, R.out(N));
  k::gemm_bf16_ref(M, N, K, A.data(), K, 1, B.data(), N, 1, 1.f, H.out(N));
  k::f32_to_bf16_ref(M * N, F.data(), want.data());
  for (size_t i = 0; i < F.size(); ++i) {
    CAPTURE(i);
    CHECK(H.h[i] == want[i]);
    CHECK(bf(R.f[i]) == want[i]);
    uint32_t u;
    std::memcpy(&u, &R.f[i], 4);
    CHECK(u == uint32_t(want[i]) << 16);  // the bf16 widened: its low half zero
  }
}

TEST_CASE("bf16 GEMM output modes: crafted sums round to nearest even, on every path") {
  // C[i, i] = a1·b1 + a0·b0 (the unit's chain from +0, odd half first), rounded: row i of A and
  // column i of B hold case i's pair; the rest of C is compared with the reference only.
  struct Sum {
    float a0, a1, b0, b1;
    uint16_t want;
    const char* what;
  };
  const float big = 0x1.FEp127f;  // bf16's largest finite, 0x7F7F
  const Sum sums[] = {
      {0x1p-8f, 1.f, 1.f, 1.f, 0x3F80, "1 + 2^-8: a tie, to even (down)"},
      {0x1p-8f, 1.f + 0x1p-7f, 1.f, 1.f, 0x3F82, "1 + 3·2^-8: a tie, to even (up)"},
      {0x1.04p-8f, 1.f, 1.f, 1.f, 0x3F81, "just above the tie: up"},
      {0x1.F8p-9f, 1.f, 1.f, 1.f, 0x3F80, "just below the tie: down"},
      {0x1p-8f, -1.f, -1.f, 1.f, 0xBF80, "-(1 + 2^-8): a tie, to even"},
      {0x1p-8f, 0x1.FEp0f, 1.f, 1.f, 0x4000, "2 - 2^-8: a tie carried into the exponent"},
      {0x1p119f, big, 1.f, 1.f, 0x7F80, "a tie past the largest finite: to even, infinity"},
      {0.f, 0x1p100f, 0.f, 0x1p100f, 0x7F80, "an infinite sum"},
      {0.f, -0x1p100f, 0.f, 0x1p100f, 0xFF80, "-inf"},
      {0.f, INFINITY, 0.f, 0.f, 0x7FC0, "inf·0: NaN, as 0x7FC0"},
      {0.f, widen(0xFFC1), 0.f, 1.f, 0x7FC0, "a NaN with sign and payload: 0x7FC0"},
      {0.f, widen(0x0001), 0.f, 0x1p100f, 0x0000, "a bf16 denormal reads as zero"},
      {-0x1p-65f, 0.f, 0x1p-65f, 0.f, 0x8000, "a tiny sum flushes to zero of its sign"},
      {0x1p-67f, 0x1p-63f, 0x1p-67f, 0x1p-63f, 0x0080, "2^-126·(1 + 2^-8): a tie, to even"},
  };
  const int64_t n = int64_t(std::size(sums));
  std::vector<uint16_t> A(size_t(n * 2)), B(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    A[size_t(i * 2)] = bf(sums[i].a0), A[size_t(i * 2 + 1)] = bf(sums[i].a1);
    B[size_t(i)] = bf(sums[i].b0), B[size_t(n + i)] = bf(sums[i].b1);
  }
  for_each_isa([&](const std::string& isa) {
    for (const Bf16Out mode : {Bf16Out::f32_rounded, Bf16Out::bf16}) {
      OutC C{mode, std::vector<float>(size_t(n * n)), std::vector<uint16_t>(size_t(n * n))};
      OutC R = C;
      k::gemm_bf16(n, n, 2, A.data(), 2, 1, B.data(), n, 1, 0.f, C.out(n));
      k::gemm_bf16_ref(n, n, 2, A.data(), 2, 1, B.data(), n, 1, 0.f, R.out(n));
      for (int64_t i = 0; i < n; ++i) {
        INFO(isa << " mode " << int(mode) << ": " << sums[i].what);
        const size_t d = size_t(i * n + i);
        CHECK((mode == Bf16Out::bf16 ? C.h[d] : bf(C.f[d])) == sums[i].want);
        CHECK((mode == Bf16Out::bf16 ? R.h[d] : bf(R.f[d])) == sums[i].want);
      }
      check_words(C, R, isa + " crafted");
    }
    // A float32 C of beta 1 rounds its own values when K adds only zeros: FLT_MAX rounds to inf
    // (as c10 rounds it), a tie to even, a denormal C reads as zero.
    const float c0[] = {FLT_MAX, 1.f + 0x1p-8f, 1e-40f};
    const uint16_t want[] = {0x7F80, 0x3F80, 0x0000};
    const uint16_t zeros[2] = {0, 0};
    for (int i = 0; i < 3; ++i) {
      float c = c0[i];
      k::gemm_bf16(1, 1, 2, zeros, 2, 1, zeros, 1, 1, 1.f, k::bf16_out_f32(&c, 1, true));
      CHECK(bf(c) == want[i]);
    }
  });
}

TEST_CASE("bf16 GEMM output modes: every path as the reference, K across the blocks") {
  std::mt19937 g(17);
  for_each_isa([&](const std::string& isa) {
    // Blocks of 8 pairs (KC = 16 k), 24 rows, 64 columns: K = 1, KC - 1, KC, KC + 1, 3·KC + 5.
    k::set_sgemm_blocking_override(24, 8, 64);
    int layout = 0;
    for (const int64_t K : {1, 15, 16, 17, 53})
      for (const Bf16Out mode : kModes)
        for (const float beta : {0.f, 1.f}) {
          const bool t = ++layout % 2 == 0;
          run(g, {13, 37, K, t, t, beta, mode, layout % 3 != 0}, isa + " small blocks");
        }
    for (const Bf16Out mode : kModes) run(g, {30, 70, 53, false, true, 1.f, mode, true}, isa);
    // The table's own KC (the caches'), with edge tiles on every path.
    k::set_sgemm_blocking_override(0, 0, 0);
    const int64_t KC = 2 * k::gemm_bf16_blocking_for(k::active_table()).kc;
    for (const int64_t K : {KC - 1, KC, KC + 1, 3 * KC + 5})
      for (const Bf16Out mode : {Bf16Out::f32_rounded, Bf16Out::bf16})
        run(g, {5, 20, K, false, false, K % 2 ? 0.f : 1.f, mode, false}, isa + " table blocks");
  });
}

TEST_CASE("bf16 GEMM output modes: the same bits at 1, 2 and 3 threads, rows or columns split") {
  // Just above gemm_bf16's threshold for threads (2^21 multiply-adds), each reference computed
  // once (it has no path): 64 rows split over the members, the table's blocks; 7 rows, so the
  // columns are split, with small blocks (K over several, each member keeping its own sums).
  const int before = tg::num_threads();
  std::mt19937 g(23);
  struct Threaded {
    Case c;
    int64_t mc, kc, nc;  // 0: the table's blocks
  };
  const Threaded cases[] = {{{64, 130, 257, false, false, 1.f, Bf16Out::bf16, false}, 0, 0, 0},
                            {{7, 1200, 260, true, true, 0.f, Bf16Out::bf16, false}, 24, 32, 256}};
  for (const Threaded& x : cases) {
    const Case& c = x.c;
    const std::vector<uint16_t> A = operands(g, c.M * c.K, false),
                                B = operands(g, c.K * c.N, false);
    const int64_t rsA = c.ta ? 1 : c.K, csA = c.ta ? c.M : 1, rsB = c.tb ? 1 : c.N,
                  csB = c.tb ? c.K : 1;
    const OutC C0 = make_c(g, c.mode, c.M * c.N, c.beta);
    OutC R = C0;
    k::gemm_bf16_ref(c.M, c.N, c.K, A.data(), rsA, csA, B.data(), rsB, csB, c.beta, R.out(c.N));
    k::set_sgemm_blocking_override(x.mc, x.kc, x.nc);
    for_each_isa([&](const std::string& isa) {
      for (const int threads : {1, 2, 3}) {
        tg::set_num_threads(threads);
        OutC C = C0;
        k::gemm_bf16(c.M, c.N, c.K, A.data(), rsA, csA, B.data(), rsB, csB, c.beta, C.out(c.N));
        INFO(isa << " M=" << c.M << " N=" << c.N << " threads=" << threads);
        check_words(C, R, "threaded gemm_bf16");
      }
      tg::set_num_threads(before);
    });
    k::set_sgemm_blocking_override(0, 0, 0);
  }
}

TEST_CASE("bf16 GEMM output modes: batched, and one row of A through its own route") {
  // M == 1 with beta 0 takes gemm_row.cpp's route (B read in place, both layouts), rounding each
  // chunk of a row, split over 1, 2 or 3 threads (3 × 300 × 40 is past the route's threshold);
  // M == 5 the packed nest per entry. Each reference computed once.
  const int before = tg::num_threads();
  std::mt19937 g(29);
  for (const int64_t M : {1, 5})
    for (const bool tb : {false, true})
      for (const Bf16Out mode : {Bf16Out::f32_rounded, Bf16Out::bf16}) {
        const int64_t batch = 3, N = 300, K = 40, sA = M * K + 1, sB = K * N + 2, sC = M * N + 5;
        const std::vector<uint16_t> A = operands(g, batch * sA, true),
                                    B = operands(g, batch * sB, true);
        const int64_t rsB = tb ? 1 : N, csB = tb ? K : 1;
        const OutC C0 = make_c(g, mode, batch * sC, 0.f);
        OutC R = C0;
        k::gemm_bf16_batched_ref(batch, M, N, K, A.data(), sA, K, 1, B.data(), sB, rsB, csB, 0.f,
                                 R.out(N), sC);
        for_each_isa([&](const std::string& isa) {
          for (const int threads : {1, 2, 3}) {
            if (M > 1 && threads > 1) break;  // one thread per entry: too small to split
            tg::set_num_threads(threads);
            OutC C = C0;
            k::gemm_bf16_batched(batch, M, N, K, A.data(), sA, K, 1, B.data(), sB, rsB, csB, 0.f,
                                 C.out(N), sC);
            INFO(isa << " threads=" << threads << " M=" << M << " tb=" << tb);
            check_words(C, R, "gemm_bf16_batched");
          }
          tg::set_num_threads(before);
        });
      }
}

TEST_CASE("bf16 GEMM output modes: K == 0, and the errors") {
  const uint16_t one = bf(1.f);
  // K == 0: C = beta·C, rounded; a bf16 C of beta 1 keeps its values, a NaN becoming 0x7FC0.
  uint16_t h[3] = {0x3F81, 0xFFC1, 0x7FC1};
  k::gemm_bf16(1, 3, 0, &one, 1, 1, &one, 3, 1, 1.f, k::bf16_out_bf16(h, 3));
  CHECK(h[0] == 0x3F81);
  CHECK(h[1] == 0x7FC0);
  k::gemm_bf16(1, 3, 0, &one, 1, 1, &one, 3, 1, 0.f, k::bf16_out_bf16(h, 3));
  CHECK((h[0] == 0 && h[1] == 0 && h[2] == 0));
  float f = 1.f + 0x1p-8f;
  k::gemm_bf16(1, 1, 0, &one, 1, 1, &one, 1, 1, 1.f, k::bf16_out_f32(&f, 1, true));
  CHECK(f == 1.f);
  struct Bad {
    float beta;
    k::GemmBf16Out out;
    const char* message;
  };
  const Bad bad[] = {
      {0.5f, k::bf16_out_bf16(h, 3), "gemm_bf16: a bfloat16 C takes beta 0 or 1, got 0.5"},
      {-1.f, k::bf16_out_bf16(h, 3), "gemm_bf16: a bfloat16 C takes beta 0 or 1, got -1"},
      {2.f, k::bf16_out_bf16(h, 3), "gemm_bf16: a bfloat16 C takes beta 0 or 1, got 2"},
  };
  for (const Bad& b : bad) {
    CHECK_THROWS_WITH_AS(k::gemm_bf16(1, 3, 1, &one, 1, 1, &one, 3, 1, b.beta, b.out), b.message,
                         std::invalid_argument);
    std::string batched = std::string("gemm_bf16_batched") + (b.message + 9);
    CHECK_THROWS_WITH_AS(
        k::gemm_bf16_batched(1, 1, 3, 1, &one, 1, 1, 1, &one, 3, 3, 1, b.beta, b.out, 3),
        batched.c_str(), std::invalid_argument);
  }
  // A float32 C takes any beta, scaled before the sums, rounded after.
  float c = 3.f;
  k::gemm_bf16(1, 1, 1, &one, 1, 1, &one, 1, 1, 0.5f, k::bf16_out_f32(&c, 1, true));
  CHECK(c == 2.5f);
}
