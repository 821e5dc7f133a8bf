// bfloat16 tensors (core/bfloat16.h, DType::BFloat16): PyTorch's rounding (golden bf16_round.txt
// from tests/golden/gen_bf16.py), exact widening, promotion, storage in safetensors, and the ops:
// each computes in float32 and rounds its result once, and its gradient follows float64's within
// bfloat16's precision.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/tensor.h"

#ifndef TG_GOLDEN_DIR
#error "TG_GOLDEN_DIR must name tests/golden (set by tests/meson.build)"
#endif

using namespace tg;

namespace {

float f32_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint16_t bits_of(const Tensor& t, int64_t i) { return t.contiguous().data<bfloat16>()[i].bits; }

// bf16 bits of a one-element float32 tensor converted by Tensor::to (the copy path).
uint16_t to_bf16_bits(float f) {
  Tensor x = from_vector(std::vector<float>{f}, {1});
  return bits_of(x.to(DType::BFloat16), 0);
}

std::vector<std::pair<uint32_t, uint16_t>> load_rounding() {
  std::ifstream in(std::string(TG_GOLDEN_DIR) + "/bf16_round.txt");
  REQUIRE(in);
  std::vector<std::pair<uint32_t, uint16_t>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    unsigned f = 0, b = 0;
    REQUIRE(std::sscanf(line.c_str(), "%x %x", &f, &b) == 2);
    rows.emplace_back(uint32_t(f), uint16_t(b));
  }
  return rows;
}

}  // namespace

TEST_CASE("float32 -> bfloat16 rounds as torch does, in the type and through Tensor::to") {
  const auto rows = load_rounding();
  REQUIRE(rows.size() >= 200);  // the generator writes 226: fewer means a damaged file
  for (const auto& [f, b] : rows) {
    CAPTURE(f);
    CHECK(bfloat16::round_bits(f32_from_bits(f)) == b);
    CHECK(to_bf16_bits(f32_from_bits(f)) == b);
  }
}

TEST_CASE("bfloat16 -> float32 is exact: every non-NaN pattern comes back, every NaN is 0x7FC0") {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const bfloat16 x = bfloat16::from_bits(uint16_t(b));
    const float f = x;
    if (std::isnan(f)) {
      ++nans;
      CHECK(bfloat16(f).bits == 0x7FC0);
    } else if (bfloat16(f).bits != b) {
      FAIL("pattern ", b, " did not come back");
    }
  }
  CHECK(nans == 2 * 127);  // exponent all ones, mantissa non-zero, both signs
}

TEST_CASE("bfloat16 tensors: creation, item, to_vector, conversions both ways, printing") {
  const Tensor t = tensor({0.1, 1.5, -2.25, 3.0}, DType::BFloat16);
  CHECK(t.dtype() == DType::BFloat16);
  CHECK(dtype_size(t.dtype()) == 2);
  // 0.1f is 0x3DCCCCCD; its top half rounds up to 0x3DCD = 0.10009765625.
  CHECK(t.to_vector<double>() == std::vector<double>{0.10009765625, 1.5, -2.25, 3.0});
  CHECK(t[1].item<float>() == 1.5f);
  CHECK(t.to(DType::Float32).dtype() == DType::Float32);
  CHECK(t.to(DType::Int64).to_vector<int64_t>()[2] == -2);
  // A double goes through float first, as c10::BFloat16 converts: 1 + 2^-8 + 2^-30 is 1 + 2^-8
  // as a float (a tie in bfloat16, to even: 1), though straight from the double it would round up.
  CHECK(full({1}, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), DType::BFloat16).item() == 1.0);
  CHECK(zeros({2, 2}, DType::BFloat16).str() ==
        "tensor([[0., 0.],\n        [0., 0.]], dtype=torch.bfloat16)");
  CHECK(arange(0.0, 3.0, 1.0, DType::BFloat16).str() ==
        "tensor([0., 1., 2.], dtype=torch.bfloat16)");
}

TEST_CASE("bfloat16 promotion follows PyTorch") {
  const Tensor b = ones({2}, DType::BFloat16);
  CHECK((b + ones({2}, DType::Float32)).dtype() == DType::Float32);
  CHECK((b + ones({2}, DType::Float64)).dtype() == DType::Float64);
  CHECK((b + ones({2}, DType::Int64)).dtype() == DType::BFloat16);
  CHECK((b * 2.5).dtype() == DType::BFloat16);
  CHECK(gt(b, 0.5).dtype() == DType::Bool);
  CHECK_THROWS_WITH(matmul(ones({2, 3}, DType::BFloat16), ones({3, 2})),
                    "matmul: expected both operands to have the same dtype, got torch.bfloat16 "
                    "[2, 3] and torch.float32 [3, 2]");
}

TEST_CASE("bfloat16 tensors are stored as BF16 in safetensors and read back bit for bit") {
  const auto path = std::filesystem::temp_directory_path() / "tg_bf16_test.safetensors";
  manual_seed(7);
  const Tensor w = randn({3, 5}).to(DType::BFloat16);
  save_safetensors(path, {{"w", w}}, {});
  const SafeTensorsHeader h = read_safetensors_header(path);
  REQUIRE(h.tensors.size() == 1);
  CHECK(h.tensors[0].dtype == "BF16");
  CHECK(h.tensors[0].end - h.tensors[0].begin == 3 * 5 * 2);
  const SafeTensors back = load_safetensors(path);
  const Tensor* r = back.find("w");
  REQUIRE(r != nullptr);
  CHECK(r->dtype() == DType::BFloat16);
  CHECK(r->shape() == Shape{3, 5});
  CHECK(std::memcmp(r->data<bfloat16>(), w.data<bfloat16>(), 30) == 0);
  std::filesystem::remove(path);
}

namespace {

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

struct OpCase {
  const char* name;
  Op f;
  std::vector<Shape> shapes;
  double shift_last = 0;  // added to the last input (keeps a divisor away from 0)
  // GEMM ops sum in the bf16 GEMM's order (pairs, kernels::gemm_bf16), not sgemm's: their float32
  // sums may differ in the last bit, so a rounded element may be one bf16 step away (exact
  // equality with the GEMM's own reference is its own test below).
  bool gemm = false;
  // The op has a bf16 kernel of its own, which rounds inside (scaled_dot_product_attention: the
  // softmax's weights, as PyTorch's flash kernel does), so its forward is not float32's rounded
  // once: its own test below holds it to that kernel's bits.
  bool own_kernel = false;
};

// Every op's bfloat16 forward is its float32 forward on the widened inputs, rounded once.
void check_forward(const OpCase& c, const std::vector<Tensor>& in16) {
  if (c.own_kernel) return;
  std::vector<Tensor> in32;
  for (const Tensor& t : in16)
    in32.push_back(t.dtype() == DType::BFloat16 ? t.to(DType::Float32) : t);
  const Tensor y16 = c.f(in16), y32 = c.f(in32).to(DType::BFloat16);
  CHECK(y16.dtype() == DType::BFloat16);
  REQUIRE(y16.shape() == y32.shape());
  const Tensor a = y16.contiguous(), b = y32.contiguous();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int steps = std::abs(int(a.data<bfloat16>()[i].bits) - int(b.data<bfloat16>()[i].bits));
    CHECK_MESSAGE(steps <= (c.gemm ? 1 : 0), "element " << i);
  }
}

// The gradient of sum(f(x) ⊙ w) through bfloat16 against float64's at the same (bf16-exact)
// inputs: within bfloat16's precision, a few roundings of 2^-8 each, relative to the largest.
void check_gradient(const OpCase& c, const std::vector<Tensor>& in16, const Tensor& w64) {
  std::vector<Tensor> a16, a64;
  for (const Tensor& t : in16) {
    const bool fl = t.dtype() == DType::BFloat16;
    a16.push_back(fl ? t.detach().requires_grad_() : t);
    a64.push_back(fl ? t.to(DType::Float64).requires_grad_() : t);
  }
  (c.f(a16) * w64.to(DType::BFloat16)).sum().backward();
  (c.f(a64) * w64).sum().backward();
  for (size_t k = 0; k < a16.size(); ++k) {
    if (a16[k].dtype() != DType::BFloat16) continue;
    const Tensor g16 = a16[k].grad();
    REQUIRE(g16.defined());
    CHECK(g16.dtype() == DType::BFloat16);
    const std::vector<double> x = g16.to_vector<double>(), y = a64[k].grad().to_vector<double>();
    double scale = 1e-3;
    for (double v : y) scale = std::max(scale, std::fabs(v));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / scale);
    CAPTURE(k);
    CHECK(worst < 0.04);  // 10 bf16 ulps (2^-8 each) of the largest gradient
  }
}

std::vector<OpCase> op_cases() {
  using V = const std::vector<Tensor>&;
  return {
      {"add", [](V x) { return x[0] + x[1]; }, {{4, 5}, {5}}},
      {"sub", [](V x) { return x[0] - x[1]; }, {{4, 5}, {4, 5}}},
      {"mul", [](V x) { return x[0] * x[1]; }, {{4, 5}, {4, 1}}},
      {"div", [](V x) { return x[0] / x[1]; }, {{4, 5}, {4, 5}}, 4.0},
      {"exp", [](V x) { return exp(x[0]); }, {{3, 7}}},
      {"tanh", [](V x) { return tanh(x[0]); }, {{3, 7}}},
      {"gelu", [](V x) { return gelu(x[0]); }, {{3, 7}}},
      {"softmax", [](V x) { return softmax(x[0], -1); }, {{3, 7}}},
      {"log_softmax", [](V x) { return log_softmax(x[0], 1); }, {{3, 7}}},
      {"layer_norm", [](V x) { return layer_norm(x[0], x[1], x[2], 1e-5); }, {{3, 8}, {8}, {8}}},
      {"matmul", [](V x) { return matmul(x[0], x[1]); }, {{2, 3, 16}, {16, 5}}, 0, true},
      {"linear", [](V x) { return linear(x[0], x[1], x[2]); }, {{4, 16}, {6, 16}, {6}}, 0, true},
      {"sum", [](V x) { return sum(x[0], 1, true); }, {{4, 9}}},
      {"mean", [](V x) { return mean(x[0], 0, false); }, {{4, 9}}},
      {"var", [](V x) { return var(x[0], 1, true, false); }, {{4, 9}}},
      {"transpose+contiguous", [](V x) { return x[0].transpose(0, 1).contiguous(); }, {{3, 4}}},
      {"sdpa causal",
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true); },
       {{2, 6, 8}, {2, 6, 8}, {2, 6, 8}},
       0,
       false,
       true},
  };
}

}  // namespace

TEST_CASE("bfloat16 ops: float32 forward rounded once; gradients within bf16 precision of f64") {
  for (const OpCase& c : op_cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    manual_seed(11);
    std::vector<Tensor> in16;
    for (const Shape& s : c.shapes) in16.push_back(randn(s).to(DType::BFloat16));
    in16.back() = (in16.back().to(DType::Float32) + c.shift_last).to(DType::BFloat16);
    check_forward(c, in16);
    const Tensor probe = c.f(in16);
    manual_seed(12);
    check_gradient(c, in16, randn(probe.shape(), nullptr, DType::Float64));
  }
}

TEST_CASE("bfloat16 cross_entropy and embedding: the loss rounded once, rows gathered exactly") {
  manual_seed(5);
  const Tensor logits = randn({4, 10}).to(DType::BFloat16);
  const Tensor targets = tensor({1, 0, 9, 3}, DType::Int64);
  const Tensor l16 = cross_entropy(logits, targets);
  CHECK(l16.dtype() == DType::BFloat16);
  CHECK(l16.item<float>() ==
        bfloat16(cross_entropy(logits.to(DType::Float32), targets).item<float>()));
  const Tensor w = randn({6, 3}).to(DType::BFloat16);
  const Tensor e = embedding(tensor({5, 0, 5}, DType::Int64), w);
  CHECK(e.dtype() == DType::BFloat16);
  CHECK(bits_of(e, 0) == bits_of(w, 15));
  CHECK(bits_of(e, 8) == bits_of(w, 17));
}

TEST_CASE(
    "autocast: linear, matmul and attention in bfloat16, float32 gradients for float32 leaves") {
  manual_seed(3);
  const Tensor x = randn({4, 16}), w = randn({8, 16}).requires_grad_(), b = randn({8});
  Tensor y;
  {
    AutocastGuard autocast;
    y = linear(x, w, b);
    CHECK(y.dtype() == DType::BFloat16);
    CHECK(matmul(x, w.T()).dtype() == DType::BFloat16);
    CHECK((y + x.narrow(1, 0, 8)).dtype() == DType::Float32);  // promotion, not autocast
    CHECK(cross_entropy(y, tensor({0, 1, 2, 3}, DType::Int64)).dtype() == DType::Float32);
    const Tensor q = randn({1, 2, 5, 4});
    CHECK(scaled_dot_product_attention(q, q, q, Tensor(), 0.0, true).dtype() == DType::BFloat16);
  }
  CHECK_FALSE(autocast_enabled());
  CHECK(linear(x, w, b).dtype() == DType::Float32);
  // The bf16 result is the bf16 GEMM's on bf16-rounded operands (the bias first), rounded once.
  const Tensor x16 = x.to(DType::BFloat16), w16 = w.detach().to(DType::BFloat16);
  std::vector<float> acc(4 * 8);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 8; ++j) acc[size_t(i * 8 + j)] = float(bfloat16(b.data<float>()[j]));
  kernels::gemm_bf16_ref(4, 8, 16, reinterpret_cast<const uint16_t*>(x16.data<bfloat16>()), 16, 1,
                         reinterpret_cast<const uint16_t*>(w16.data<bfloat16>()), 1, 16, 1.0f,
                         acc.data(), 8);
  for (int64_t i = 0; i < 32; ++i)
    CHECK(y.data<bfloat16>()[i].bits == bfloat16(acc[size_t(i)]).bits);
  y.to(DType::Float32).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
}

// The bf16 scaled_dot_product_attention runs kernels::sdpa_forward_bf16 / sdpa_backward_bf16: the
// op must give that kernel's bits, forward and backward (causal, a float mask, neither), for bf16
// tensors and for float32 ones under autocast, whose gradients come back in float32 (the bf16
// gradient widened, as autocast linear's), from one node.
namespace {
struct Sdpa16 {  // the kernel called directly on contiguous [B, L|S, E|Ev] bf16 tensors
  std::vector<uint16_t> out;
  std::vector<float> lse, dq, dk, dv;
};
const uint16_t* bits_ptr(const Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data<bfloat16>());
}
Sdpa16 sdpa_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   bool causal, const Tensor& dout16) {
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  std::vector<int64_t> qo, ko, vo, mo(size_t(B), 0);
  for (int64_t n = 0; n < B; ++n) qo.push_back(n * L * E), ko.push_back(n * S * E);
  for (int64_t n = 0; n < B; ++n) vo.push_back(n * S * Ev);
  kernels::AttnProblemBf16 p;
  p.batch = B, p.L = L, p.S = S, p.E = E, p.Ev = Ev;
  p.scale = float(1.0 / std::sqrt(double(E))), p.causal = causal;
  p.q = {bits_ptr(q), E, qo.data()}, p.k = {bits_ptr(k), E, ko.data()};
  p.v = {bits_ptr(v), Ev, vo.data()};
  if (mask.defined()) p.mask = {mask.data<float>(), S, mo.data()};
  Sdpa16 r{std::vector<uint16_t>(size_t(B * L * Ev)), std::vector<float>(size_t(B * L)),
           std::vector<float>(size_t(B * L * E)), std::vector<float>(size_t(B * S * E)),
           std::vector<float>(size_t(B * S * Ev))};
  std::vector<int64_t> oo;  // out and dout: [B, L, Ev]
  for (int64_t n = 0; n < B; ++n) oo.push_back(n * L * Ev);
  kernels::sdpa_forward_bf16(p, {r.out.data(), Ev, oo.data()}, r.lse.data());
  kernels::sdpa_backward_bf16(p, {r.out.data(), Ev, oo.data()}, {bits_ptr(dout16), Ev, oo.data()},
                              r.lse.data(), {r.dq.data(), E, qo.data()},
                              {r.dk.data(), E, ko.data()}, {r.dv.data(), Ev, vo.data()});
  return r;
}
}  // namespace

TEST_CASE("bf16 scaled_dot_product_attention: the bf16 kernel's bits, also under autocast") {
  manual_seed(13);
  const Tensor q = randn({6, 9, 8}).to(DType::BFloat16), k = randn({6, 11, 8}).to(DType::BFloat16);
  const Tensor v = randn({6, 11, 6}).to(DType::BFloat16), mask = randn({9, 11});
  const Tensor up = randn({6, 9, 6});  // the gradient flowing in, through a float32 product
  for (int c = 0; c < 3; ++c) {
    CAPTURE(c);
    const bool causal = c == 1;
    const Tensor m = c == 2 ? mask : Tensor();
    // What reaches the node: up narrowed by the .to(Float32) below (ToCopyBackward0).
    const Sdpa16 want = sdpa_kernel(q, k, v, m, causal, up.to(DType::BFloat16));
    for (const bool autocast : {false, true}) {
      CAPTURE(autocast);
      const auto leaf = [&](const Tensor& t) {
        return (autocast ? t.to(DType::Float32) : t.detach().clone()).requires_grad_();
      };
      std::vector<Tensor> in = {leaf(q), leaf(k), leaf(v)};
      Tensor y;
      {
        AutocastGuard guard(autocast);
        y = scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, causal);
      }
      REQUIRE(y.dtype() == DType::BFloat16);
      for (int64_t i = 0; i < y.numel(); ++i) CHECK(bits_of(y, i) == want.out[size_t(i)]);
      (y.to(DType::Float32) * up).sum().backward();
      for (const auto& [t, g] :
           {std::pair{&in[0], &want.dq}, {&in[1], &want.dk}, {&in[2], &want.dv}}) {
        REQUIRE(t->grad().defined());
        CHECK(t->grad().dtype() == t->dtype());  // float32 under autocast, one node
        const Tensor f = t->grad().to(DType::Float32).contiguous();
        CHECK(std::memcmp(f.data<float>(), g->data(), g->size() * 4) == 0);
      }
    }
  }
}

// tests/golden/gen_sdpa_bf16.py: PyTorch 2.6's CPU flash kernel on bf16 q, k, v (plain with
// L != S, causal, an additive bf16 mask), forward and backward. Not the same bits: measured on
// its output, PyTorch 2.6 rounds the scores q·kᵀ and the sum P·v to bf16 as well as the weights P
// (a probe of the plain case equals that emulation in float64 bit for bit), where ours keeps both
// in float32 (kernels.h, as PyTorch's FlashAttentionKernel.cpp source does). So held here: ours
// is at least as close to the exact result (our float64 path on the same bf16 values) as
// PyTorch 2.6's, on average, for out and every gradient; and within 2^-5 of PyTorch's largest
// value, which its rounded scores allow (|x| reaches about 8 here: a weight off by up to
// 2^-8·8 = 2^-5 of itself).
namespace {
struct SdpaGolden {
  std::string name;
  int64_t B = 0, H = 0, L = 0, S = 0, E = 0;
  bool causal = false, mask = false;
  std::map<std::string, std::vector<uint16_t>> t;
  Tensor tensor(const std::string& n, const Shape& shape) const {
    const std::vector<uint16_t>& b = t.at(n);
    Tensor x = zeros(shape, DType::BFloat16);
    REQUIRE(int64_t(b.size()) == x.numel());
    for (size_t i = 0; i < b.size(); ++i) x.data<bfloat16>()[i] = bfloat16::from_bits(b[i]);
    return x;
  }
};
std::vector<SdpaGolden> load_sdpa_golden() {
  std::ifstream in(std::string(TG_GOLDEN_DIR) + "/sdpa_bf16_torch2.txt");
  REQUIRE(in);
  std::vector<SdpaGolden> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string name, hex;
    ss >> name;
    if (name == "case") {
      SdpaGolden c;
      int causal = 0, mask = 0;
      ss >> c.name >> c.B >> c.H >> c.L >> c.S >> c.E >> causal >> mask;
      c.causal = causal != 0, c.mask = mask != 0;
      cases.push_back(c);
      continue;
    }
    REQUIRE(!cases.empty());
    while (ss >> hex) cases.back().t[name].push_back(uint16_t(std::stoul(hex, nullptr, 16)));
  }
  return cases;
}
// The largest and the mean |a − b| (float64), and the largest |b|.
struct Gap {
  double max = 0, mean = 0, scale = 0;
};
Gap gap(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  Gap g;
  for (size_t i = 0; i < x.size(); ++i) {
    g.max = std::max(g.max, std::fabs(x[i] - y[i]));
    g.mean += std::fabs(x[i] - y[i]) / double(x.size());
    g.scale = std::max(g.scale, std::fabs(y[i]));
  }
  return g;
}
// out, dq, dk, dv of our sdpa on q, k, v in dtype dt (bf16; float32, the route bf16 took before
// its kernel, rounded to bf16 as that route rounded; float64: the exact result); gout flows in.
std::vector<Tensor> ours(const std::vector<Tensor>& qkv, const Tensor& mask, bool causal,
                         const Tensor& gout, DType dt) {
  std::vector<Tensor> in;
  for (const Tensor& t : qkv) in.push_back(t.to(dt).detach().requires_grad_());
  const Tensor m = mask.defined() ? mask.to(dt) : Tensor();
  const Tensor y = scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, causal);
  (y.to(DType::Float64) * gout.to(DType::Float64)).sum().backward();
  std::vector<Tensor> r = {y, in[0].grad(), in[1].grad(), in[2].grad()};
  if (dt == DType::Float32)
    for (Tensor& t : r) t = t.to(DType::BFloat16);
  return r;
}
}  // namespace

TEST_CASE("bf16 scaled_dot_product_attention beside PyTorch 2.6's CPU flash kernel") {
  const std::vector<SdpaGolden> cases = load_sdpa_golden();
  REQUIRE(cases.size() == 3);
  for (const SdpaGolden& c : cases) {
    CAPTURE(c.name);
    const Shape sq{c.B, c.H, c.L, c.E}, skv{c.B, c.H, c.S, c.E};
    const std::vector<Tensor> qkv = {c.tensor("q", sq), c.tensor("k", skv), c.tensor("v", skv)};
    const Tensor mask = c.mask ? c.tensor("mask", {c.L, c.S}) : Tensor();
    const Tensor gout = c.tensor("gout", sq);
    const std::vector<Tensor> now = ours(qkv, mask, c.causal, gout, DType::BFloat16);
    const std::vector<Tensor> old = ours(qkv, mask, c.causal, gout, DType::Float32);
    const std::vector<Tensor> exact = ours(qkv, mask, c.causal, gout, DType::Float64);
    const std::string names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(names[i]);
      const Tensor torch = c.tensor(names[i], i <= 1 ? sq : skv);
      const Gap g = gap(now[i], torch), ours_err = gap(now[i], exact[i]);
      const Gap torch_err = gap(torch, exact[i]), old_err = gap(old[i], exact[i]);
      MESSAGE(c.name << " " << names[i] << ": mean |x - exact| ours " << ours_err.mean
                     << ", PyTorch 2.6 " << torch_err.mean << ", the float32 route " << old_err.mean
                     << "; max |ours - PyTorch| " << g.max << " of max " << g.scale);
      CHECK(ours_err.mean <= torch_err.mean);
      CHECK(g.max <= g.scale / 32);
    }
  }
}

// Autocast's linear takes the float32 operands' gradients in one node (core/ops/matmul.cpp): they
// must be the bits of the casts on the tape, as torch.autocast records them (bf16 gradients
// widened by ToCopyBackward0), for every mix of float32 and bf16 operands and for 2-D and 3-D x.
TEST_CASE("autocast linear: gradients equal casting on the tape, bit for bit") {
  struct Row {
    const char* what;
    Shape xs;
    bool x_bf16, with_bias;
  };
  const Row rows[] = {{"2-D, all float32", {5, 16}, false, true},
                      {"3-D, all float32", {2, 7, 16}, false, true},
                      {"bf16 x, float32 w", {3, 16}, true, true},
                      {"no bias", {2, 3, 16}, false, false}};
  for (const Row& r : rows) {
    CAPTURE(r.what);
    manual_seed(11);
    Tensor x0 = randn(r.xs), w0 = randn({9, 16}), b0 = r.with_bias ? randn({9}) : Tensor();
    if (r.x_bf16) x0 = x0.to(DType::BFloat16);
    Shape ys = r.xs;
    ys.back() = 9;
    const Tensor up = randn(ys);  // the gradient flowing in, through a float32 product
    const auto leaves = [&] {
      std::vector<Tensor> v{x0.detach().requires_grad_(), w0.detach().requires_grad_()};
      v.push_back(r.with_bias ? b0.detach().requires_grad_() : Tensor());
      return v;
    };
    std::vector<Tensor> a = leaves(), c = leaves();
    Tensor ya;
    {
      AutocastGuard autocast;
      ya = linear(a[0], a[1], a[2]);
    }
    (ya.to(DType::Float32) * up).sum().backward();
    const auto to16 = [](const Tensor& t) {
      return t.defined() && t.dtype() == DType::Float32 ? t.to(DType::BFloat16) : t;
    };
    const Tensor yc = linear(to16(c[0]), to16(c[1]), to16(c[2]));
    (yc.to(DType::Float32) * up).sum().backward();
    CHECK(ya.dtype() == DType::BFloat16);
    for (int64_t i = 0; i < ya.numel(); ++i) CHECK(bits_of(ya, i) == bits_of(yc, i));
    for (size_t k = 0; k < 3; ++k) {
      if (!a[k].defined()) continue;
      CAPTURE(k);
      const Tensor ga = a[k].grad(), gc = c[k].grad();
      REQUIRE(ga.defined());
      CHECK(ga.dtype() == a[k].dtype());
      CHECK(ga.shape() == gc.shape());
      const Tensor fa = ga.to(DType::Float32).contiguous(), fc = gc.to(DType::Float32).contiguous();
      int differ = 0;
      for (int64_t i = 0; i < fa.numel(); ++i)
        differ += std::memcmp(fa.data<float>() + i, fc.data<float>() + i, 4) != 0;
      CHECK(differ == 0);
    }
  }
}

namespace {

// The bf16 bits of t (any float dtype), as one vector.
std::vector<uint16_t> bf16_bits(const Tensor& t) {
  const Tensor c = t.to(DType::BFloat16).contiguous();
  std::vector<uint16_t> v(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[size_t(i)] = c.data<bfloat16>()[i].bits;
  return v;
}

std::vector<uint32_t> f32_bits(const Tensor& t) {
  std::vector<uint32_t> v(size_t(t.numel()));
  std::memcpy(v.data(), t.contiguous().data<float>(), v.size() * 4);
  return v;
}

}  // namespace

// Autocast reads a float32 parameter through the bf16 copy that adamw_ rounds in its own pass
// (ops/common.h: autocast_weight_bf16): three steps of a linear layer give the same bits as
// casting the parameters afresh each time (`fresh`: an in-place multiply by 1 after each update
// changes the parameters' versions, not their bits, so no copy is current).
TEST_CASE("autocast's bf16 copy of a parameter: AdamW rounds it, the casts read it, same bits") {
  const auto run = [](bool fresh, std::vector<std::vector<uint16_t>>& ys) {
    manual_seed(21);
    Tensor w = randn({33, 70}).requires_grad_(), b = randn({33}).requires_grad_();
    const Tensor x = randn({4, 70}), up = randn({4, 33});
    Tensor mw = zeros_like(w), vw = zeros_like(w), mb = zeros_like(b), vb = zeros_like(b);
    for (int64_t k = 1; k <= 3; ++k) {
      Tensor y;
      {
        AutocastGuard autocast;
        y = linear(x, w, b);
      }
      ys.push_back(bf16_bits(y));
      (y.to(DType::Float32) * up).sum().backward();
      const AdamWStep s{1e-2, 0.9, 0.999, 1e-8, 0.1, k};
      adamw_(w, w.grad(), mw, vw, s);
      adamw_(b, b.grad(), mb, vb, s);
      w.zero_grad(), b.zero_grad();
      NoGradGuard no_grad;
      if (fresh) w.mul_(1.0), b.mul_(1.0);
      // The cast of w, and whether it reads the kept copy (the same buffer twice).
      const Tensor c1 = detail::autocast_weight_bf16(w), c2 = detail::autocast_weight_bf16(w);
      CHECK(bf16_bits(c1) == bf16_bits(w));
      CHECK((c1.data<bfloat16>() == c2.data<bfloat16>()) == !fresh);
    }
    return f32_bits(w);
  };
  std::vector<std::vector<uint16_t>> kept, fresh;
  CHECK(run(false, kept) == run(true, fresh));
  CHECK(kept == fresh);
}

TEST_CASE("autocast's bf16 copy: a changed parameter is cast anew; a graph keeps its own copy") {
  manual_seed(22);
  Tensor w = randn({8, 16}).requires_grad_();
  const Tensor x = randn({2, 16}).requires_grad_();  // its gradient needs w's copy: saved
  Tensor m = zeros_like(w), v = zeros_like(w);
  const auto forward = [&] {
    AutocastGuard autocast;
    return linear(x, w, Tensor());
  };
  (forward().to(DType::Float32)).sum().backward();
  adamw_(w, w.grad(), m, v, {1e-2, 0.9, 0.999, 1e-8, 0.0, 1});
  w.zero_grad();
  SUBCASE("an in-place write after the update") {
    const Tensor before = detail::autocast_weight_bf16(w);
    {
      NoGradGuard no_grad;
      w.add_(ones({8, 16}));
    }
    const Tensor after = detail::autocast_weight_bf16(w);
    CHECK(after.data<bfloat16>() != before.data<bfloat16>());
    CHECK(bf16_bits(after) == bf16_bits(w));
  }
  SUBCASE("an update while a graph holds the copy") {
    const Tensor y = forward();  // saves the copy for its backward
    const std::vector<uint16_t> held = bf16_bits(detail::autocast_weight_bf16(w));
    Tensor g = ones({8, 16});
    adamw_(w, g, m, v, {1e-2, 0.9, 0.999, 1e-8, 0.0, 2});
    const Tensor now = detail::autocast_weight_bf16(w);
    CHECK(bf16_bits(now) == bf16_bits(w));
    CHECK(bf16_bits(now) != held);
    // The graph's copy is as it was: its backward runs (no in-place error) on the old weight.
    CHECK_NOTHROW(y.to(DType::Float32).sum().backward());
  }
}

// tests/golden/gen_adamw_bf16.py: torch.optim.AdamW on a bf16 parameter (PyTorch 2.6's CPU
// loop), three steps; each line "NAME HEX HEX ..." holds a tensor's bf16 bits.
TEST_CASE("adamw_bf16_: torch.optim.AdamW on a bfloat16 parameter, bit for bit (3 steps)") {
  std::ifstream in(std::string(TG_GOLDEN_DIR) + "/adamw_bf16.txt");
  REQUIRE(in);
  std::map<std::string, std::vector<uint16_t>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("lr ", 0) == 0) continue;  // the settings
    std::istringstream ss(line);
    std::string name, hex;
    ss >> name;
    while (ss >> hex) rows[name].push_back(uint16_t(std::stoul(hex, nullptr, 16)));
  }
  const auto tensor_of = [&](const std::string& name) {
    REQUIRE(rows.count(name));
    const std::vector<uint16_t>& b = rows[name];
    Tensor t = zeros({int64_t(b.size())}, DType::BFloat16);
    for (size_t i = 0; i < b.size(); ++i) t.data<bfloat16>()[i] = bfloat16::from_bits(b[i]);
    return t;
  };
  Tensor p = tensor_of("p0");
  Tensor m = zeros(p.shape(), DType::BFloat16), v = zeros(p.shape(), DType::BFloat16);
  for (int step = 1; step <= 3; ++step) {
    CAPTURE(step);
    const std::string k = std::to_string(step);
    adamw_bf16_(p, tensor_of("g" + k), m, v, {4e-4, 0.9, 0.999, 1e-8, 0.1, step});
    for (const auto& [name, t] : {std::pair{"p", p}, {"m", m}, {"v", v}}) {
      CAPTURE(name);
      const Tensor want = tensor_of(name + k);
      int differ = 0;
      for (int64_t i = 0; i < want.numel(); ++i) differ += bits_of(t, i) != bits_of(want, i);
      CHECK(differ == 0);
    }
  }
  Tensor f = zeros({3});
  CHECK_THROWS_WITH_AS(adamw_bf16_(f, f, f, f, {4e-4, 0.9, 0.999, 1e-8, 0.1, 1}),
                       "adamw_bf16_: expected contiguous bfloat16 tensors of one shape, got "
                       "torch.float32 [3] beside the parameter's [3]",
                       std::invalid_argument);
}

// A bf16 Linear read one row at a time off the tape packs its weight once (ops/matmul.cpp); the
// panels must follow the weight through every in-place change (its storage's version), or a
// generation after an optimizer step (the per-epoch sample of a bf16-pure run) would read the old
// weight. Each row must equal the GEMM's row (two rows at once) on the same weight.
TEST_CASE("bf16 linear, one row off the tape: the GEMM's bits, and a changed weight is read anew") {
  manual_seed(11);
  Tensor w = randn({37, 24}).to(DType::BFloat16), b = randn({37}).to(DType::BFloat16);
  const Tensor x = randn({2, 24}).to(DType::BFloat16);
  const auto check_rows = [&](const std::string& when) {
    CAPTURE(when);
    NoGradGuard no_grad;
    const Tensor both = linear(x, w, b);  // the GEMM
    for (int64_t r = 0; r < 2; ++r) {
      const Tensor one = linear(x.narrow(0, r, 1), w, b);  // the gemv, packed where it can be
      for (int64_t j = 0; j < 37; ++j) CHECK(bits_of(one, j) == bits_of(both, r * 37 + j));
    }
  };
  check_rows("first read");
  check_rows("second read, from the panels");
  const Tensor before = linear(x.narrow(0, 0, 1), w, b);
  Tensor m = zeros(w.shape(), DType::BFloat16), v = zeros(w.shape(), DType::BFloat16);
  adamw_bf16_(w, ones(w.shape(), DType::BFloat16), m, v, {0.1, 0.9, 0.999, 1e-8, 0.0, 1});
  check_rows("after adamw_bf16_");
  const Tensor after = linear(x.narrow(0, 0, 1), w, b);
  int changed = 0;
  for (int64_t j = 0; j < 37; ++j) changed += bits_of(before, j) != bits_of(after, j);
  CHECK(changed > 0);
  w.copy_(randn({37, 24}).to(DType::BFloat16));
  check_rows("after copy_");
}

// The bf16 matmul, linear and autocast linear's backward have the GEMM round its float32 sums as
// it stores each tile (kernels.h: Bf16Out), with the bits of what they did before: the GEMM into
// float32 (from the bias), then f32_to_bf16 in a pass of its own. K within one K block and across
// several (1100 k: past the caches' KC on every path); one row of a 1-D operand takes the batched
// GEMM's one-row route.
namespace {
const uint16_t* bf16_ptr(const Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data<bfloat16>());
}
// The old two passes for C[M, N] = A·B (+ bias) with A and B contiguous bf16 tensors read through
// the given strides.
std::vector<uint16_t> two_passes(int64_t M, int64_t N, int64_t K, const Tensor& A, int64_t rsA,
                                 int64_t csA, const Tensor& B, int64_t rsB, int64_t csB,
                                 const Tensor& bias = Tensor()) {
  std::vector<float> c(size_t(M * N), 0.f);
  if (bias.defined())
    for (int64_t i = 0; i < M * N; ++i) c[size_t(i)] = float(bias.data<bfloat16>()[i % N]);
  kernels::gemm_bf16(M, N, K, bf16_ptr(A), rsA, csA, bf16_ptr(B), rsB, csB,
                     bias.defined() ? 1.f : 0.f, c.data(), N);
  std::vector<uint16_t> out(c.size());
  kernels::f32_to_bf16(M * N, c.data(), out.data());
  return out;
}
// Same bits: a bf16 t as they are, a float32 t as the widened bf16 (low half zero).
int differ(const Tensor& t, const std::vector<uint16_t>& want) {
  const Tensor c = t.contiguous();
  REQUIRE(size_t(c.numel()) == want.size());
  int bad = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    uint32_t u = 0;
    if (c.dtype() == DType::BFloat16)
      u = uint32_t(c.data<bfloat16>()[i].bits) << 16;
    else
      std::memcpy(&u, c.data<float>() + i, 4);
    bad += u != uint32_t(want[size_t(i)]) << 16;
  }
  return bad;
}
}  // namespace

TEST_CASE("bf16 matmul, linear and its backward: the GEMM's own rounding, the two passes' bits") {
  const DType bf = DType::BFloat16;
  const int64_t M = 13, N = 37;
  for (const int64_t K : {40, 1100}) {
    CAPTURE(K);
    manual_seed(7);
    const Tensor a = randn({M, K}).to(bf), b = randn({K, N}).to(bf), w = randn({N, K}).to(bf);
    const Tensor bias = randn({N}).to(bf), a3 = randn({2, M, K}).to(bf), row = randn({K}).to(bf);
    CHECK(differ(matmul(a, b), two_passes(M, N, K, a, K, 1, b, N, 1)) == 0);
    std::vector<uint16_t> want3 = two_passes(M, N, K, a3[0], K, 1, b, N, 1);
    const std::vector<uint16_t> second = two_passes(M, N, K, a3[1], K, 1, b, N, 1);
    want3.insert(want3.end(), second.begin(), second.end());
    CHECK(differ(matmul(a3, b), want3) == 0);
    CHECK(differ(matmul(row, b), two_passes(1, N, K, row, K, 1, b, N, 1)) == 0);
    CHECK(differ(linear(a, w, bias), two_passes(M, N, K, a, K, 1, w, 1, K, bias)) == 0);
    CHECK(differ(linear(a, w), two_passes(M, N, K, a, K, 1, w, 1, K)) == 0);
    // The backward, all bf16 (gx = g·w, gw = gᵀ·x through matmul) and under autocast with float32
    // leaves (gx, gw: the bf16 GEMM's sums rounded, kept in float32).
    const Tensor up = randn({M, N}), g = up.to(bf);
    for (const bool autocast : {false, true}) {
      CAPTURE(autocast);
      const Tensor x = (autocast ? a.to(DType::Float32) : a).detach().requires_grad_();
      const Tensor wl = (autocast ? w.to(DType::Float32) : w).detach().requires_grad_();
      Tensor y;
      {
        AutocastGuard guard(autocast);
        y = linear(x, wl, bias);
      }
      (y.to(DType::Float32) * up).sum().backward();
      CHECK(x.grad().dtype() == x.dtype());
      CHECK(differ(x.grad(), two_passes(M, K, N, g, N, 1, w, K, 1)) == 0);
      CHECK(differ(wl.grad(), two_passes(N, K, M, g, 1, N, a, K, 1)) == 0);
    }
  }
}
