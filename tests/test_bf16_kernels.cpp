// bfloat16 kernel tests: the conversions (c10's rounding, table-driven edge cases) and the bf16
// GEMM on every path this machine runs against the scalar reference, bit for bit (NaN matches any
// NaN: kernels.h leaves the payload open), over shapes that hit every tail, transposed operands,
// beta 0 and 1, blocks small enough to cross K, and 1 and 3 threads. Also the arithmetic itself:
// crafted dot products whose results tell the order of the two halves of a pair, the rounding
// and the denormal handling apart (as measured on vdpbf16ps, avx512_bf16.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "tests/kernel_testing.h"

namespace k = tg::kernels;
using tg::testing::for_each_isa;

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint16_t bf(float x) { return uint16_t(bits(x) >> 16); }  // x must be a bf16 value

// Same bits, or both NaN; reports the first few differences.
void check_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) == bits(want[i]) || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    char line[160];
    std::snprintf(line, sizeof line, "%s[%zu]: got %a (0x%08x), want %a (0x%08x)", what, i,
                  double(got[i]), bits(got[i]), double(want[i]), bits(want[i]));
    if (++bad <= 5) FAIL_CHECK(line);
  }
  CHECK(bad == 0);
}

// n random bf16: tame (uniform in [-1, 1), rounded) or wild (any sign, exponents from the
// denormals to 2^20 so products underflow and flush, and a few zeros and infinities).
std::vector<uint16_t> rand_bf16(std::mt19937& g, int64_t n, bool wild) {
  std::vector<uint16_t> v(size_t(std::max<int64_t>(n, 0)));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& h : v) {
    if (!wild) {
      const float x = u(g);
      k::f32_to_bf16_ref(1, &x, &h);
      continue;
    }
    const uint32_t r = g();
    uint32_t e = 60 + r % 88, mantissa = (r >> 16) & 0x7Fu;  // 2^-67 .. 2^20
    if (r % 97 == 0) e = 0;                                  // denormal or zero
    if (r % 1009 == 0) e = 255, mantissa = 0;                // infinity
    h = uint16_t(((r >> 8) & 1u) << 15 | e << 7 | mantissa);
  }
  return v;
}

struct Shape {
  int64_t M, N, K;
};

// One case: C (+)= op(A)·op(B) with the given layouts, on the active path, checked against the
// reference from the same starting C.
void run_case(std::mt19937& g, const Shape& s, bool ta, bool tb, float beta, bool wild,
              const std::string& what) {
  const int64_t M = s.M, N = s.N, K = s.K, ldc = N + 3;
  const std::vector<uint16_t> A = rand_bf16(g, M * K, wild), B = rand_bf16(g, K * N, wild);
  // A[M, K] row-major, or stored transposed (Aᵀ [K, M]); the same for B.
  const int64_t rsA = ta ? 1 : K, csA = ta ? M : 1, rsB = tb ? 1 : N, csB = tb ? K : 1;
  std::vector<float> C0(size_t(M * ldc));
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (auto& c : C0) c = beta == 0.f ? std::nanf("") : u(g);  // beta 0 must not read C
  if (beta != 0.f && !C0.empty()) C0[0] = 1e-40f;             // a denormal C reads as zero
  std::vector<float> C = C0, R = C0;
  k::gemm_bf16(M, N, K, A.data(), rsA, csA, B.data(), rsB, csB, beta, C.data(), ldc);
  k::gemm_bf16_ref(M, N, K, A.data(), rsA, csA, B.data(), rsB, csB, beta, R.data(), ldc);
  INFO(what << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
            << " beta=" << beta << " wild=" << wild);
  check_same(C, R, "gemm_bf16");
}

const Shape kShapes[] = {
    {1, 1, 1},     {1, 1, 2},     {3, 5, 7},     {4, 8, 16},   {12, 32, 64},
    {13, 33, 65},  {11, 31, 129}, {25, 70, 255}, {8, 40, 513}, {100, 97, 1030},
    {200, 64, 77}, {5, 1100, 33}, {300, 40, 21}, {2, 3, 2049},
};

}  // namespace

TEST_CASE("bf16 conversions: c10's round to nearest even, NaN, infinities, denormals, -0") {
  struct Case {
    uint32_t f;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80, "1"},
      {0x3F808000u, 0x3F80, "tie, kept bit even: down"},
      {0x3F818000u, 0x3F82, "tie, kept bit odd: up"},
      {0x3F807FFFu, 0x3F80, "below the tie"},
      {0x3F808001u, 0x3F81, "above the tie"},
      {0xBF818000u, 0xBF82, "negative tie up"},
      {0x3F80FFFFu, 0x3F81, "carry into the kept bits"},
      {0x3FFFFFFFu, 0x4000, "carry into the exponent"},
      {0x7F7F7FFFu, 0x7F7F, "largest that stays finite"},
      {0x7F7F8000u, 0x7F80, "tie at the top: overflow to inf"},
      {0x7F7FFFFFu, 0x7F80, "FLT_MAX: inf"},
      {0xFF7FFFFFu, 0xFF80, "-FLT_MAX: -inf"},
      {0x7F800000u, 0x7F80, "inf"},
      {0xFF800000u, 0xFF80, "-inf"},
      {0x7FC00000u, 0x7FC0, "quiet NaN"},
      {0xFFC00000u, 0x7FC0, "negative NaN: c10's 0x7FC0"},
      {0x7F800001u, 0x7FC0, "signalling NaN, payload in the dropped bits"},
      {0xFF812345u, 0x7FC0, "negative signalling NaN"},
      {0x7FFFFFFFu, 0x7FC0, "NaN whose rounding would carry"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x00000001u, 0x0000, "smallest denormal: to +0"},
      {0x80000001u, 0x8000, "smallest negative denormal: to -0"},
      {0x00008000u, 0x0000, "denormal tie, even: down"},
      {0x00018000u, 0x0002, "denormal tie, odd: up"},
      {0x00010000u, 0x0001, "bf16's smallest denormal"},
      {0x007FFFFFu, 0x0080, "largest denormal: up to the smallest normal"},
      {0x00800000u, 0x0080, "smallest normal"},
  };
  // Each case at every position of a buffer long enough for every SIMD body and tail.
  const int64_t n = 45;
  for_each_isa([&](const std::string&) {
    for (const Case& c : cases) {
      INFO(c.what);
      std::vector<float> x(n, 1.5f);
      for (int64_t i = 0; i < n; i += 4) x[size_t(i)] = from_bits(c.f);
      std::vector<uint16_t> out(n), ref(n);
      k::f32_to_bf16(n, x.data(), out.data());
      k::f32_to_bf16_ref(n, x.data(), ref.data());
      for (int64_t i = 0; i < n; ++i) {
        CHECK(out[size_t(i)] == ref[size_t(i)]);
        CHECK(out[size_t(i)] == (i % 4 == 0 ? c.want : uint16_t(0x3FC0)));
      }
    }
  });
}

TEST_CASE("bf16 conversions: every bf16 widens exactly; random float bits round as the reference") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::mt19937 g(34);
  std::vector<float> x(100003);
  for (auto& v : x) v = from_bits(g());
  for_each_isa([&](const std::string&) {
    std::vector<float> wide(all.size());
    k::bf16_to_f32(int64_t(all.size()), all.data(), wide.data());
    int bad = 0;
    for (uint32_t i = 0; i < 65536; ++i) bad += bits(wide[i]) != i << 16;
    CHECK(bad == 0);
    std::vector<uint16_t> out(x.size()), ref(x.size());
    k::f32_to_bf16(int64_t(x.size()), x.data(), out.data());
    k::f32_to_bf16_ref(int64_t(x.size()), x.data(), ref.data());
    CHECK(out == ref);
    // Round trip: a bf16 value converts back to itself (NaNs to 0x7FC0).
    std::vector<uint16_t> back(all.size());
    k::f32_to_bf16(int64_t(all.size()), wide.data(), back.data());
    bad = 0;
    for (uint32_t i = 0; i < 65536; ++i)
      bad += back[i] != (std::isnan(wide[i]) ? uint16_t(0x7FC0) : uint16_t(i));
    CHECK(bad == 0);
  });
}

TEST_CASE("bf16 GEMM: the unit's arithmetic, crafted dot products on every path") {
  // C[0,0] = chain over one pair: c (beta 1) then the odd product a1·b1, then the even a0·b0.
  // Results as vdpbf16ps gives them on Zen 5 (avx512_bf16.cpp); the reference must agree.
  struct Case {
    float c, a0, a1, b0, b1, want;
    const char* what;
  };
  const float tiny = 0x1p-126f + 0x1p-149f;
  const Case cases[] = {
      {1.f, -0x1p-24f, 1.f, 1.f, 0x1p-24f, 1.f - 0x1p-24f, "odd half first: 1 + 2^-24 ties to 1"},
      {1.f, 0x1p-24f, 0.f, 1.f, 0.f, 1.f, "tie to even"},
      {1.f + 0x1p-23f, 0x1p-24f, 0.f, 1.f, 0.f, 1.f + 0x1p-22f, "tie to even, up"},
      {0.f, from_bits(0x00010000u), 0.f, 0x1p100f, 0.f, 0.f, "a bf16 denormal reads as 0"},
      {1e-40f, 0.f, 0.f, 0.f, 0.f, 0.f, "a denormal C reads as 0"},
      {0x1p-130f, 0x1p-60f, 0.f, 0x1p-60f, 0.f, 0x1p-120f, "... beside a product"},
      {0.f, 0x1p-65f, 0.f, 0x1p-65f, 0.f, 0.f, "a denormal result flushes"},
      {0.f, -0x1p-65f, 0.f, 0x1p-65f, 0.f, -0.f, "to zero of its sign"},
      {0x1p-126f, 0x1p-70f, 0.f, 0x1p-70f, 0.f, 0x1.0004p-126f, "a tiny product is not flushed"},
      {0.f, 0x1p-63f, 0x1p-65f, 0x1p-63f, 0x1p-65f, 0x1p-126f, "the first half's result flushes"},
      {0.f, -0x1p100f, 0x1p100f, 0x1p100f, 0x1p100f, INFINITY, "overflow, then inf - 2^200"},
      {tiny, 9 * 0x1p-76f, 0.f, -0x1p-76f, 0.f, 0x1p-126f, "2^-126 - 2^-152 rounds up: kept"},
      {tiny, 10 * 0x1p-76f, 0.f, -0x1p-76f, 0.f, 0x1p-126f, "2^-126 - 2^-151 ties up: kept"},
      {tiny, 11 * 0x1p-76f, 0.f, -0x1p-76f, 0.f, 0.f, "2^-126 - 3·2^-152: tiny, flushed"},
      {tiny, 0.f, 11 * 0x1p-76f, 0.f, -0x1p-76f, 0.f, "the same in the odd half"},
      {-0.f, -0.f, -0.f, 0.f, 0.f, -0.f, "-0 + -0 + -0"},
      {-0.f, 0.f, -0.f, 0.f, 0.f, 0.f, "-0 + -0 + +0"},
  };
  for_each_isa([&](const std::string&) {
    for (const Case& c : cases) {
      INFO(c.what);
      const uint16_t A[2] = {bf(c.a0), bf(c.a1)}, B[2] = {bf(c.b0), bf(c.b1)};
      float C = c.c, R = c.c;
      k::gemm_bf16(1, 1, 2, A, 2, 1, B, 1, 1, 1.f, &C, 1);
      k::gemm_bf16_ref(1, 1, 2, A, 2, 1, B, 1, 1, 1.f, &R, 1);
      CHECK(bits(C) == bits(c.want));
      CHECK(bits(R) == bits(c.want));
    }
    // An odd K: the last pair's odd half is a zero product, so -0 + +0 gives +0 first.
    const uint16_t a = bf(-0.f), b = bf(1.f);
    float C = -0.f;
    k::gemm_bf16(1, 1, 1, &a, 1, 1, &b, 1, 1, 1.f, &C, 1);
    CHECK(bits(C) == bits(0.f));
    // NaN in, NaN out; K == 0 scales C (no flush).
    const uint16_t an[2] = {0x7FC1, bf(1.f)};
    C = 1.f;
    k::gemm_bf16(1, 1, 2, an, 2, 1, an, 1, 1, 1.f, &C, 1);
    CHECK(std::isnan(C));
    C = 1e-40f;
    k::gemm_bf16(1, 1, 0, an, 1, 1, an, 1, 1, 1.f, &C, 1);
    CHECK(C == 1e-40f);
  });
}

TEST_CASE("bf16 GEMM: every path matches the reference bit for bit, at 1 and 3 threads") {
  const int before = tg::num_threads();
  std::mt19937 g(1234);
  for (int threads : {1, 3}) {
    tg::set_num_threads(threads);
    for_each_isa([&](const std::string& isa) {
      CAPTURE(threads);
      for (const Shape& s : kShapes)
        for (int layout = 0; layout < 4; ++layout)
          run_case(g, s, layout & 1, layout & 2, layout == 1 ? 0.f : 1.f, layout == 3, isa);
      for (const Shape& s : kShapes) run_case(g, s, false, false, 0.f, true, isa);
      // Shapes large enough to be split over threads: rows, and columns of a few rows.
      for (const Shape& s : {Shape{130, 200, 300}, Shape{7, 2000, 301}, Shape{260, 1100, 20}})
        for (int layout = 0; layout < 2; ++layout) run_case(g, s, layout, !layout, 1.f, false, isa);
    });
  }
  tg::set_num_threads(before);
}

TEST_CASE("bf16 GEMM: the blocks change no bit (small MC, KC, NC cross every block edge)") {
  std::mt19937 g(99);
  for_each_isa([&](const std::string& isa) {
    const int64_t blocks[2][3] = {{24, 8, 64}, {12, 3, 32}};  // MC, KC (pairs), NC
    for (const auto& b : blocks) {
      k::set_sgemm_blocking_override(b[0], b[1], b[2]);
      for (const Shape& s : {Shape{50, 130, 70}, Shape{13, 65, 33}, Shape{40, 40, 1}})
        for (int layout = 0; layout < 4; ++layout)
          run_case(g, s, layout & 1, layout & 2, float(layout & 1), false, isa + " small blocks");
    }
    k::set_sgemm_blocking_override(0, 0, 0);
  });
}

TEST_CASE("bf16 GEMM: batched, over the batch or inside each GEMM, as the reference") {
  const int before = tg::num_threads();
  std::mt19937 g(5);
  for (int threads : {1, 3}) {
    tg::set_num_threads(threads);
    for_each_isa([&](const std::string&) {
      CAPTURE(threads);
      for (const int64_t batch : {1, 4}) {
        const int64_t M = 70, N = 90, K = 130, sA = M * K + 5, sB = K * N + 7, sC = M * N + 11;
        const std::vector<uint16_t> A = rand_bf16(g, batch * sA, false);
        const std::vector<uint16_t> B = rand_bf16(g, batch * sB, false);
        std::vector<float> C(size_t(batch * sC), 0.5f), R = C;
        // Bᵀ layout for a change: B(k, n) at k + n·K.
        k::gemm_bf16_batched(batch, M, N, K, A.data(), sA, K, 1, B.data(), sB, 1, K, 1.f, C.data(),
                             sC, N);
        k::gemm_bf16_batched_ref(batch, M, N, K, A.data(), sA, K, 1, B.data(), sB, 1, K, 1.f,
                                 R.data(), sC, N);
        check_same(C, R, "gemm_bf16_batched");
      }
    });
  }
  tg::set_num_threads(before);
}

// One row of A, batched (kernels.h: gemm_bf16_batched's M == 1 route, B read in place): per entry
// the bits of gemm_bf16's packed route (gemm_bf16 itself) and of the reference, for both layouts
// of B (tg::testing::RowLayout); wild values (denormals, flushed products, infinities); C starts
// as NaN (beta 0 must not read it).
void run_row_case(std::mt19937& g, const tg::testing::RowShape& s, bool dots,
                  std::vector<float>& out) {
  const int64_t batch = s.batch, N = s.N, K = s.K;
  INFO("batch=" << batch << " N=" << N << " K=" << K << " dots=" << dots);
  const tg::testing::RowLayout l(N, K, dots);
  const std::vector<uint16_t> A = rand_bf16(g, batch * l.sA, true),
                              B = rand_bf16(g, batch * l.sB, true);
  std::vector<float> C(size_t(batch * l.sC), std::nanf("")), P = C, R = C;
  k::gemm_bf16_batched(batch, 1, N, K, A.data(), l.sA, K, 1, B.data(), l.sB, l.rsB, l.csB, 0.f,
                       C.data(), l.sC, N);
  k::gemm_bf16_batched_ref(batch, 1, N, K, A.data(), l.sA, K, 1, B.data(), l.sB, l.rsB, l.csB, 0.f,
                           R.data(), l.sC, N);
  for (int64_t b = 0; b < batch; ++b)
    k::gemm_bf16(1, N, K, A.data() + b * l.sA, K, 1, B.data() + b * l.sB, l.rsB, l.csB, 0.f,
                 P.data() + b * l.sC, N);
  check_same(C, P, "one-row route vs the packed gemm_bf16");
  check_same(C, R, "one-row route vs gemm_bf16_batched_ref");
  out.insert(out.end(), C.begin(), C.end());
}

TEST_CASE("bf16 GEMM, one row of A: B read in place, the packed GEMM's bits, 1/2/3 threads") {
  std::mt19937 g(31);
  for_each_isa([&](const std::string&) {
    tg::testing::same_bits_at_1_2_3_threads(g(), [&](std::mt19937& same, std::vector<float>& all) {
      for (const tg::testing::RowShape& s : tg::testing::kRowShapes)
        for (const bool dots : {true, false}) run_row_case(same, s, dots, all);
    });
  });
}

TEST_CASE("bf16 row axpys: the table's kernel against its reference, every column tail, from C") {
  std::mt19937 g(8);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for_each_isa([&](const std::string&) {
    const k::KernelTable& t = k::active_table();
    for (int64_t n = 0; n <= 70; ++n)
      for (const int64_t kk : {0, 1, 2, 7, 64})
        for (const bool accumulate : {false, true}) {
          INFO("n=" << n << " k=" << kk << " accumulate=" << accumulate);
          const int64_t ldb = n + 2;
          // At least one element each: no kernel is handed the null data() of an empty vector.
          const std::vector<uint16_t> a = rand_bf16(g, std::max<int64_t>(kk, 1), true),
                                      b = rand_bf16(g, std::max<int64_t>(kk * ldb, 1), true);
          std::vector<float> c(size_t(std::max<int64_t>(n, 1)), std::nanf(""));  // not read
          for (auto& x : c) x = accumulate ? u(g) : x;
          if (accumulate && n > 1) c[1] = -1e-40f;  // a denormal C reads as zero of its sign
          std::vector<float> r = c;
          t.gemm_bf16_row_axpys(n, kk, a.data(), b.data(), ldb, c.data(), accumulate);
          k::gemm_bf16_row_axpys_ref(n, kk, a.data(), b.data(), ldb, r.data(), accumulate);
          check_same(c, r, "gemm_bf16_row_axpys");
        }
  });
}

// ---- packing (packing.h: pack_a_bf16, pack_b_bf16) ----------------------------------------------
// Every path's packing against the scalar table's (its portable loops) byte for byte, the bytes
// after the panels included: a rows × cols source in each layout, w-wide panels, so whole panels,
// an edge panel and an odd kc's zero halves all occur. w: the path's MR for A and NR for B, and
// widths no table has (the entries take any): 5 and 13 (not a multiple of 4: AVX2's portable
// rule), 40 (more than one 32-column chunk, more than one 16-line group).
namespace {

enum class Layout { row_major, transposed, strided };
struct PackLayout {
  Layout layout;
  const char* name;
};
const PackLayout kPackLayouts[] = {{Layout::row_major, "row-major"},
                                   {Layout::transposed, "transposed"},
                                   {Layout::strided, "strided"}};

// Strides of a rows × cols source whose lines are `pad` elements longer than they need be.
void pack_strides(Layout l, int64_t rows, int64_t cols, int64_t pad, int64_t& rs, int64_t& cs) {
  if (l == Layout::row_major) rs = cols + pad, cs = 1;
  if (l == Layout::transposed) rs = 1, cs = rows + pad;
  if (l == Layout::strided) rs = 2, cs = 2 * rows + pad + 1;
}

// Packs a source rows × cols from element `offset` of a random buffer with t and with the scalar
// table into w-wide panels: A (rows = mc, cols = kc) or B (rows = kc, cols = nc).
void check_packing(std::mt19937& g, bool a, int64_t w, Layout l, int64_t rows, int64_t cols,
                   int64_t pad, int64_t offset) {
  const k::KernelTable& t = k::active_table();
  int64_t rs = 0, cs = 0;
  pack_strides(l, rows, cols, pad, rs, cs);
  const int64_t kc = a ? cols : rows, lines = a ? rows : cols;
  const std::vector<uint16_t> src =
      rand_bf16(g, offset + (rows - 1) * rs + (cols - 1) * cs + 1, false);
  const size_t size = size_t((lines + w - 1) / w * w * 2 * ((kc + 1) / 2) + 40);
  std::vector<uint16_t> got(size, 0xBEEF), want(size, 0xBEEF);
  const uint16_t* s = src.data() + offset;
  if (a) {
    k::pack_a_bf16(t, rows, cols, s, rs, cs, w, got.data());
    k::pack_a_bf16(k::kScalarTable, rows, cols, s, rs, cs, w, want.data());
  } else {
    k::pack_b_bf16(t, rows, cols, s, rs, cs, w, got.data());
    k::pack_b_bf16(k::kScalarTable, rows, cols, s, rs, cs, w, want.data());
  }
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  INFO("first difference at " << (diff.first - got.begin()) << " of " << size);
  CHECK(got == want);
}

}  // namespace

TEST_CASE(
    "bf16 packing: every layout of A and B packs as the scalar table's loops, byte for byte") {
  std::mt19937 g(21);
  for_each_isa([&](const std::string&) {
    const k::KernelTable& t = k::active_table();
    for (const bool a : {true, false})
      for (const int64_t w : {a ? t.gemm_bf16_blocking.mr : t.gemm_bf16_blocking.nr, int64_t(5),
                              int64_t(13), int64_t(40)})
        for (const PackLayout& l : kPackLayouts)
          for (const int64_t lines : {int64_t(1), w - 1, w, 3 * w, 3 * w + 1, 20 * w + 5})
            for (const int64_t kc : {1, 2, 7, 16, 33, 64, 513})
              for (const int64_t pad : {0, 3})
                for (const int64_t offset : {0, 1}) {
                  INFO((a ? "A " : "B ") << std::string(l.name) << " w=" << w << " lines=" << lines
                                         << " kc=" << kc << " pad=" << pad << " offset=" << offset);
                  if (a)
                    check_packing(g, true, w, l.layout, lines, kc, pad, offset);
                  else
                    check_packing(g, false, w, l.layout, kc, lines, pad, offset);
                }
  });
}

TEST_CASE("bf16 dispatch: the bf16 unit is its own path, with a probe") {
  for_each_isa([&](const std::string& isa) {
    const k::KernelTable& t = k::active_table();
    CHECK((t.bf16_probe != nullptr) == (isa == "avx512_bf16"));
    if (t.bf16_probe != nullptr) CHECK(t.bf16_probe(1000) > 0);
  });
}

TEST_CASE("bf16_round: the round trip through bf16 in one pass, in place too, on every path") {
  std::mt19937 g(35);
  std::vector<float> x(5003);  // several chunks and a ragged tail
  for (auto& v : x) v = from_bits(g());
  x[7] = std::nanf("");
  std::vector<uint16_t> half(x.size());
  std::vector<float> want(x.size());
  k::f32_to_bf16_ref(int64_t(x.size()), x.data(), half.data());
  k::bf16_to_f32_ref(int64_t(x.size()), half.data(), want.data());
  for_each_isa([&](const std::string&) {
    std::vector<float> out(x.size()), inplace = x;
    k::bf16_round(int64_t(x.size()), x.data(), out.data());
    k::bf16_round(int64_t(x.size()), inplace.data(), inplace.data());
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      bad += bits(out[i]) != bits(want[i]) || bits(inplace[i]) != bits(want[i]);
    CHECK(bad == 0);
  });
}

namespace {

// One gemv case on the active path: y = x·wᵀ (+ b) against the reference and against the M = 1
// GEMM from the same C (kernels.h: gemv_rows_bf16 is that GEMM), bit for bit. w has a row
// stride of cols + 3; b holds a denormal (read as zero) and a -0 (an odd cols turns it into
// +0).
void run_gemv(std::mt19937& g, int64_t rows, int64_t cols, bool bias, bool wild) {
  const int64_t ldw = cols + 3;
  const std::vector<uint16_t> w = rand_bf16(g, rows * ldw, wild), x = rand_bf16(g, cols, wild);
  std::vector<float> b(static_cast<size_t>(rows));
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (auto& v : b) v = u(g);
  if (rows > 0) b[0] = 1e-40f;
  if (rows > 1) b[1] = -0.f;
  const float* pb = bias ? b.data() : nullptr;
  std::vector<float> y(size_t(rows), std::nanf("")), r = y, c = bias ? b : y;
  k::gemv_rows_bf16(rows, cols, w.data(), ldw, x.data(), pb, y.data());
  k::gemv_rows_bf16_ref(rows, cols, w.data(), ldw, x.data(), pb, r.data());
  k::gemm_bf16(1, rows, cols, x.data(), cols, 1, w.data(), 1, ldw, bias ? 1.f : 0.f, c.data(),
               rows);
  INFO("rows=" << rows << " cols=" << cols << " bias=" << bias << " wild=" << wild);
  check_same(y, r, "gemv_rows_bf16 vs its reference");
  check_same(y, c, "gemv_rows_bf16 vs gemm_bf16 (M = 1)");
  // The packed route, on the paths that have it: its reference and its kernel, the same bits.
  std::vector<uint32_t> panels(size_t(k::gemv_bf16_panel_words(rows, cols)), 0xDEADBEEFu);
  k::pack_gemv_bf16(rows, cols, w.data(), ldw, panels.data());
  std::vector<float> pr(size_t(rows), std::nanf(""));
  k::gemv_packed_bf16_ref(rows, cols, panels.data(), x.data(), pb, pr.data());
  check_same(pr, r, "gemv_packed_bf16_ref vs gemv_rows_bf16_ref");
  if (!k::gemv_packed_bf16_available()) return;
  std::vector<float> py(size_t(rows) + 16, std::nanf(""));  // 16 more: nothing written past rows
  k::gemv_packed_bf16(rows, cols, panels.data(), x.data(), pb, py.data());
  for (size_t i = size_t(rows); i < py.size(); ++i) CHECK(std::isnan(py[i]));
  py.resize(size_t(rows));
  check_same(py, r, "gemv_packed_bf16 vs the reference");
}

}  // namespace

TEST_CASE(
    "bf16 gemv: every path as the reference and the M = 1 GEMM, bit for bit, 1 and 3 threads") {
  const int before = tg::num_threads();
  std::mt19937 g(77);
  // Rows around each path's group (4, 8, 16) and columns around its chunk (8, 16, 32 bf16), odd
  // and even, so every tail of both runs.
  const int64_t rows_list[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65};
  const int64_t cols_list[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257};
  for (int threads : {1, 3}) {
    tg::set_num_threads(threads);
    for_each_isa([&](const std::string&) {
      CAPTURE(threads);
      for (const int64_t rows : rows_list)
        for (const int64_t cols : cols_list)
          for (int v = 0; v < 4; ++v) run_gemv(g, rows, cols, v & 1, v & 2);
      // Large enough to be split over the threads (GPT-2's out_head shape, a slice of it).
      run_gemv(g, 3001, 768, true, false);
      run_gemv(g, 2305, 769, false, true);
    });
  }
  tg::set_num_threads(before);
}

TEST_CASE("bf16 gemv: the unit's arithmetic on crafted rows, on every path") {
  // One row, one pair: acc = b, then the odd product, then the even (the GEMM's crafted cases).
  struct Case {
    float b, x0, x1, w0, w1, want;
    const char* what;
  };
  const Case cases[] = {
      {1.f, -0x1p-24f, 1.f, 1.f, 0x1p-24f, 1.f - 0x1p-24f, "odd half first"},
      {1e-40f, 0.f, 0.f, 0.f, 0.f, 0.f, "a denormal bias reads as 0"},
      {0.f, 0x1p-65f, 0.f, 0x1p-65f, 0.f, 0.f, "a denormal result flushes"},
      {0.f, -0x1p100f, 0x1p100f, 0x1p100f, 0x1p100f, INFINITY, "overflow, then inf - 2^200"},
      {-0.f, 0.f, -0.f, 0.f, 0.f, 0.f, "-0 + -0 + +0"},
  };
  for_each_isa([&](const std::string&) {
    for (const Case& c : cases) {
      INFO(std::string(c.what));
      // 16 equal rows, so the SIMD paths' groups (not only their scalar tails) compute it.
      std::vector<uint16_t> w;
      for (int r = 0; r < 16; ++r) w.insert(w.end(), {bf(c.w0), bf(c.w1)});
      const uint16_t x[2] = {bf(c.x0), bf(c.x1)};
      std::vector<float> b(16, c.b), y(16);
      k::gemv_rows_bf16(16, 2, w.data(), 2, x, b.data(), y.data());
      for (float v : y) CHECK(bits(v) == bits(c.want));
    }
  });
}

TEST_CASE("adamw_bf16: every path as the reference, bit for bit, at 1 and 3 threads") {
  std::mt19937 g(36);
  const int64_t n = 70001;  // many vectors and pieces, and a ragged tail
  std::vector<uint16_t> p = rand_bf16(g, n, false), grad = rand_bf16(g, n, true),
                        m = rand_bf16(g, n, false);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = uint16_t(g() & 0x7FFF);  // v >= 0: any bf16 of sign +, NaN and inf too
  grad[5] = 0, grad[6] = 0x7FC0, p[7] = 0x8000;  // a zero gradient, a NaN, -0
  const k::AdamWBf16 s{0.99996f, 0.1f, 0.999f, 0.001f, 0.0316069f, 1e-8f, -0.004f};
  std::vector<uint16_t> want_p = p, want_m = m, want_v = v;
  k::adamw_bf16_ref(n, want_p.data(), grad.data(), want_m.data(), want_v.data(), s);
  const int before = tg::num_threads();
  for (int threads : {1, 3}) {
    tg::set_num_threads(threads);
    for_each_isa([&](const std::string&) {
      std::vector<uint16_t> pp = p, mm = m, vv = v;
      k::adamw_bf16(n, pp.data(), grad.data(), mm.data(), vv.data(), s);
      CHECK(pp == want_p);
      CHECK(mm == want_m);
      CHECK(vv == want_v);
    });
  }
  tg::set_num_threads(before);
}
