// float32 forward values and gradients of a few composites against PyTorch's, from the committed
// golden file tests/golden/core_composites.txt (written by tests/golden/gen_core.py).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/ops.h"
#include "tests/golden_cases.h"

using namespace tg;

namespace {

constexpr int kGoldenVersion = 1;

std::map<std::string, Tensor> load_goldens() {
  const std::string path = std::string(TG_GOLDEN_DIR) + "/core_composites.txt";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::string header;
  std::getline(in, header);
  std::string tag = "v";  // built by appending: GCC 12 -O3 warns (-Wrestrict) on "v" + ... + ";"
  tag += std::to_string(kGoldenVersion);
  tag += ';';
  REQUIRE_MESSAGE(
      header.find(tag) != std::string::npos,
      "golden version mismatch in " << path << "; HINT: re-run tests/golden/gen_core.py");
  std::map<std::string, Tensor> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    int64_t nd;
    ls >> name >> nd;
    Shape shape(static_cast<size_t>(nd), 0);
    for (auto& d : shape) ls >> d;
    std::vector<float> v;
    std::string hex;
    while (ls >> hex) {
      const uint32_t bits = uint32_t(std::stoul(hex, nullptr, 16));
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
    out[name] = from_vector(v, shape);
  }
  return out;
}

// The same deterministic inputs as det() in gen_core.py.
Tensor det(const Shape& shape, int seed, double lo = -1, double hi = 1) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = float(lo + (hi - lo) * (0.5 + 0.5 * std::sin(seed * 12.9898 + double(i) * 78.233)));
  return t;
}
Tensor leaf(const Shape& shape, int seed, double lo = -1, double hi = 1) {
  return det(shape, seed, lo, hi).requires_grad_();
}

// The golden tensor `name` against ours, with golden_cases.h's llm.c-style check.
void check_tensor(const std::map<std::string, Tensor>& golden, const std::string& name,
                  const Tensor& ours, double atol = 1e-5, double rtol = 1e-4) {
  REQUIRE(golden.count(name) == 1);
  REQUIRE(ours.defined());
  tg::testing::check_tensor("golden tensor " + name, ours, golden.at(name), atol, rtol);
}

}  // namespace

TEST_CASE("golden: a two-layer MLP with cross-entropy, against PyTorch") {
  const auto golden = load_goldens();
  Tensor x = leaf({4, 3}, 1), w1 = leaf({5, 3}, 2), b1 = leaf({5}, 3), w2 = leaf({3, 5}, 4),
         b2 = leaf({3}, 5);
  const Tensor h = linear(x, w1, b1).tanh();
  const Tensor loss = cross_entropy(linear(h, w2, b2), tensor({1, 0, 2, 1}));
  loss.backward();
  check_tensor(golden, "mlp.loss", loss);
  check_tensor(golden, "mlp.x.grad", x.grad());
  check_tensor(golden, "mlp.w1.grad", w1.grad());
  check_tensor(golden, "mlp.b1.grad", b1.grad());
  check_tensor(golden, "mlp.w2.grad", w2.grad());
  check_tensor(golden, "mlp.b2.grad", b2.grad());
}

TEST_CASE("golden: causal scaled-dot-product attention, against PyTorch") {
  const auto golden = load_goldens();
  Tensor x = leaf({2, 4, 3}, 6), wq = leaf({3, 2}, 7), wk = leaf({3, 2}, 8), wv = leaf({3, 2}, 9);
  const Tensor keys = matmul(x, wk), queries = matmul(x, wq), values = matmul(x, wv);
  Tensor scores = matmul(queries, keys.transpose(1, 2));
  const Tensor mask = triu(ones({4, 4}), 1).to(DType::Bool);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  const Tensor weights = softmax(scores / std::sqrt(double(keys.shape().back())), -1);
  const Tensor ctx = matmul(weights, values);
  (ctx * det({2, 4, 2}, 10)).sum().backward();
  check_tensor(golden, "attn.ctx", ctx);
  check_tensor(golden, "attn.x.grad", x.grad());
  check_tensor(golden, "attn.wq.grad", wq.grad());
  check_tensor(golden, "attn.wk.grad", wk.grad());
  check_tensor(golden, "attn.wv.grad", wv.grad());
}

TEST_CASE("golden: the book's LayerNorm and GELU written in ops, against PyTorch") {
  const auto golden = load_goldens();
  Tensor x = leaf({3, 5}, 11), scale = leaf({5}, 12, 0.5, 1.5), shift = leaf({5}, 13);
  const Tensor mean = x.mean(-1, true);
  const Tensor var = x.var(-1, /*unbiased=*/false, /*keepdim=*/true);
  const Tensor y = scale * ((x - mean) / (var + 1e-5).sqrt()) + shift;
  const Tensor g =
      0.5 * y * (1.0 + (std::sqrt(float(2.0 / M_PI)) * (y + 0.044715 * y.pow(3))).tanh());
  (g * det({3, 5}, 14)).sum().backward();
  check_tensor(golden, "layernorm_gelu.out", g);
  check_tensor(golden, "layernorm_gelu.x.grad", x.grad());
  check_tensor(golden, "layernorm_gelu.scale.grad", scale.grad());
  check_tensor(golden, "layernorm_gelu.shift.grad", shift.grad());
  // The fused gelu op agrees with the composed form.
  const auto fused = gelu(y.detach()).to_vector<float>(), composed = g.to_vector<float>();
  for (size_t i = 0; i < fused.size(); ++i)
    CHECK(fused[i] == doctest::Approx(composed[i]).epsilon(1e-6));
}

TEST_CASE("golden: embedding with repeated ids, cat, log_softmax and max, against PyTorch") {
  const auto golden = load_goldens();
  Tensor emb = leaf({6, 4}, 15);
  const Tensor e = embedding(tensor({{1, 3, 1}, {0, 5, 3}}), emb);
  const Tensor z = cat({e, e * 2.0}, -1);
  const Tensor out = (log_softmax(z, -1) * det({2, 3, 8}, 16)).sum() + z.max(-1).first.sum();
  out.backward();
  check_tensor(golden, "embed.out", out);
  check_tensor(golden, "embed.emb.grad", emb.grad());
}
