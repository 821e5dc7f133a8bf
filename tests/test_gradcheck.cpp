// Gradient checks, float64, eps 1e-6, atol 1e-6, rtol 1e-5, for every differentiable op:
//
//   elementwise  add sub mul div (tensor and scalar forms, broadcast), neg pow exp log sqrt tanh
//                gelu where
//   reductions   sum (dim, dims, all) mean (dim, all) max (dim, all) var (biased, unbiased)
//   linear alg.  matmul (dot, mv, vm, mm, batched with broadcast, transposed operands) linear
//   softmax      softmax log_softmax cross_entropy (with ignore_index)
//   normalizing  layer_norm (also against the book's LayerNorm written in ops)
//   masking      masked_fill masked_fill_ tril triu dropout_with_mask
//   joining      cat stack embedding
//   views        view reshape transpose permute T unsqueeze squeeze narrow slice select flatten
//                expand contiguous clone
//   composites   a two-layer MLP; the chapter's scaled-dot-product causal attention
//
// Inputs come broadcast, non-contiguous (transposed, sliced) and fanned out (one tensor used
// twice). The first test proves the checker can fail.
#include <doctest/doctest.h>

#include <limits>

#include "tests/gradcheck.h"

using namespace tg;
using tg::testing::gradcheck;
using tg::testing::rand64;
using Inputs = std::vector<Tensor>;

#define GRADCHECK(f, ...)                       \
  do {                                          \
    auto r = gradcheck(f, Inputs{__VA_ARGS__}); \
    INFO(r.report);                             \
    CHECK(r.ok);                                \
  } while (0)

namespace {
// exp with a deliberately wrong backward (2·e^x instead of e^x).
Tensor broken_exp(const Tensor& a) {
  Tensor out = exp(a.detach());
  if (any_requires_grad({&a}))
    record("BrokenExpBackward", {a}, {out},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             return {g * n.saved_tensor(0) * 2.0};
           },
           {&out});
  return out;
}
// mul whose backward forgets to reduce over broadcast dims: the engine catches the shape.
Tensor unreduced_mul(const Tensor& a, const Tensor& b) {
  Tensor out = mul(a.detach(), b.detach());
  if (any_requires_grad({&a, &b}))
    record("UnreducedMulBackward", {a, b}, {a, b},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             return {g * n.saved_tensor(1), g * n.saved_tensor(0)};
           },
           {&out});
  return out;
}
const Tensor kCausal = triu(ones({4, 4}), 1).to(DType::Bool);
}  // namespace

TEST_CASE("the checker catches a deliberately wrong backward") {
  auto r = gradcheck([](const Inputs& x) { return broken_exp(x[0]); }, {rand64({3, 2}, 1)});
  CHECK_FALSE(r.ok);
  CHECK(r.report.find("analytic") != std::string::npos);
  // ... and accepts the right one on the same input.
  CHECK(gradcheck([](const Inputs& x) { return exp(x[0]); }, {rand64({3, 2}, 1)}).ok);
  // A backward returning the wrong shape is refused by the engine itself.
  CHECK_THROWS_WITH(gradcheck([](const Inputs& x) { return unreduced_mul(x[0], x[1]); },
                              {rand64({2, 3}, 2), rand64({3}, 3)}),
                    doctest::Contains("UnreducedMulBackward: backward returned a gradient of shape "
                                      "[2, 3] for input 1 of shape [3]"));
}

TEST_CASE("gradcheck: elementwise, broadcast, scalar forms, fan-out") {
  GRADCHECK([](const Inputs& x) { return x[0] + x[1]; }, rand64({2, 3}, 1), rand64({3}, 2));
  GRADCHECK([](const Inputs& x) { return x[0] - x[1]; }, rand64({2, 1, 3}, 3), rand64({4, 1}, 4));
  GRADCHECK([](const Inputs& x) { return x[0] * x[1]; }, rand64({2, 3}, 5), rand64({2, 1}, 6));
  GRADCHECK([](const Inputs& x) { return x[0] / x[1]; }, rand64({2, 3}, 7), rand64({3}, 8, 0.5, 2));
  GRADCHECK([](const Inputs& x) { return x[0] * x[0] + x[0]; }, rand64({5}, 9));  // fan-out
  GRADCHECK([](const Inputs& x) { return 2.0 - x[0] * 3.0 + 1.0 / (x[0] + 4.0) - x[0] / 5.0; },
            rand64({3}, 10));
  GRADCHECK([](const Inputs& x) { return -x[0]; }, rand64({2, 2}, 11));
  GRADCHECK([](const Inputs& x) { return x[0].pow(3.0); }, rand64({4}, 12));
  GRADCHECK([](const Inputs& x) { return x[0].pow(0.5); }, rand64({4}, 13, 0.5, 2));
  GRADCHECK([](const Inputs& x) { return x[0].exp(); }, rand64({2, 3}, 14));
  GRADCHECK([](const Inputs& x) { return x[0].log(); }, rand64({2, 3}, 15, 0.2, 3));
  GRADCHECK([](const Inputs& x) { return x[0].sqrt(); }, rand64({2, 3}, 16, 0.2, 3));
  GRADCHECK([](const Inputs& x) { return x[0].tanh(); }, rand64({2, 3}, 17));
  GRADCHECK([](const Inputs& x) { return gelu(x[0]); }, rand64({2, 5}, 18, -3, 3));
  GRADCHECK([](const Inputs& x) { return where(gt(x[0], 0.0), x[0], x[1]); }, rand64({2, 3}, 19),
            rand64({3}, 20));
  // Non-contiguous operands: a transposed and a sliced input.
  GRADCHECK([](const Inputs& x) { return x[0].T() * x[1].slice(1, 1, 3); }, rand64({2, 3}, 21),
            rand64({3, 4}, 22));
}

TEST_CASE("gradcheck: reductions") {
  GRADCHECK([](const Inputs& x) { return x[0].sum(1); }, rand64({3, 4}, 1));
  GRADCHECK([](const Inputs& x) { return x[0].sum(-1, true); }, rand64({2, 3, 4}, 2));
  GRADCHECK([](const Inputs& x) { return sum(x[0], Shape{0, 2}); }, rand64({2, 3, 4}, 3));
  GRADCHECK([](const Inputs& x) { return x[0].sum(); }, rand64({3, 4}, 4));
  GRADCHECK([](const Inputs& x) { return x[0].mean(0); }, rand64({3, 4}, 5));
  GRADCHECK([](const Inputs& x) { return x[0].mean(); }, rand64({3, 4}, 6));
  GRADCHECK([](const Inputs& x) { return x[0].max(1).first; }, rand64({3, 4}, 7));
  GRADCHECK([](const Inputs& x) { return x[0].max(0, true).first; }, rand64({3, 4}, 8));
  GRADCHECK([](const Inputs& x) { return x[0].max(); }, rand64({3, 4}, 9));
  GRADCHECK([](const Inputs& x) { return x[0].var(1); }, rand64({3, 4}, 10));
  GRADCHECK([](const Inputs& x) { return x[0].var(-1, false, true); }, rand64({2, 5}, 11));
  GRADCHECK([](const Inputs& x) { return x[0].T().sum(1); }, rand64({3, 4}, 12));
}

TEST_CASE("gradcheck: matmul in every torch.matmul form, and linear") {
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({4}, 1), rand64({4}, 2));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({3, 4}, 3), rand64({4}, 4));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({4}, 5), rand64({4, 2}, 6));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({3, 4}, 7),
            rand64({4, 2}, 8));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({2, 3, 4}, 9),
            rand64({4, 2}, 10));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[1]); }, rand64({2, 1, 3, 4}, 11),
            rand64({3, 4, 2}, 12));  // batch dims broadcast both ways
  GRADCHECK([](const Inputs& x) { return matmul(x[0].T(), x[1].transpose(0, 1)); },
            rand64({4, 3}, 13), rand64({2, 4}, 14));
  GRADCHECK([](const Inputs& x) { return matmul(x[0], x[0].transpose(-1, -2)); },
            rand64({2, 3, 4}, 15));  // fan-out through a transposed view
  GRADCHECK([](const Inputs& x) { return linear(x[0], x[1], x[2]); }, rand64({3, 4}, 16),
            rand64({5, 4}, 17), rand64({5}, 18));
  GRADCHECK([](const Inputs& x) { return linear(x[0], x[1]); }, rand64({2, 3, 4}, 19),
            rand64({5, 4}, 20));
}

TEST_CASE("gradcheck: softmax family and cross_entropy") {
  GRADCHECK([](const Inputs& x) { return softmax(x[0], 1); }, rand64({3, 4}, 1, -2, 2));
  GRADCHECK([](const Inputs& x) { return softmax(x[0], 0); }, rand64({3, 4}, 2, -2, 2));
  GRADCHECK([](const Inputs& x) { return softmax(x[0], 1); }, rand64({2, 3, 4}, 3, -2, 2));
  GRADCHECK([](const Inputs& x) { return log_softmax(x[0], -1); }, rand64({3, 4}, 4, -2, 2));
  GRADCHECK([](const Inputs& x) { return log_softmax(x[0].T(), 0); }, rand64({3, 4}, 5, -2, 2));
  GRADCHECK(
      [](const Inputs& x) {
        return cross_entropy(x[0], tensor({2, 0, 3}));
      },
      rand64({3, 4}, 6, -2, 2));
  GRADCHECK(
      [](const Inputs& x) {
        return cross_entropy(x[0], tensor({2, -100, 3}));
      },
      rand64({3, 4}, 7, -2, 2));
}

TEST_CASE("gradcheck: layer_norm, and it equals the book's LayerNorm written in ops") {
  GRADCHECK([](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }, rand64({3, 5}, 40, -2, 2),
            rand64({5}, 41, 0.5, 1.5), rand64({5}, 42));
  // A transposed input, a large eps, a row fanned out into the weight.
  GRADCHECK([](const Inputs& x) { return layer_norm(x[0].T(), x[0][0], x[1], 0.5); },
            rand64({4, 4}, 43, -2, 2), rand64({4}, 44));
  const Tensor x = rand64({2, 3, 6}, 45, -3, 3), w = rand64({6}, 46), b = rand64({6}, 47);
  const Tensor mean = x.mean(-1, true), var = x.var(-1, /*unbiased=*/false, /*keepdim=*/true);
  const std::vector<double> book = (w * ((x - mean) / (var + 1e-5).sqrt()) + b).to_vector<double>(),
                            op = layer_norm(x, w, b).to_vector<double>();
  REQUIRE(book.size() == op.size());
  for (size_t i = 0; i < op.size(); ++i) CHECK(op[i] == doctest::Approx(book[i]).epsilon(1e-12));
}

TEST_CASE("gradcheck: masking, joining, embedding") {
  const Tensor mask = tensor({{1, 0, 0}, {0, 1, 0}}).to(DType::Bool);
  GRADCHECK([&](const Inputs& x) { return x[0].masked_fill(mask, 0.5); }, rand64({2, 3}, 1));
  GRADCHECK([&](const Inputs& x) { return x[0].masked_fill(mask.select(0, 0), 0.5); },
            rand64({2, 3}, 2));  // broadcast mask
  GRADCHECK(
      [&](const Inputs& x) {
        Tensor y = x[0] * 2.0;
        y.masked_fill_(mask, -1.0);
        return y;
      },
      rand64({2, 3}, 3));
  GRADCHECK([](const Inputs& x) { return x[0].tril(); }, rand64({3, 3}, 4));
  GRADCHECK([](const Inputs& x) { return x[0].triu(1); }, rand64({2, 3, 3}, 5));
  GRADCHECK(
      [](const Inputs& x) {
        return cat({x[0], x[1], x[0]}, 1);
      },
      rand64({2, 3}, 6), rand64({2, 1}, 7));
  GRADCHECK(
      [](const Inputs& x) {
        return stack({x[0], x[1]}, 1);
      },
      rand64({2, 3}, 8), rand64({2, 3}, 9));
  GRADCHECK(
      [](const Inputs& x) {
        return embedding(tensor({{1, 3}, {1, 0}}), x[0]);
      },
      rand64({4, 3}, 10));  // id 1 repeats: scatter-add
  GRADCHECK(
      [](const Inputs& x) {
        return dropout_with_mask(x[0], tensor({{2.0, 0.0, 2.0}, {0.0, 2.0, 2.0}}, DType::Float64));
      },
      rand64({2, 3}, 11));
}

TEST_CASE("gradcheck: views") {
  GRADCHECK([](const Inputs& x) { return x[0].view({3, 2}); }, rand64({2, 3}, 1));
  GRADCHECK([](const Inputs& x) { return x[0].T().reshape({6}); }, rand64({2, 3}, 2));
  GRADCHECK([](const Inputs& x) { return x[0].transpose(0, 2); }, rand64({2, 3, 4}, 3));
  GRADCHECK([](const Inputs& x) { return x[0].permute({2, 0, 1}); }, rand64({2, 3, 4}, 4));
  GRADCHECK([](const Inputs& x) { return x[0].unsqueeze(1).squeeze(1); }, rand64({2, 3}, 5));
  GRADCHECK([](const Inputs& x) { return x[0].squeeze(); }, rand64({2, 1, 3}, 6));
  GRADCHECK([](const Inputs& x) { return x[0].narrow(1, 1, 2); }, rand64({2, 4}, 7));
  GRADCHECK([](const Inputs& x) { return x[0].slice(0, 1, 3) * x[0].slice(0, 0, 2); },
            rand64({3, 2}, 8));
  GRADCHECK([](const Inputs& x) { return x[0][1] + x[0].select(1, 0).sum(); }, rand64({3, 2}, 9));
  GRADCHECK([](const Inputs& x) { return x[0].flatten(1); }, rand64({2, 3, 2}, 10));
  GRADCHECK([](const Inputs& x) { return x[0].expand({4, 2, 3}); }, rand64({2, 1}, 11));
  GRADCHECK([](const Inputs& x) { return x[0].T().contiguous().clone(); }, rand64({2, 3}, 12));
}

TEST_CASE("gradcheck: a two-layer MLP") {
  GRADCHECK(
      [](const Inputs& x) {
        const Tensor h = linear(x[0], x[1], x[2]).tanh();
        return cross_entropy(linear(h, x[3], x[4]), tensor({1, 0, 2, 1}));
      },
      rand64({4, 3}, 1), rand64({5, 3}, 2), rand64({5}, 3), rand64({3, 5}, 4), rand64({3}, 5));
}

TEST_CASE("gradcheck: the chapter's causal scaled-dot-product attention, built from ops") {
  // x (b, T, d_in); W_query/W_key/W_value (d_in, d_out), as SelfAttention_v1 keeps them
  GRADCHECK(
      [](const Inputs& x) {
        const Tensor keys = matmul(x[0], x[2]);
        const Tensor queries = matmul(x[0], x[1]);
        const Tensor values = matmul(x[0], x[3]);
        Tensor attn_scores = matmul(queries, keys.transpose(1, 2));
        attn_scores.masked_fill_(kCausal, -std::numeric_limits<double>::infinity());
        const double d_k = double(keys.shape().back());
        const Tensor attn_weights = softmax(attn_scores / std::sqrt(d_k), -1);
        return matmul(attn_weights, values);
      },
      rand64({2, 4, 3}, 1), rand64({3, 2}, 2), rand64({3, 2}, 3), rand64({3, 2}, 4));
}

TEST_CASE("masked (-inf) positions get exactly zero gradient") {
  Tensor s = rand64({4, 4}, 5).requires_grad_();
  Tensor w = softmax(s.masked_fill(kCausal, -std::numeric_limits<double>::infinity()), -1);
  (w * tg::testing::reduction_weights({4, 4})).sum().backward();
  const auto g = s.grad().to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) CHECK(g[size_t(i * 4 + j)] == 0.0);
}

TEST_CASE("to(dtype) passes the gradient back in the input's dtype") {
  Tensor x = ones({3}).requires_grad_();
  (x.to(DType::Float64) * 2.0).sum().backward();
  CHECK(x.grad().dtype() == DType::Float32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
}
