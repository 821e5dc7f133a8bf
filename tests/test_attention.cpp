// tg::scaled_dot_product_attention (core/ops/attention.cpp): float64 gradient checks (the
// reference path), float32 against the book's composite formula (the fused kernel), dropout
// decisions equal to the composite's for the same seed, rows no key reaches, the result's layout,
// thread-count bit-identity, and every error message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "tests/gradcheck.h"

using namespace tg;
using tg::testing::gradcheck;
using tg::testing::rand64;
using Inputs = std::vector<Tensor>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The book's formula (§3.5): scores, the causal mask by masked_fill, softmax of the scaled
// scores, dropout, weights times values. `keep` (bool, True takes part) or `add` (additive) mask.
Tensor book_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const Tensor& keep = Tensor(), const Tensor& add = Tensor(), double p = 0,
                      Generator* gen = nullptr) {
  Tensor s = matmul(q, k.transpose(-2, -1));
  const int64_t L = q.size(-2), S = k.size(-2);
  if (causal) s = s.masked_fill(triu(ones({L, S}), 1).to(DType::Bool), -kInf);
  Tensor x = s / std::sqrt(double(q.size(-1)));
  if (keep.defined()) x = x.masked_fill(eq(keep.to(DType::Float32), 0.0), -kInf);
  if (add.defined()) x = x + add;
  return matmul(dropout(softmax(x, -1), p, true, gen), v);
}

// max |a − b| <= rel · max |b|: the fused float32 kernel against the composite, whose rounding
// differs (online softmax, another summation order).
void check_rel(const Tensor& a, const Tensor& b, double rel, const char* what) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to(DType::Float64).to_vector<double>();
  const std::vector<double> y = b.to(DType::Float64).to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  CHECK_MESSAGE(diff <= rel * scale, what << ": max diff " << diff << " vs max " << scale);
}

#define GRADCHECK_N(max_elements, f, ...)                                       \
  do {                                                                          \
    auto r = gradcheck(f, Inputs{__VA_ARGS__}, 1e-6, 1e-6, 1e-5, max_elements); \
    INFO(r.report);                                                             \
    CHECK(r.ok);                                                                \
  } while (0)

Tensor sdpa(const Inputs& x, bool causal) {
  return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, causal);
}

// A call the op refuses, and its message after "scaled_dot_product_attention: ".
struct Bad {
  std::function<Tensor()> call;
  std::string message;
};

void check_refusals(const std::vector<Bad>& cases) {
  for (const Bad& b : cases) {
    const std::string message = "scaled_dot_product_attention: " + b.message;
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(b.call(), message.c_str(), std::invalid_argument);
  }
}

}  // namespace

TEST_CASE("sdpa gradcheck (float64): causal and not, T at the block edges, E from 1 to 80") {
  // T in {1, 7, 64, 65, 129, 300} with small E, then E in {1, 8, 64, 80} with small T.
  const std::pair<int64_t, int64_t> te[] = {{1, 1},   {7, 3}, {64, 2}, {65, 2}, {129, 1},
                                            {300, 1}, {7, 1}, {7, 8},  {5, 64}, {4, 80}};
  for (const auto& [t, e] : te)
    for (bool causal : {false, true}) {
      const int64_t T = t, E = e;  // copies: clang 14's lambdas (CAPTURE) cannot name a binding
      CAPTURE(T);
      CAPTURE(E);
      CAPTURE(causal);
      const int64_t n = T * E > 200 ? 60 : 0;  // sample the large ones
      GRADCHECK_N(
          n, [causal](const Inputs& x) { return sdpa(x, causal); }, rand64({2, T, E}, 1),
          rand64({2, T, E}, 2), rand64({2, T, E + 1}, 3));
    }
}

TEST_CASE("sdpa gradcheck (float64): L != S, bool and additive masks, broadcast batch dims") {
  const Tensor keep = gt(rand64({5, 9}, 4), -0.5);  // about a quarter removed
  Tensor add = rand64({5, 9}, 5);
  add.masked_fill_(lt(rand64({5, 9}, 6), -0.6), -kInf);
  for (bool causal : {false, true})
    GRADCHECK_N(
        0, [causal](const Inputs& x) { return sdpa(x, causal); }, rand64({2, 5, 4}, 7),
        rand64({2, 9, 4}, 8), rand64({2, 9, 3}, 9));
  GRADCHECK_N(
      0, [&](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep); },
      rand64({2, 5, 4}, 10), rand64({2, 9, 4}, 11), rand64({2, 9, 3}, 12));
  GRADCHECK_N(
      0, [&](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], add); },
      rand64({2, 5, 4}, 13), rand64({2, 9, 4}, 14), rand64({2, 9, 3}, 15));
  // key and value shared by every batch entry and head: their gradients sum over them
  GRADCHECK_N(
      0, [](const Inputs& x) { return sdpa(x, true); }, rand64({2, 3, 6, 4}, 16),
      rand64({1, 1, 6, 4}, 17), rand64({3, 6, 2}, 18));
  // a mask that needs its own gradient takes the composite route
  GRADCHECK_N(
      0, [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
      rand64({2, 5, 4}, 19), rand64({2, 9, 4}, 20), rand64({2, 9, 3}, 21), rand64({5, 9}, 22));
  // broadcast masks that need their gradient, one with a row no key reaches (its gradient is 0)
  Tensor dead_row = zeros({5, 1}, DType::Float64);
  dead_row[3].fill_(-kInf);
  GRADCHECK_N(
      0,
      [&](const Inputs& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], x[3] + dead_row);
      },
      rand64({2, 5, 4}, 30), rand64({2, 9, 4}, 31), rand64({2, 9, 3}, 32), rand64({1, 9}, 33));
  GRADCHECK_N(
      0, [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
      rand64({2, 3, 5, 4}, 34), rand64({2, 3, 9, 4}, 35), rand64({2, 3, 9, 3}, 36),
      rand64({2, 1, 5, 1}, 37));
  // an explicit scale
  GRADCHECK_N(
      0,
      [](const Inputs& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, -0.7);
      },
      rand64({3, 4}, 23), rand64({3, 4}, 24), rand64({3, 2}, 25));
}

TEST_CASE("sdpa gradcheck (float64) with dropout: the same mask on every call") {
  Generator gen;
  GRADCHECK_N(
      0,
      [&gen](const Inputs& x) {
        gen.manual_seed(5);
        return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.3, true, {}, &gen);
      },
      rand64({2, 7, 4}, 26), rand64({2, 7, 4}, 27), rand64({2, 7, 3}, 28));
}

TEST_CASE("sdpa float32 equals the book's composite: forward and gradients, within 1e-5") {
  struct Case {
    Shape q, k, v;
    bool causal;
    int mask;  // 0 none, 1 bool, 2 additive
  };
  const Case cases[] = {
      {{2, 4, 64, 16}, {2, 4, 64, 16}, {2, 4, 64, 16}, true, 0},
      {{1, 3, 129, 64}, {1, 3, 129, 64}, {1, 3, 129, 64}, false, 0},
      {{2, 70, 8}, {2, 130, 8}, {2, 130, 24}, true, 0},
      {{2, 2, 65, 80}, {2, 2, 65, 80}, {2, 2, 65, 80}, false, 1},
      {{3, 300, 32}, {3, 300, 32}, {3, 300, 32}, false, 2},
  };
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.q));
    manual_seed(42);
    Tensor q = randn(c.q), k = randn(c.k), v = randn(c.v);
    const int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
    const Tensor keep = c.mask == 1 ? gt(rand({L, S}), 0.3) : Tensor();
    Tensor add = c.mask == 2 ? randn({L, S}) : Tensor();
    const Tensor w = randn(Shape(c.q.begin(), c.q.end() - 1)).unsqueeze(-1) * ones({c.v.back()});
    Tensor grads[2][3], outs[2];
    for (int route = 0; route < 2; ++route) {
      Tensor qq = q.detach(), kk = k.detach(), vv = v.detach();
      qq.requires_grad_(), kk.requires_grad_(), vv.requires_grad_();
      outs[route] = route == 0 ? scaled_dot_product_attention(qq, kk, vv, c.mask == 1 ? keep : add,
                                                              0.0, c.causal)
                               : book_attention(qq, kk, vv, c.causal, keep, add);
      (outs[route] * w).sum().backward();
      grads[route][0] = qq.grad(), grads[route][1] = kk.grad(), grads[route][2] = vv.grad();
    }
    check_rel(outs[0], outs[1], 1e-5, "out");
    check_rel(grads[0][0], grads[1][0], 1e-5, "dq");
    check_rel(grads[0][1], grads[1][1], 1e-5, "dk");
    check_rel(grads[0][2], grads[1][2], 1e-5, "dv");
  }
}

TEST_CASE("sdpa dropout: the composite's keep/drop decisions for the same seed, and its draws") {
  // With value = identity the output is the dropped attention weights themselves.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    manual_seed(7);
    const Tensor q = randn({2, 3, 33, 8}), k = randn({2, 3, 33, 8});
    const Tensor eye = tril(ones({33, 33})) - tril(ones({33, 33}), -1);
    manual_seed(123);
    const Tensor fused = scaled_dot_product_attention(q, k, eye, Tensor(), 0.4, causal);
    const double next_fused = rand({1}).item<double>();
    manual_seed(123);
    const Tensor book = book_attention(q, k, eye, causal, Tensor(), Tensor(), 0.4);
    const double next_book = rand({1}).item<double>();
    CHECK(next_fused == next_book);  // the same number of draws
    const std::vector<float> a = fused.contiguous().to_vector<float>(), b = book.to_vector<float>();
    int64_t zeros = 0, mismatched = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      zeros += b[i] == 0.f;
      mismatched += (a[i] == 0.f) != (b[i] == 0.f);
    }
    CHECK(mismatched == 0);
    CHECK(zeros > int64_t(a.size()) / 3);  // the pattern is not trivial
    check_rel(fused, book, 1e-5, "dropped weights");
  }
}

TEST_CASE("sdpa: a row that no key reaches gives 0 and zero gradients (PyTorch 2's math path)") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    manual_seed(3);
    Tensor q = randn({2, 4, 5}).to(dt), k = randn({2, 6, 5}).to(dt), v = randn({2, 6, 3}).to(dt);
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
    Tensor keep = ones({4, 6}, DType::Bool);
    keep[1].fill_(0);
    const Tensor out = scaled_dot_product_attention(q, k, v, keep);
    (out * out).sum().backward();
    for (int64_t b = 0; b < 2; ++b) {
      for (double x : out[b][1].to_vector<double>()) CHECK(x == 0);
      for (double x : q.grad()[b][1].to_vector<double>()) CHECK(x == 0);
      for (double x : out[b][0].to_vector<double>()) CHECK(std::isfinite(x));
    }
    for (double x : k.grad().to_vector<double>()) CHECK(std::isfinite(x));
  }
}

TEST_CASE("sdpa: a mask that needs its gradient, rows no key reaches: the fused route's values") {
  // The composite route (mask.requires_grad) against the fused one (the same mask without):
  // out 0 on the dead rows, equal finite gradients, and the mask's gradient 0 on those rows.
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Shape& ms : {Shape{4, 6}, Shape{4, 1}, Shape{2, 4, 1}}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(ms));
      manual_seed(8);
      const Tensor q0 = randn({2, 4, 5}).to(dt), k0 = randn({2, 6, 5}).to(dt),
                   v0 = randn({2, 6, 3}).to(dt);
      Tensor mask = randn(ms).to(dt);
      mask.narrow(-2, 1, 1).fill_(-kInf);  // query row 1: no key
      Tensor outs[2], grads[2][3];
      for (int route = 0; route < 2; ++route) {
        Tensor q = q0.detach(), k = k0.detach(), v = v0.detach(), m = mask.detach();
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), m.requires_grad_(route == 1);
        outs[route] = scaled_dot_product_attention(q, k, v, m);
        CHECK((outs[route].grad_fn_name() == "ScaledDotProductFlashAttentionForCpuBackward0") ==
              (route == 0));
        (outs[route] * outs[route]).sum().backward();
        grads[route][0] = q.grad(), grads[route][1] = k.grad(), grads[route][2] = v.grad();
        if (route == 0) continue;
        const Tensor dm = m.grad();
        REQUIRE(dm.shape() == ms);
        for (double x : dm.to_vector<double>()) CHECK(std::isfinite(x));
        for (double x : dm.narrow(-2, 1, 1).to_vector<double>()) CHECK(x == 0);
      }
      const double rel = dt == DType::Float32 ? 1e-5 : 1e-12;
      for (int i = 0; i < 3; ++i)
        for (double x : grads[1][i].to_vector<double>()) CHECK(std::isfinite(x));
      for (double x : outs[1].narrow(-2, 1, 1).to_vector<double>()) CHECK(x == 0);
      check_rel(outs[1], outs[0], rel, "out");
      check_rel(grads[1][0], grads[0][0], rel, "dq");
      check_rel(grads[1][1], grads[0][1], rel, "dk");
      check_rel(grads[1][2], grads[0][2], rel, "dv");
    }
  }
  // No key at all (S = 0): every row is 0 on both routes (the composite's max over the keys
  // threw "cannot reduce an empty dim"; found by fuzz/fuzz_attention.cpp)
  for (bool grad : {false, true}) {
    CAPTURE(grad);
    Tensor q = randn({2, 4, 5}), m = randn({4, 1});
    q.requires_grad_(), m.requires_grad_(grad);
    const Tensor out = scaled_dot_product_attention(q, zeros({2, 0, 5}), zeros({2, 0, 3}), m);
    REQUIRE(out.shape() == Shape{2, 4, 3});
    out.sum().backward();
    for (double x : out.to_vector<double>()) CHECK(x == 0);
    for (double x : q.grad().to_vector<double>()) CHECK(x == 0);
    if (grad) CHECK(m.grad().shape() == Shape{4, 1});
  }
}

TEST_CASE("sdpa: one node with PyTorch's name; the result laid out like the query") {
  manual_seed(1);
  Tensor x = randn({2, 7, 12});
  x.requires_grad_();
  // the chapter's MultiHeadAttention: heads split by view + transpose
  const Tensor q = x.view({2, 7, 3, 4}).transpose(1, 2);
  const Tensor out = scaled_dot_product_attention(q, q, q, Tensor(), 0.0, true);
  CHECK(out.grad_fn_name() == "ScaledDotProductFlashAttentionForCpuBackward0");
  CHECK(out.shape() == Shape{2, 3, 7, 4});
  CHECK(out.strides() == Shape{84, 4, 12, 1});  // as PyTorch 2.6's CPU flash kernel returns it
  const Tensor merged = out.transpose(1, 2).contiguous();
  CHECK(merged.impl()->storage == out.impl()->storage);  // merging the heads copies nothing
  CHECK(scaled_dot_product_attention(randn({2, 3, 7, 4}), randn({2, 3, 7, 4}), randn({2, 3, 7, 4}))
            .is_contiguous());
  // saved inputs modified in place before backward: PyTorch's version error
  Tensor a = randn({3, 4}), b = randn({3, 4});
  a.requires_grad_();
  Tensor bb = b.detach();
  const Tensor y = scaled_dot_product_attention(a, bb, bb);
  bb.add_(ones({3, 4}));
  CHECK_THROWS_WITH(y.sum().backward(), doctest::Contains("was modified by an in-place operation"));
}

TEST_CASE("sdpa is bit-identical for 1, 2 and 3 threads: causal or padding mask, with gradients") {
  const int before = num_threads();
  manual_seed(9);
  const Tensor q0 = randn({2, 6, 150, 64}), k0 = randn({2, 6, 150, 64}),
               v0 = randn({2, 6, 150, 64});
  const Tensor padding = gt(rand({2, 1, 1, 150}), 0.2);
  std::vector<std::vector<std::vector<float>>> first;
  for (int nt : {1, 2, 3}) {
    CAPTURE(nt);
    set_num_threads(nt);
    Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
    for (int masked = 0; masked < 2; ++masked) {  // causal, or a padding mask (B, 1, 1, S)
      manual_seed(4);
      const Tensor out =
          scaled_dot_product_attention(q, k, v, masked ? padding : Tensor(), 0.2, masked == 0);
      (out * out).sum().backward();
      const std::vector<std::vector<float>> now = {
          out.contiguous().to_vector<float>(), q.grad().contiguous().to_vector<float>(),
          k.grad().contiguous().to_vector<float>(), v.grad().contiguous().to_vector<float>()};
      q.zero_grad(), k.zero_grad(), v.zero_grad();
      if (first.size() <= size_t(masked)) first.push_back(now);
      for (size_t i = 0; i < now.size(); ++i)
        CHECK(std::memcmp(now[i].data(), first[size_t(masked)][i].data(), now[i].size() * 4) == 0);
    }
  }
  set_num_threads(before);
}

// The same values and gradients, for the kernel's view of the mask: the bool mask's -inf empties
// whole tiles, which the kernel skips (core/ops/attention.cpp: MaskTiles); -1e30 in their place
// empties none (every tile runs), and removes the same keys exactly (exp(-1e30 - m) is 0). Every
// row keeps keys, so both give the same softmax; == on the values (a skipped +0 may be a -0).
TEST_CASE("sdpa with a mask that empties whole tiles skips them and changes no value") {
  const kernels::AttnTileSize ts = kernels::sdpa_tile_size();
  const int64_t L = 4 * ts.br + 5, S = 4 * ts.bc + 3, E = 24;
  // Documents of 1.5 tiles' length (so tiles are empty, full or partial): rows and keys of the
  // same document take part.
  std::vector<float> same(size_t(L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j)
      same[size_t(i * S + j)] = i / (3 * ts.br / 2) == j / (3 * ts.bc / 2);
  const Tensor keep = gt(from_vector(same, {L, S}), 0.5);
  const Tensor far = where(keep, zeros({}), full({}, -1e30));
  manual_seed(5);
  const Tensor q0 = randn({2, 3, L, E}), k0 = randn({2, 3, S, E}), v0 = randn({2, 3, S, E});
  std::vector<std::vector<float>> got[2];
  for (int skip = 0; skip < 2; ++skip) {
    Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
    const Tensor out = scaled_dot_product_attention(q, k, v, skip ? keep : far);
    (out * out).sum().backward();
    got[skip] = {out.contiguous().to_vector<float>(), q.grad().contiguous().to_vector<float>(),
                 k.grad().contiguous().to_vector<float>(),
                 v.grad().contiguous().to_vector<float>()};
  }
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(got[0][i] == got[1][i]);
  }
  // And against the composite, which has no tiles.
  const Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
  check_rel(scaled_dot_product_attention(q, k, v, keep), book_attention(q, k, v, false, keep), 1e-5,
            "document mask");
}

TEST_CASE("sdpa errors: query, key and value (undefined, dtype, dims, shapes)") {
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  check_refusals({
      {[&] { return scaled_dot_product_attention(Tensor(), k, v); },
       "query is an undefined tensor"},
      {[&] { return scaled_dot_product_attention(q, k, Tensor()); },
       "value is an undefined tensor"},
      {[&] { return scaled_dot_product_attention(q, k.to(DType::Float64), v); },
       "query, key and value must have the same dtype, got torch.float32, torch.float64 and "
       "torch.float32"},
      {[&] { return scaled_dot_product_attention(q.to(DType::Int64), k, v); },
       "query must be a floating-point tensor, got torch.int64 [2, 5, 4]"},
      {[&] { return scaled_dot_product_attention(zeros({4}), zeros({4}), zeros({4})); },
       "query (..., L, E), key (..., S, E) and value (..., S, Ev) need at least 2 dims, got query "
       "[4], key [4], value [4]"},
      {[&] {
         return scaled_dot_product_attention(q, zeros({2, 6, 3}), v);
       },
       "query and key must have the same last dim E, got query [2, 5, 4], key [2, 6, 3], value [2, "
       "6, 3]"},
      {[&] {
         return scaled_dot_product_attention(q, k, zeros({2, 4, 3}));
       },
       "key and value must have the same number of rows S, got query [2, 5, 4], key [2, 6, 4], "
       "value [2, 4, 3]"},
      {[&] {
         return scaled_dot_product_attention(q, zeros({3, 6, 4}), zeros({3, 6, 3}));
       },
       "the leading dims of query, key and value do not broadcast, got query [2, 5, 4], key [3, 6, "
       "4], value [3, 6, 3]"},
  });
}

TEST_CASE("sdpa errors: attn_mask (with is_causal, shapes that do not broadcast, dtype)") {
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  check_refusals({
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({5, 6}), 0.0, true);
       },
       "an explicit attn_mask cannot be combined with is_causal=true"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({5, 7}));
       },
       "attn_mask of shape [5, 7] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({3, 5, 6}));
       },
       "attn_mask of shape [3, 5, 6] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({6, 5}));
       },
       "attn_mask of shape [6, 5] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] { return scaled_dot_product_attention(q, k, v, zeros({5})); },
       "attn_mask of shape [5] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({6, 1}, DType::Bool));
       },
       "attn_mask of shape [6, 1] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({1, 2, 5, 6}));
       },
       "attn_mask of shape [1, 2, 5, 6] does not broadcast to the attention weights' shape [2, 5, "
       "6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({2, 1, 1, 6}));
       },
       "attn_mask of shape [2, 1, 1, 6] does not broadcast to the attention weights' shape [2, 5, "
       "6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({0, 6}));
       },
       "attn_mask of shape [0, 6] does not broadcast to the attention weights' shape [2, 5, 6]"},
      {[&] {
         return scaled_dot_product_attention(zeros({2, 3, 5, 4}), zeros({2, 3, 6, 4}),
                                             zeros({2, 3, 6, 3}), zeros({3, 1, 1, 6}));
       },
       "attn_mask of shape [3, 1, 1, 6] does not broadcast to the attention weights' shape [2, 3, "
       "5, 6]"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({5, 6}, DType::Int64));
       },
       "attn_mask must be bool or have the query's dtype torch.float32, got torch.int64"},
      {[&] {
         return scaled_dot_product_attention(q, k, v, zeros({5, 6}, DType::Float64));
       },
       "attn_mask must be bool or have the query's dtype torch.float32, got torch.float64"},
  });
}

TEST_CASE("sdpa errors: dropout_p and scale") {
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  check_refusals({
      {[&] { return scaled_dot_product_attention(q, k, v, Tensor(), 1.5); },
       "dropout_p must be in [0, 1], got 1.5"},
      {[&] { return scaled_dot_product_attention(q, k, v, Tensor(), -0.1); },
       "dropout_p must be in [0, 1], got -0.1"},
      {[&] { return scaled_dot_product_attention(q, k, v, Tensor(), std::nan("")); },
       "dropout_p must be in [0, 1], got nan"},
      {[&] { return scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, kInf); },
       "scale must be finite, got inf"},
      {[&] {
         return scaled_dot_product_attention(zeros({2, 5, 0}), zeros({2, 6, 0}), v);
       },
       "query and key have E = 0, where the default scale 1/sqrt(E) is undefined (pass a scale)"},
  });
}
