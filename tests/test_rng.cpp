// Tests for core/rng.h: bit-exact agreement with PyTorch 1.13.1's CPU generator.
// 1. docs/torch_rng.md §11's worked examples, spelled out (they double as documentation).
// 2. The golden file tests/golden/rng_torch113.txt, written by tests/golden/gen_rng.py from
//    torch itself: a small interpreter replays each record and compares bit patterns.
// 3. Engine, state and bad-input checks that need no torch.
// Not here: speed, and the non-AVX2 / MKL variants rng.h leaves out.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.h"

#ifndef TG_GOLDEN_DIR
#error "TG_GOLDEN_DIR must name tests/golden (set by tests/meson.build)"
#endif

namespace {

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }
uint64_t bits(double v) { return std::bit_cast<uint64_t>(v); }

std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float x : v) out.push_back(bits(x));
  return out;
}

std::vector<float> randn(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  tg::normal(v.data(), n, 0.0, 1.0);
  return v;
}

// The std::invalid_argument message thrown by f, or a marker if it threw nothing of that type.
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no std::invalid_argument thrown>";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. docs/torch_rng.md §11, worked examples
// ---------------------------------------------------------------------------------------------

TEST_CASE("§11.1 manual_seed words and random64") {
  tg::manual_seed(123);
  CHECK(tg::default_generator().random() == 2991312382u);  // 0xB24BCDFE
  CHECK(tg::default_generator().random() == 3062119789u);  // 0xB6843D6D
  CHECK(tg::default_generator().random() == 1228959102u);
  CHECK(tg::default_generator().random() == 1840268610u);
  tg::manual_seed(123);
  CHECK(tg::default_generator().random64() == 0xB24BCDFEB6843D6DULL);  // first word is high
  tg::manual_seed(0);
  const uint32_t want[] = {2357136044u, 2546248239u, 3071714933u, 3626093760u};
  for (uint32_t w : want) CHECK(tg::default_generator().random() == w);
}

TEST_CASE("§11.2 rand(3,2) uses the low 24 bits; rand(2, float64)") {
  tg::manual_seed(123);
  std::vector<float> r(6);
  tg::uniform(r.data(), 6, 0.0, 1.0);
  // low-24-bit ints 4967934, 8666477, ... times 2^-24
  CHECK(r[0] == 4967934 * 0x1p-24f);
  CHECK(r[1] == 8666477 * 0x1p-24f);
  const std::vector<uint32_t> want = {0x3E979BFC, 0x3F043D6D, 0x3E80DAFC,
                                      0x3F304542, 0x3D977EE0, 0x3F5DD462};
  CHECK(float_bits(r) == want);
  tg::manual_seed(123);
  double d[2];
  tg::uniform(d, 2, 0.0, 1.0);
  CHECK(d[0] == 0.368895870664273);
  CHECK(d[1] == 0.013365949855291825);
}

TEST_CASE("§11.3 randn: scalar path for n < 16, blocks of 16 with a redrawn tail") {
  tg::manual_seed(0);
  CHECK(float_bits(randn(4)) ==
        std::vector<uint32_t>{0x3FC53F5C, 0xBE963C50, 0xC00B7149, 0x3F1184B6});  // path (c)
  tg::manual_seed(0);
  const auto r16 = float_bits(randn(16));
  CHECK(r16[0] == 0xBF901B85u);  // -1.1258398, path (a)
  CHECK(r16[1] == 0xBF93808Au);  // -1.1523602
  CHECK(r16[2] == 0xBE804BD6u);  // -0.2505786
  tg::manual_seed(0);
  const auto r17 = randn(17);
  CHECK(bits(r17[0]) == 0xBF901B85u);  // the only survivor of the first block
  CHECK(r17[1] == doctest::Approx(-1.6959312).epsilon(1e-7));
  CHECK(r17[2] == doctest::Approx(0.5666506).epsilon(1e-7));
}

TEST_CASE("§11.4 dropout, randperm, nn.Linear(3,2), nn.Embedding(10,4)") {
  tg::manual_seed(123);
  std::vector<float> mask(36);
  tg::dropout_mask(mask.data(), 36, 0.5);
  CHECK(std::vector<float>(mask.begin(), mask.begin() + 6) == std::vector<float>{2, 2, 0, 2, 2, 0});

  tg::manual_seed(123);
  CHECK(tg::randperm(5) == std::vector<int64_t>{2, 0, 1, 3, 4});
  tg::manual_seed(0);
  CHECK(tg::randperm(5) == std::vector<int64_t>{4, 0, 1, 3, 2});

  tg::manual_seed(123);
  float w[6], b[2];
  const double bound = tg::linear_init_bound(3), bias_bound = tg::linear_bias_bound(3);
  CHECK(bound == 0.5773502691896257);       // 1 ulp below 1/sqrt(3) ...
  CHECK(bias_bound == 0.5773502691896258);  // ... which is the bias bound
  tg::uniform(w, 6, -bound, bound);
  tg::uniform(b, 2, -bias_bound, bias_bound);
  const float want_w[] = {-0.23542964f, 0.019124476f, -0.28674594f,
                          0.21772662f,  -0.49193421f, 0.42322308f};
  for (int i = 0; i < 6; ++i) CHECK(w[i] == want_w[i]);
  CHECK(b[0] == -0.41964141f);
  CHECK(b[1] == -0.45901766f);

  tg::manual_seed(123);
  float emb[40];
  tg::normal(emb, 40, 0.0, 1.0);
  const float want_row0[] = {0.33737019f, -0.17777722f, -0.30352759f, -0.58801186f};
  for (int i = 0; i < 4; ++i) CHECK(emb[i] == want_row0[i]);
}

TEST_CASE("§11.5 DataLoader epochs and multinomial") {
  tg::manual_seed(123);
  auto& g = tg::default_generator();
  // Epoch 1 permutes on mt19937(global word 3), epoch 2 on mt19937(global word 7).
  CHECK(tg::random_sampler_epoch_order(g, 10) ==
        std::vector<int64_t>{8, 2, 6, 7, 0, 3, 9, 1, 5, 4});
  CHECK(tg::random_sampler_epoch_order(g, 10) ==
        std::vector<int64_t>{5, 9, 2, 7, 8, 6, 4, 0, 1, 3});
  tg::Generator word3(1840268610u), word7(3088727057u);
  CHECK(word3.randperm(10) == std::vector<int64_t>{8, 2, 6, 7, 0, 3, 9, 1, 5, 4});
  CHECK(word7.randperm(10) == std::vector<int64_t>{5, 9, 2, 7, 8, 6, 4, 0, 1, 3});

  tg::manual_seed(0);
  const float p[] = {0.1f, 0.2f, 0.3f, 0.4f};
  int64_t pick = -1;
  tg::multinomial(&pick, p, 1, 4, 1, false);
  CHECK(pick == 2);
}

// ---------------------------------------------------------------------------------------------
// 2. Goldens from torch (tests/golden/rng_torch113.txt)
// ---------------------------------------------------------------------------------------------

namespace {

// One op's output as raw patterns: float bits, double bits, or integers as uint64.
struct Output {
  std::string kind;  // f32, f64, i64, u64
  std::vector<uint64_t> raw;
};

Output out_f32(const std::vector<float>& v) {
  Output o{"f32", {}};
  for (float x : v) o.raw.push_back(bits(x));
  return o;
}
Output out_f64(const std::vector<double>& v) {
  Output o{"f64", {}};
  for (double x : v) o.raw.push_back(bits(x));
  return o;
}
Output out_i64(const std::vector<int64_t>& v) {
  Output o{"i64", {}};
  for (int64_t x : v) o.raw.push_back(static_cast<uint64_t>(x));
  return o;
}

uint64_t fnv1a64(const Output& o) {
  const int width = o.kind == "f32" ? 4 : 8;
  uint64_t h = 0xCBF29CE484222325ULL;
  for (uint64_t v : o.raw) {
    for (int i = 0; i < width; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 0x100000001B3ULL;
  }
  return h;
}

double parse_double(const std::string& s) { return std::strtod(s.c_str(), nullptr); }
int64_t parse_i64(const std::string& s) { return std::stoll(s); }
uint64_t parse_u64(const std::string& s) { return std::stoull(s); }

std::string show(const std::string& kind, uint64_t v) {
  char buf[64];
  if (kind == "f32") {
    std::snprintf(buf, sizeof buf, "%08llX (%.9g)", static_cast<unsigned long long>(v),
                  std::bit_cast<float>(static_cast<uint32_t>(v)));
  } else if (kind == "f64") {
    std::snprintf(buf, sizeof buf, "%016llX (%.17g)", static_cast<unsigned long long>(v),
                  std::bit_cast<double>(v));
  } else if (kind == "u64") {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  }
  return buf;
}

uint64_t parse_value(const std::string& kind, const std::string& tok) {
  if (kind == "f32" || kind == "f64") return std::stoull(tok, nullptr, 16);
  if (kind == "u64") return parse_u64(tok);
  return static_cast<uint64_t>(parse_i64(tok));
}

// Compares `got` with the expectation tokens; returns "" or a description of the first
// difference (check_tensor style: where, expected, got).
std::string compare(const Output& got, const std::vector<std::string>& exp) {
  if (exp.size() < 2) return "malformed expectation";
  std::string kind = exp[0];
  const bool digest = kind.back() == 'd';
  if (digest) kind.pop_back();
  if (kind != got.kind) return "kind " + kind + " expected, op produced " + got.kind;
  const size_t n = std::stoull(exp[1]);
  if (got.raw.size() != n) {
    return "length " + std::to_string(n) + " expected, got " + std::to_string(got.raw.size());
  }
  std::vector<std::pair<size_t, uint64_t>> want;  // (index, value)
  if (!digest) {
    if (exp.size() != 2 + n) return "malformed expectation (count)";
    for (size_t i = 0; i < n; ++i) want.push_back({i, parse_value(kind, exp[2 + i])});
  } else {
    const size_t k = std::min<size_t>(n, 8);
    if (exp.size() != 3 + 2 * k) return "malformed digest";
    for (size_t i = 0; i < k; ++i) want.push_back({i, parse_value(kind, exp[3 + i])});
    for (size_t i = 0; i < k; ++i) want.push_back({n - k + i, parse_value(kind, exp[3 + k + i])});
  }
  for (const auto& [i, v] : want) {
    if (got.raw[i] != v) {
      return "first mismatch at [" + std::to_string(i) + "]: torch " + show(kind, v) + ", ours " +
             show(kind, got.raw[i]);
    }
  }
  if (digest && fnv1a64(got) != std::stoull(exp[2], nullptr, 16)) {
    return "first/last 8 agree but the fnv1a64 digest over all " + std::to_string(n) +
           " values differs";
  }
  return "";
}

std::string hex_bytes(const std::vector<uint8_t>& b) {
  std::string s;
  char buf[3];
  for (uint8_t x : b) {
    std::snprintf(buf, sizeof buf, "%02X", x);
    s += buf;
  }
  return s;
}
std::vector<uint8_t> parse_hex_bytes(const std::string& s) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    b.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  }
  return b;
}

// Replays one golden op on `gen` (and `loader_g` for the second generator's loader).
Output run_op(const std::string& op, const std::vector<std::string>& a, tg::Generator& gen) {
  auto n = [&](size_t i) { return parse_i64(a.at(i)); };
  auto d = [&](size_t i) { return parse_double(a.at(i)); };
  if (op == "random64") {
    Output o{"u64", {}};
    for (int64_t i = 0; i < n(0); ++i) o.raw.push_back(gen.random64());
    return o;
  }
  if (op == "uniform_f32" || op == "normal_f32" || op == "normal_scalar_f32" || op == "bernoulli" ||
      op == "dropout" || op == "exponential_f32") {
    std::vector<float> v(static_cast<size_t>(n(0)));
    if (op == "uniform_f32") tg::uniform(v.data(), n(0), d(1), d(2), gen);
    if (op == "normal_f32") tg::normal(v.data(), n(0), d(1), d(2), gen);
    if (op == "normal_scalar_f32") tg::normal_scalar_path(v.data(), n(0), d(1), d(2), gen);
    if (op == "bernoulli") tg::bernoulli(v.data(), n(0), d(1), gen);
    if (op == "dropout") tg::dropout_mask(v.data(), n(0), d(1), gen);  // torch: dropout(ones)
    if (op == "exponential_f32") tg::exponential(v.data(), n(0), d(1), gen);
    return out_f32(v);
  }
  if (op == "uniform_f64" || op == "normal_f64" || op == "normal_scalar_f64") {
    std::vector<double> v(static_cast<size_t>(n(0)));
    if (op == "uniform_f64") tg::uniform(v.data(), n(0), d(1), d(2), gen);
    if (op == "normal_f64") tg::normal(v.data(), n(0), d(1), d(2), gen);
    if (op == "normal_scalar_f64") tg::normal_scalar_path(v.data(), n(0), d(1), d(2), gen);
    return out_f64(v);
  }
  if (op == "random_i64" || op == "randint") {
    std::vector<int64_t> v(static_cast<size_t>(n(0)));
    if (op == "random_i64") tg::random_(v.data(), n(0), gen);
    if (op == "randint") tg::randint(v.data(), n(0), n(1), n(2), gen);
    return out_i64(v);
  }
  if (op == "randperm") return out_i64(gen.randperm(n(0)));
  if (op == "multinomial") {
    const int64_t rows = n(0), cats = n(1), k = n(2);
    std::vector<float> p;
    for (int64_t i = 0; i < rows * cats; ++i) {
      p.push_back(
          std::bit_cast<float>(static_cast<uint32_t>(std::stoul(a.at(4 + i), nullptr, 16))));
    }
    std::vector<int64_t> v(static_cast<size_t>(rows * k));
    tg::multinomial(v.data(), p.data(), rows, cats, k, n(3) != 0, gen);
    return out_i64(v);
  }
  if (op == "linear_weight" || op == "linear_bias") {
    // nn.Linear(in, out): weight (out x in) with the kaiming bound, then bias with 1/sqrt(in).
    const int64_t in = n(0), out = n(1);
    const bool weight = op == "linear_weight";
    const double bound = weight ? tg::linear_init_bound(in) : tg::linear_bias_bound(in);
    std::vector<float> v(static_cast<size_t>(weight ? out * in : out));
    tg::uniform(v.data(), static_cast<int64_t>(v.size()), -bound, bound, gen);
    return out_f32(v);
  }
  if (op == "embedding") {  // nn.Embedding(num, dim): weight.normal_(0, 1)
    std::vector<float> v(static_cast<size_t>(n(0) * n(1)));
    tg::normal(v.data(), static_cast<int64_t>(v.size()), 0.0, 1.0, gen);
    return out_f32(v);
  }
  throw std::runtime_error("unknown golden op '" + op + "'");
}

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> t;
  for (std::string s; in >> s;) t.push_back(s);
  return t;
}

}  // namespace

TEST_CASE("goldens from PyTorch 1.13.1 (tests/golden/rng_torch113.txt)") {
  const std::string path = std::string(TG_GOLDEN_DIR) + "/rng_torch113.txt";
  std::ifstream file(path);
  REQUIRE_MESSAGE(file.good(), "cannot open " << path
                                              << " (HINT: regenerate it with /usr/bin/python3 "
                                                 "tests/golden/gen_rng.py)");
  tg::Generator second;  // the "g." generator (torch.Generator())
  std::vector<uint8_t> saved;
  std::string line, case_name = "(none)";
  int line_no = 0, records = 0, cases = 0;
  bool version_ok = false;
  while (std::getline(file, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> tok = split(line);
    if (tok[0] == "version") {
      version_ok = tok.size() == 2 && tok[1] == "1";
      REQUIRE_MESSAGE(version_ok, "golden version " << line << ", this test reads version 1 "
                                                    << "(HINT: re-run tests/golden/gen_rng.py)");
      continue;
    }
    if (tok[0] == "case") {
      case_name = line.substr(5);
      ++cases;
      continue;
    }
    if (tok[0] == "seed") {
      tg::manual_seed(parse_u64(tok.at(1)));
      continue;
    }
    if (tok[0] == "gseed") {
      second.manual_seed(parse_u64(tok.at(1)));
      continue;
    }
    // "[g.]op args... [= expectation]"
    const auto eq = std::find(tok.begin(), tok.end(), std::string("="));
    std::vector<std::string> args(tok.begin() + 1, eq);
    std::vector<std::string> exp(eq == tok.end() ? eq : eq + 1, tok.end());
    std::string op = tok[0];
    tg::Generator* gen = &tg::default_generator();
    if (op.rfind("g.", 0) == 0) {
      gen = &second;
      op = op.substr(2);
    }
    INFO("golden line " << line_no << ", case '" << case_name << "', op " << tok[0]);
    ++records;
    if (op == "save_state") {
      saved = gen->get_state();
    } else if (op == "restore_state") {
      gen->set_state(saved);
    } else if (op == "set_state") {
      gen->set_state(parse_hex_bytes(args.at(0)));  // a blob written by torch.get_rng_state
    } else if (op == "get_state") {
      const std::vector<uint8_t> ours = gen->get_state();
      CHECK(exp.at(0) == "bytes");
      CHECK(ours.size() == std::stoull(exp.at(1)));
      // Report the first differing byte rather than two 10 KB strings.
      const std::string want = exp.at(2), have = hex_bytes(ours);
      size_t at = 0;
      while (at < want.size() && at < have.size() && want[at] == have[at]) ++at;
      CHECK_MESSAGE(have == want, "state blobs differ from byte " << at / 2);
    } else if (op == "loader") {
      const int64_t n = parse_i64(args.at(0));
      Output o = out_i64(gen == &second ? tg::random_sampler_epoch_order_with_generator(second, n)
                                        : tg::random_sampler_epoch_order(*gen, n));
      const std::string diff = compare(o, exp);
      CHECK_MESSAGE(diff.empty(), diff);
    } else {
      const std::string diff = compare(run_op(op, args, *gen), exp);
      CHECK_MESSAGE(diff.empty(), diff);
    }
  }
  CHECK(version_ok);
  MESSAGE("replayed " << records << " golden records in " << cases << " cases");
  CHECK(records >= 340);  // a truncated file should not pass quietly
}

// ---------------------------------------------------------------------------------------------
// 3. Engine, state and argument checks
// ---------------------------------------------------------------------------------------------

TEST_CASE("the engine is std::mt19937 on seed mod 2^32, across several twists") {
  for (uint64_t seed : {0ULL, 1ULL, 5489ULL, 0xFFFFFFFFULL, (1ULL << 32) + 5, ~0ULL}) {
    tg::Generator g(seed);
    std::mt19937 ref(static_cast<uint32_t>(seed));
    bool same = true;
    for (int i = 0; i < 2000; ++i) same = same && g.random() == ref();
    CHECK_MESSAGE(same, "seed " << seed);
    CHECK(g.initial_seed() == seed);
  }
  tg::Generator fresh;
  std::mt19937 ref(4053586177u);  // torch.Generator()'s default seed mod 2^32
  CHECK(fresh.random() == ref());
}

TEST_CASE("random_block: the same words and the same position as calls to random()") {
  // Starting offsets around a twist boundary, lengths spanning several twists.
  for (int skip : {0, 1, 2, 622, 623, 624, 625, 1000}) {
    for (int n : {0, 1, 5, 623, 624, 625, 1248, 3001}) {
      tg::Generator a(99), b(99);
      for (int i = 0; i < skip; ++i) (void)a.random(), (void)b.random();
      std::vector<uint32_t> got(static_cast<size_t>(n));
      a.random_block(got.data(), n);
      bool same = true;
      for (int i = 0; i < n; ++i) same = same && got[static_cast<size_t>(i)] == b.random();
      CHECK_MESSAGE(same, "skip " << skip << " n " << n);
      CHECK_MESSAGE(a.get_state() == b.get_state(), "skip " << skip << " n " << n);
      CHECK(a.random() == b.random());
    }
  }
}

TEST_CASE("bernoulli and dropout_mask match the per-element definition") {
  // U53(W64()) < p per element; p values whose p * 2^53 is and is not an integer.
  for (double p : {0.9, 0.5, 1.0 / 3.0, 1e-20, 1.0 - 0x1p-53, 0.0, 1.0}) {
    for (int64_t n : {1, 7, 511, 512, 513, 2000}) {
      tg::Generator a(5), b(5);
      (void)a.random(), (void)b.random();  // an odd offset: W64 straddles twists
      std::vector<float> got(static_cast<size_t>(n));
      tg::bernoulli(got.data(), n, p, a);
      bool same = true;
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = b.random64() & ((uint64_t{1} << 53) - 1);
        same = same &&
               got[static_cast<size_t>(i)] == (static_cast<double>(r) * 0x1p-53 < p ? 1.f : 0.f);
      }
      CHECK_MESSAGE(same, "p " << p << " n " << n);
      CHECK(a.get_state() == b.get_state());
    }
  }
  tg::Generator a(8), b(8);
  std::vector<float> mask(1000);
  tg::dropout_mask(mask.data(), 1000, 0.1, a);
  const float scale = 1.0f / static_cast<float>(1.0 - 0.1);
  for (size_t i = 0; i < mask.size(); ++i) {
    const uint64_t r = b.random64() & ((uint64_t{1} << 53) - 1);
    const float keep = static_cast<double>(r) * 0x1p-53 < 0.9 ? 1.f : 0.f;
    CHECK(bits(mask[i]) == bits(keep * scale));
  }
}

TEST_CASE("get_state / set_state round trip: position and normal cache") {
  tg::Generator g(77);
  float v[7];
  tg::normal(v, 7, 0.0, 1.0, g);  // leaves a cached value
  REQUIRE(g.has_next_double_normal());
  const std::vector<uint8_t> blob = g.get_state();
  CHECK(blob.size() == tg::Generator::kStateBytes);

  float a[40], b[40];
  tg::normal(a, 3, 0.0, 1.0, g);
  tg::uniform(a + 3, 37, 0.0, 1.0, g);
  tg::Generator other(1);  // a different generator restored from the blob continues identically
  other.set_state(blob);
  CHECK(other.get_state() == blob);
  CHECK(other.initial_seed() == 77);
  tg::normal(b, 3, 0.0, 1.0, other);
  tg::uniform(b + 3, 37, 0.0, 1.0, other);
  for (int i = 0; i < 40; ++i) CHECK(bits(a[i]) == bits(b[i]));

  // manual_seed clears the cache; the blob records that.
  other.manual_seed(77);
  CHECK_FALSE(other.has_next_double_normal());
  CHECK(other.get_state() == tg::Generator(77).get_state());
}

TEST_CASE("dropout_mask: p == 0, p == 1 and n == 0 draw nothing") {
  tg::Generator g(3), ref(3);
  float m[5] = {9, 9, 9, 9, 9};
  tg::dropout_mask(m, 5, 0.0, g);
  for (float x : m) CHECK(x == 1.0f);
  tg::dropout_mask(m, 5, 1.0, g);
  for (float x : m) CHECK(x == 0.0f);
  tg::dropout_mask(m, 0, 0.5, g);
  CHECK(g.random() == ref.random());
  // Kept elements are 1.0f / float(1 - p), not float(1 / (1 - p)).
  tg::dropout_mask(m, 5, 0.1, g);
  for (float x : m) CHECK((x == 0.0f || x == 1.0f / static_cast<float>(1.0 - 0.1)));
}

TEST_CASE("dropout_keep_bits: dropout_mask's decisions as bits, from the same draws") {
  for (int64_t n : {1, 63, 64, 65, 2047, 2048, 2049, 5000}) {
    CAPTURE(n);
    tg::Generator a(11), b(11);
    std::vector<float> mask(static_cast<size_t>(n));
    tg::dropout_mask(mask.data(), n, 0.3, a);
    std::vector<uint64_t> bits(static_cast<size_t>((n + 63) / 64), ~uint64_t{0});
    tg::dropout_keep_bits(bits.data(), n, 0.3, b);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i)
      differ += ((bits[size_t(i / 64)] >> (i % 64)) & 1u) != (mask[size_t(i)] != 0.0f);
    CHECK(differ == 0);
    if (n % 64) CHECK((bits.back() >> (n % 64)) == 0);  // bits past n stay clear
    CHECK(a.random() == b.random());                    // the generator moved as far
  }
  uint64_t w = 0;
  tg::Generator g;
  CHECK_THROWS_WITH_AS(tg::dropout_keep_bits(&w, 1, 0.0, g),
                       "dropout_keep_bits: p must be in (0, 1), got 0", std::invalid_argument);
  CHECK_THROWS_WITH_AS(tg::dropout_keep_bits(&w, 1, 1.0, g),
                       "dropout_keep_bits: p must be in (0, 1), got 1", std::invalid_argument);
}

TEST_CASE("bad input throws std::invalid_argument naming the function and the value") {
  float f[4];
  double d[4];
  int64_t i[4];
  std::string msg;

  msg = invalid_argument_message([&] { tg::uniform(f, -1, 0, 1); });
  CHECK(contains(msg, "uniform"));
  CHECK(contains(msg, "-1"));
  msg = invalid_argument_message([&] { tg::uniform(d, 2, 2.0, 1.0); });
  CHECK(contains(msg, "uniform"));
  CHECK(contains(msg, "from=2"));
  msg = invalid_argument_message([&] { tg::normal(f, -3, 0, 1); });
  CHECK(contains(msg, "normal"));
  CHECK(contains(msg, "-3"));
  msg = invalid_argument_message([&] { tg::normal(d, 4, 0, -0.5); });
  CHECK(contains(msg, "normal"));
  CHECK(contains(msg, "-0.5"));
  msg = invalid_argument_message([&] { tg::normal_scalar_path(f, -2, 0, 1); });
  CHECK(contains(msg, "normal_scalar_path"));
  CHECK(contains(msg, "-2"));

  msg = invalid_argument_message([&] { tg::bernoulli(f, 4, 1.5); });
  CHECK(contains(msg, "bernoulli"));
  CHECK(contains(msg, "1.5"));
  msg = invalid_argument_message([&] { tg::bernoulli(f, 4, -0.25); });
  CHECK(contains(msg, "-0.25"));
  msg = invalid_argument_message([&] { tg::bernoulli(f, 4, std::nan("")); });
  CHECK(contains(msg, "nan"));
  msg = invalid_argument_message([&] { tg::dropout_mask(f, 4, 1.25); });
  CHECK(contains(msg, "dropout_mask"));
  CHECK(contains(msg, "1.25"));
  msg = invalid_argument_message([&] { tg::dropout_mask(f, -1, 0.5); });
  CHECK(contains(msg, "dropout_mask"));
  msg = invalid_argument_message([&] { tg::exponential(f, 4, 0.0); });
  CHECK(contains(msg, "exponential"));
  CHECK(contains(msg, "lambd"));

  msg = invalid_argument_message([&] { tg::randint(i, 4, 5, 5); });
  CHECK(contains(msg, "randint"));
  CHECK(contains(msg, "low=5, high=5"));
  msg = invalid_argument_message([&] { tg::randint(i, 4, 7, -2); });
  CHECK(contains(msg, "high=-2"));
  msg = invalid_argument_message([&] { tg::randint(i, -4, 0, 2); });
  CHECK(contains(msg, "-4"));
  msg = invalid_argument_message([&] { tg::random_(i, -1); });
  CHECK(contains(msg, "random_"));
  msg = invalid_argument_message([&] { tg::randperm(-6); });
  CHECK(contains(msg, "randperm"));
  CHECK(contains(msg, "-6"));
  msg =
      invalid_argument_message([&] { tg::random_sampler_epoch_order(tg::default_generator(), 0); });
  CHECK(contains(msg, "random_sampler_epoch_order"));
  msg = invalid_argument_message([&] { tg::linear_init_bound(-3); });
  CHECK(contains(msg, "linear_init_bound"));
  CHECK(contains(msg, "-3"));
}

TEST_CASE("bad input to multinomial and set_state throws, naming the function and the value") {
  int64_t i[4];
  std::string msg;
  const float neg[] = {0.5f, -0.1f, 0.6f};
  msg = invalid_argument_message([&] { tg::multinomial(i, neg, 1, 3, 1, false); });
  CHECK(contains(msg, "multinomial"));
  CHECK(contains(msg, "-0.1"));
  const float zero[] = {0.2f, 0.8f, 0.0f, 0.0f};  // row 1 sums to 0
  msg = invalid_argument_message([&] { tg::multinomial(i, zero, 2, 2, 1, true); });
  CHECK(contains(msg, "multinomial"));
  CHECK(contains(msg, "row 1 sums to 0"));
  const float inf[] = {INFINITY, 1.0f};
  msg = invalid_argument_message([&] { tg::multinomial(i, inf, 1, 2, 1, true); });
  CHECK(contains(msg, "inf"));
  const float ok[] = {0.1f, 0.2f, 0.7f};
  msg = invalid_argument_message([&] { tg::multinomial(i, ok, 1, 3, 4, false); });
  CHECK(contains(msg, "multinomial"));
  CHECK(contains(msg, "k=4"));
  msg = invalid_argument_message([&] { tg::multinomial(i, ok, 1, 3, 0, true); });
  CHECK(contains(msg, "k must be >= 1, got 0"));
  {
    // Argument checks happen before any draw.
    tg::Generator g(5), ref(5);
    CHECK_THROWS_AS(tg::multinomial(i, zero, 2, 2, 1, true, g), std::invalid_argument);
    CHECK(g.random() == ref.random());
  }

  tg::Generator g;
  std::vector<uint8_t> blob = g.get_state();
  blob.pop_back();
  msg = invalid_argument_message([&] { g.set_state(blob); });
  CHECK(contains(msg, "set_state"));
  CHECK(contains(msg, "5055"));
  msg = invalid_argument_message([&] { g.set_state({}); });
  CHECK(contains(msg, "got 0 bytes"));
  blob = g.get_state();
  blob[8] = 0;  // left = 0: not a valid position
  msg = invalid_argument_message([&] { g.set_state(blob); });
  CHECK(contains(msg, "set_state"));
  CHECK(contains(msg, "left=0"));
  CHECK(g.get_state() == tg::Generator().get_state());  // a rejected blob changes nothing
}

// Data-parallel training skips rank r's generator to micro-batch r's start (train/README.md).
TEST_CASE("discard(n) lands where n draws land; words_drawn counts them") {
  for (const uint64_t start : {0u, 1u, 623u, 624u, 1000u}) {
    for (const uint64_t n : {0u, 1u, 2u, 622u, 623u, 624u, 625u, 1248u, 5001u}) {
      CAPTURE(start);
      CAPTURE(n);
      tg::Generator drawn(123), skipped(123);
      for (uint64_t i = 0; i < start; ++i) drawn.random(), skipped.random();
      const uint64_t before = drawn.words_drawn();
      for (uint64_t i = 0; i < n; ++i) drawn.random();
      CHECK(drawn.words_drawn() - before == n);
      skipped.discard(n);
      CHECK(skipped.words_drawn() - before == n);
      CHECK(skipped.get_state() == drawn.get_state());
      CHECK(skipped.random() == drawn.random());
    }
  }
  tg::Generator g(7);
  std::vector<uint32_t> block(700);
  const uint64_t before = g.words_drawn();
  g.random_block(block.data(), 700);
  g.random64();
  CHECK(g.words_drawn() - before == 702);
}
