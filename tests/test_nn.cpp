// nn/: Module bookkeeping, the layers, random creation and F.dropout, the book-internal
// equivalences (Exercise 3.1 and rasbt's test_mha_implementations.py idea), float64 gradient
// checks of every module, and the error messages.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/causal_attention.h"
#include "nn/causal_mask.h"
#include "nn/containers.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/mha_combined_qkv.h"
#include "nn/mha_einsum.h"
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"
#include "nn/notebook_ch03_mha.h"
#include "nn/sdpa_attention.h"
#include "nn/self_attention.h"
#include "nn/simple_attention.h"
#include "tests/gradcheck.h"

using namespace tg;
using tg::testing::gradcheck;
using tg::testing::rand64;

namespace {

std::vector<std::string> keys_of(const nn::NamedTensors& ts) {
  std::vector<std::string> k;
  for (const auto& [n, t] : ts) k.push_back(n);
  return k;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Gradcheck a module in float64: the input and every parameter are checked. The module's
// parameters are the gradcheck inputs themselves (same storage), so perturbing them perturbs the
// module. `before` runs ahead of every forward (e.g. to reseed a dropout generator).
void gradcheck_module(nn::Module& m, const Tensor& x, const std::function<void()>& before = {}) {
  m.to(DType::Float64);
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        if (before) before();
        return m(in[0]);
      },
      inputs);
  INFO(m.type_name() << ": " << r.report);
  CHECK(r.ok);
}

}  // namespace

// ---- random creation (core/ops/random.cpp) against docs/torch_rng.md §11 ----

TEST_CASE("rand, randn, uniform_ and normal_ draw as torch 1.13 (§11.2, §11.3)") {
  manual_seed(123);
  const auto r = rand({3, 2}).to_vector<float>();
  const std::vector<float> want = {0.29611194f, 0.51656228f, 0.25167072f,
                                   0.68855679f, 0.07397246f, 0.86652195f};
  CHECK(r == want);
  manual_seed(123);
  const auto r64 = rand({2}, nullptr, DType::Float64).to_vector<double>();
  CHECK(r64[0] == 0.368895870664273);
  CHECK(r64[1] == 0.013365949855291825);
  manual_seed(0);
  const auto n = randn({4}).to_vector<float>();         // scalar path (c)
  CHECK(std::bit_cast<uint32_t>(n[0]) == 0x3FC53F5Cu);  // 1.5409961
  CHECK(std::bit_cast<uint32_t>(n[3]) == 0x3F1184B6u);  // 0.5684313
  manual_seed(0);                                       // vectorised path (a): -1.1258398
  CHECK(std::bit_cast<uint32_t>(randn({16}).to_vector<float>()[0]) == 0xBF901B85u);
  // A private generator leaves the global one alone.
  Generator g(123);
  manual_seed(5);
  const float first_global = rand({1}).item<float>();
  manual_seed(5);
  CHECK(rand({3, 2}, &g).to_vector<float>() == want);
  CHECK(rand({1}).item<float>() == first_global);
  CHECK(rand_like(zeros({2, 2}, DType::Float64)).dtype() == DType::Float64);
  CHECK(randn_like(zeros({5})).shape() == Shape{5});
  CHECK_THROWS_WITH(rand({2}, nullptr, DType::Int64),
                    doctest::Contains("rand: expected a floating"));
  Tensor leaf = zeros({2}).requires_grad_(true);
  CHECK_THROWS_WITH(uniform_(leaf, 0, 1), doctest::Contains("NoGradGuard"));
  Tensor strided = zeros({3, 2}).T();
  CHECK_THROWS_WITH(normal_(strided), doctest::Contains("contiguous"));
}

// The core change this branch needed: float32 sums add in float in PyTorch's order (ilp-4
// partials, 4-level cascade, 8-lane vectors), so printed sums match torch's. Bits from torch
// 1.13.1, one thread: manual_seed(n); (torch.rand(n) - 0.5).sum().
TEST_CASE("float32 sum rounds as torch's (the notebook's Sum: tensor(1.0000))") {
  const std::vector<std::pair<int64_t, uint32_t>> want = {
      {1, 0x3e83e84a},     {6, 0x3ecf3dc2},     {7, 0xbf15d3d1},   {8, 0x3f41e8ab},
      {9, 0x3f944324},     {33, 0x3e60d1bc},    {257, 0x4055ce01}, {5000, 0x40cea425},
      {70001, 0xc23322c2}, {600000, 0x43b05643}};
  for (const auto& nb : want) {
    const int64_t n = nb.first;
    const uint32_t bits = nb.second;  // clang 14 cannot capture structured bindings
    CAPTURE(n);
    manual_seed(uint64_t(n));
    CHECK(std::bit_cast<uint32_t>((rand({n}) - 0.5).sum().item<float>()) == bits);
  }
  manual_seed(1);
  std::vector<uint32_t> rows;
  for (float v : (rand({5, 37}) - 0.5).sum(-1).to_vector<float>())
    rows.push_back(std::bit_cast<uint32_t>(v));
  CHECK(rows == std::vector<uint32_t>{0x3f130c32, 0x3f4f13bd, 0x3ecbefdc, 0x3ff40a9a, 0xbeafe41c});
  const Tensor s =
      tensor({0.954400063, 1.49500012, 1.47540009, 0.843400002, 0.707000017, 1.08650005});
  CHECK((s / s.sum()).sum().str() == "tensor(1.0000)");
}

TEST_CASE("F.dropout: masks, scaling, and the no-draw cases") {
  manual_seed(123);
  const Tensor y = tg::dropout(ones({6, 6}), 0.5);
  CHECK(y[0].to_vector<float>() == std::vector<float>{2, 2, 0, 2, 2, 0});
  CHECK(y.grad_fn_name().empty());  // ones() does not require grad
  // p == 0, eval mode, empty input: the input itself, nothing drawn.
  Generator g(7), fresh(7);
  const Tensor x = rand64({3, 4}, 1);
  CHECK(tg::dropout(x, 0.0, true, &g).same(x));
  CHECK(tg::dropout(x, 0.7, false, &g).same(x));
  CHECK(tg::dropout(zeros({0}), 0.5, true, &g).numel() == 0);
  CHECK(rand({4}, &g).to_vector<float>() == rand({4}, &fresh).to_vector<float>());
  // p == 1: all zeros, still a product on the tape; no draws either.
  Tensor leaf = rand64({2, 2}, 2);
  leaf.requires_grad_(true);
  const Tensor z = tg::dropout(leaf, 1.0, true, &g);
  CHECK(z.to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(z.grad_fn_name() == "MulBackward0");
  CHECK(rand({4}, &g).to_vector<float>() == rand({4}, &fresh).to_vector<float>());
  // float64: kept elements are scaled by 1/(1-p) in double, the same elements as in float32.
  Generator g1(3), g2(3);
  const auto d64 = tg::dropout(ones({50}, DType::Float64), 0.3, true, &g1).to_vector<double>();
  const auto d32 = tg::dropout(ones({50}), 0.3, true, &g2).to_vector<float>();
  for (size_t i = 0; i < d64.size(); ++i) {
    CHECK((d64[i] == 0) == (d32[i] == 0));
    if (d64[i] != 0) CHECK(d64[i] == 1.0 / 0.7);
  }
  CHECK_THROWS_WITH(tg::dropout(x, 1.5), doctest::Contains("between 0 and 1, but got 1.5"));
  CHECK_THROWS_WITH(nn::Dropout(-0.1), doctest::Contains("between 0 and 1, but got -0.1"));
}

// ---- Module bookkeeping ----

TEST_CASE("Module: state_dict names and order follow PyTorch") {
  nn::MultiHeadAttentionWrapper w(3, 2, 6, 0.0, 2, /*qkv_bias=*/true);
  CHECK(keys_of(w.state_dict()) ==
        std::vector<std::string>{"heads.0.mask", "heads.0.W_query.weight", "heads.0.W_query.bias",
                                 "heads.0.W_key.weight", "heads.0.W_key.bias",
                                 "heads.0.W_value.weight", "heads.0.W_value.bias", "heads.1.mask",
                                 "heads.1.W_query.weight", "heads.1.W_query.bias",
                                 "heads.1.W_key.weight", "heads.1.W_key.bias",
                                 "heads.1.W_value.weight", "heads.1.W_value.bias"});
  CHECK(keys_of(w.named_buffers()) == std::vector<std::string>{"heads.0.mask", "heads.1.mask"});
  CHECK(w.named_parameters().size() == 12);
  CHECK(w.num_parameters() == 2 * 3 * (3 * 2 + 2));

  nn::MultiHeadAttention mha(768, 768, 1024, 0.1, 12);
  CHECK(keys_of(mha.named_parameters()) ==
        std::vector<std::string>{"W_query.weight", "W_key.weight", "W_value.weight",
                                 "out_proj.weight", "out_proj.bias"});
  CHECK(mha.num_parameters() == 3 * 768 * 768 + 768 * 768 + 768);  // 2,360,064 as in the book
  CHECK(mha.head_dim == 64);
  for (const Tensor& p : mha.parameters()) CHECK(p.requires_grad());
  CHECK_FALSE(mha.mask.requires_grad());
  CHECK(mha.mask.shape() == Shape{1024, 1024});

  nn::SelfAttention_v1 v1(3, 2);
  CHECK(keys_of(v1.state_dict()) == std::vector<std::string>{"W_query", "W_key", "W_value"});
}

TEST_CASE("Module: train/eval reach every child; zero_grad; to(); load_state_dict") {
  nn::MultiHeadAttentionWrapper w(3, 2, 6, 0.5, 2);
  CHECK(w.is_training());
  CHECK(w.head(1).dropout->is_training());
  w.eval();
  CHECK_FALSE(w.head(1).dropout->is_training());
  // In eval mode dropout is the identity: two calls agree.
  const Tensor batch = rand({2, 6, 3});
  CHECK(max_abs_diff(w(batch), w(batch)) == 0);
  w.train();
  CHECK(w.head(0).dropout->is_training());

  nn::Linear lin(3, 2);
  const Tensor y = lin(rand({4, 3}));
  y.sum().backward();
  CHECK(lin.weight.grad().defined());
  lin.zero_grad();
  CHECK_FALSE(lin.weight.grad().defined());
  CHECK_FALSE(lin.bias.grad().defined());

  lin.to(DType::Float64);
  CHECK(lin.weight.dtype() == DType::Float64);
  CHECK(lin.parameters()[0].same(lin.weight));  // registry and member stay one tensor
  CHECK(lin.weight.requires_grad());

  nn::Linear other(3, 2);
  nn::NamedTensors sd = other.state_dict();
  lin.load_state_dict(sd);
  CHECK(max_abs_diff(lin.weight, other.weight) == 0);
  CHECK(lin.weight.dtype() == DType::Float64);  // copied into the existing tensor
  CHECK_THROWS_WITH(lin.load_state_dict({{"weight", other.weight}}),
                    doctest::Contains("missing key 'bias'"));
  sd.emplace_back("extra", zeros({1}));
  CHECK_THROWS_WITH(lin.load_state_dict(sd), doctest::Contains("unexpected key 'extra'"));
  CHECK_THROWS_WITH(lin.load_state_dict({{"weight", zeros({2, 4})}, {"bias", zeros({2})}}),
                    doctest::Contains("'weight' has shape [2, 4], the module expects [2, 3]"));

  nn::ModuleList list;
  CHECK_THROWS_WITH(list(zeros({1})), doctest::Contains("ModuleList: has no forward"));
}

TEST_CASE("Linear and Embedding draw PyTorch's initialisation (§11.4)") {
  manual_seed(123);
  nn::Linear lin(3, 2);
  const std::vector<float> w = {-0.23542964f, 0.019124476f, -0.28674594f,
                                0.21772662f,  -0.49193421f, 0.42322308f};
  CHECK(lin.weight.to_vector<float>() == w);
  CHECK(lin.bias.to_vector<float>() == std::vector<float>{-0.41964141f, -0.45901766f});
  CHECK(lin.weight.shape() == Shape{2, 3});  // (out_features, in_features)
  nn::Linear nobias(3, 2, false);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
  CHECK_THROWS_WITH(lin(zeros({4, 5})), doctest::Contains("expected input (*, 3), got [4, 5]"));

  // Embedding: normal_(0, 1), which is randn's draw; ids pick rows.
  manual_seed(0);
  nn::Embedding emb(10, 4);
  manual_seed(0);
  CHECK(emb.weight.to_vector<float>() == randn({10, 4}).to_vector<float>());
  const Tensor ids = tensor({{1, 3}, {0, 9}});
  const Tensor e = emb(ids);
  CHECK(e.shape() == Shape{2, 2, 4});
  CHECK(max_abs_diff(e[1][1], emb.weight[9]) == 0);
  CHECK_THROWS_WITH(emb(zeros({2})), doctest::Contains("expected int64 token ids"));
}

TEST_CASE("LayerNorm (book's), GELU and Sequential") {
  nn::LayerNorm ln(5);
  CHECK(keys_of(ln.state_dict()) == std::vector<std::string>{"scale", "shift"});
  const Tensor x = rand64({3, 5}, 4, -2, 3);
  ln.to(DType::Float64);
  const Tensor y = ln(x);
  // Each row: mean 0 and biased variance 1 - eps/(var + eps) ~ 1.
  for (double m : y.mean(-1).to_vector<double>()) CHECK(std::abs(m) < 1e-12);
  for (double v : y.var(-1, false).to_vector<double>()) CHECK(std::abs(v - 1) < 1e-4);
  CHECK_THROWS_WITH(ln(zeros({2, 4}, DType::Float64)),
                    doctest::Contains("LayerNorm(5): expected input (*, 5), got [2, 4]"));

  nn::GELU act;
  const auto g = act(tensor({-1.0, 0.0, 1.0}, DType::Float64)).to_vector<double>();
  const double c = std::sqrt(2.0 / M_PI);
  CHECK(g[0] == doctest::Approx(-0.5 * (1 + std::tanh(c * (-1 - 0.044715)))));
  CHECK(g[1] == 0);
  CHECK(g[2] == doctest::Approx(0.5 * (1 + std::tanh(c * (1 + 0.044715)))));

  manual_seed(0);
  auto l1 = std::make_shared<nn::Linear>(3, 4);
  auto l2 = std::make_shared<nn::Linear>(4, 2);
  nn::Sequential seq({l1, std::make_shared<nn::GELU>(), l2});
  CHECK(keys_of(seq.state_dict()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  const Tensor in = rand({5, 3});
  CHECK(max_abs_diff(seq(in), (*l2)(gelu((*l1)(in)))) == 0);
}

// ---- §3.3 helpers ----

TEST_CASE("softmax_naive overflows where the stable form does not") {
  const Tensor s = tensor({0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865});
  CHECK(max_abs_diff(nn::softmax_naive(s), softmax(s, 0)) < 1e-7);
  CHECK(max_abs_diff(nn::softmax_stable(s, 0), softmax(s, 0)) < 1e-7);
  const Tensor big = tensor({100.0, 101.0, 102.0});  // exp(100) overflows float32
  CHECK(std::isnan(nn::softmax_naive(big).to_vector<float>()[0]));
  CHECK(max_abs_diff(nn::softmax_stable(big, 0), softmax(big, 0)) < 1e-7);
  CHECK(max_abs_diff(nn::attention_scores_loop(s.reshape({2, 3})),
                     matmul(s.reshape({2, 3}), s.reshape({2, 3}).T())) < 1e-6);
  CHECK_THROWS_WITH(nn::simple_self_attention(zeros({3})),
                    doctest::Contains("simple_self_attention: expected inputs (num_tokens, d_in)"));
  CHECK_THROWS_WITH(nn::attention_scores_for_query(zeros({3, 2}), zeros({3})),
                    doctest::Contains("must be a (d_in) vector"));
}

TEST_CASE("§3.5.1 both causal masks agree; future tokens have no influence") {
  const Tensor scores = rand64({5, 5}, 9);
  const Tensor a = nn::masked_simple_norm(softmax(scores, -1));
  const Tensor b = softmax(nn::mask_future_scores(scores), -1);
  CHECK(max_abs_diff(a, b) < 1e-12);
  for (double v : b.triu(1).to_vector<double>()) CHECK(v == 0);
  // CausalAttention: changing the last token changes only the last output row.
  manual_seed(1);
  nn::CausalAttention ca(3, 4, 6, 0.0);
  Tensor x = rand({1, 6, 3});
  const Tensor y1 = ca(x);
  Tensor x2 = x.clone();
  {
    NoGradGuard ng;
    x2[0][5].fill_(9.0);
  }
  const Tensor y2 = ca(x2);
  CHECK(max_abs_diff(y1[0].slice(0, 0, 5), y2[0].slice(0, 0, 5)) == 0);
  CHECK(max_abs_diff(y1[0][5], y2[0][5]) > 1e-3);
  // Fewer tokens than context_length: the mask is cut to num_tokens.
  CHECK(max_abs_diff(ca(x.slice(1, 0, 4)), y1.slice(1, 0, 4)) < 1e-6);
}

// ---- book-internal equivalences ----

TEST_CASE("Exercise 3.1: SelfAttention_v1 equals v2 with W = Linear.weight.T") {
  manual_seed(789);
  nn::SelfAttention_v2 v2(3, 2);
  nn::SelfAttention_v1 v1(3, 2);
  {
    NoGradGuard ng;
    v1.W_query.copy_(v2.W_query->weight.T());
    v1.W_key.copy_(v2.W_key->weight.T());
    v1.W_value.copy_(v2.W_value->weight.T());
  }
  const Tensor x = rand({6, 3});
  CHECK(max_abs_diff(v1(x), v2(x)) < 1e-6);
}

TEST_CASE("CausalAttention equals MultiHeadAttentionWrapper with one head (same seed)") {
  const Tensor x = rand({2, 5, 3});
  manual_seed(42);
  nn::CausalAttention ca(3, 4, 5, 0.0, true);
  manual_seed(42);
  nn::MultiHeadAttentionWrapper w(3, 4, 5, 0.0, 1, true);
  CHECK(max_abs_diff(ca(x), w(x)) == 0);
  // With dropout too: the same draws from the same seed.
  manual_seed(43);
  nn::CausalAttention cad(3, 4, 5, 0.3);
  manual_seed(43);
  nn::MultiHeadAttentionWrapper wd(3, 4, 5, 0.3, 1);
  manual_seed(44);
  const Tensor a = cad(x);
  manual_seed(44);
  CHECK(max_abs_diff(a, wd(x)) == 0);
}

TEST_CASE("MultiHeadAttention equals the wrapper: stacked head weights, identity out_proj") {
  for (int64_t num_heads : {1, 2, 3}) {
    CAPTURE(num_heads);
    const int64_t d_in = 5, head_dim = 2, d_out = num_heads * head_dim, T = 4;
    manual_seed(100 + uint64_t(num_heads));
    nn::MultiHeadAttentionWrapper w(d_in, head_dim, T, 0.0, num_heads, true);
    nn::MultiHeadAttention mha(d_in, d_out, T, 0.0, num_heads, true);
    {
      NoGradGuard ng;
      auto stack_rows = [&](auto pick) {
        std::vector<Tensor> parts;
        for (int64_t h = 0; h < num_heads; ++h) parts.push_back(pick(w.head(size_t(h))));
        return cat(parts, 0);
      };
      mha.W_query->weight.copy_(stack_rows([](auto& h) { return h.W_query->weight; }));
      mha.W_key->weight.copy_(stack_rows([](auto& h) { return h.W_key->weight; }));
      mha.W_value->weight.copy_(stack_rows([](auto& h) { return h.W_value->weight; }));
      mha.W_query->bias.copy_(stack_rows([](auto& h) { return h.W_query->bias; }));
      mha.W_key->bias.copy_(stack_rows([](auto& h) { return h.W_key->bias; }));
      mha.W_value->bias.copy_(stack_rows([](auto& h) { return h.W_value->bias; }));
      Tensor eye = zeros({d_out, d_out});
      for (int64_t i = 0; i < d_out; ++i) eye[i][i].fill_(1.0);
      mha.out_proj->weight.copy_(eye);
      mha.out_proj->bias.zero_();
    }
    const Tensor x = rand({3, T, d_in});
    CHECK(max_abs_diff(mha(x), w(x)) < 1e-6);
  }
}

// ---- the scaled_dot_product_attention route (nn/sdpa_attention.h) ----

// max |a − b| over max |b|, or over 0.1 when b is smaller: the key bias's gradient is 0 up to
// rounding (softmax ignores a shift shared by a whole row), and its noise is not an error.
double rel_diff(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a, b) / std::max(0.1, max_abs_diff(b, zeros_like(b)));
}

TEST_CASE("MultiHeadAttentionSDPA is the book's MultiHeadAttention: weights, dropout, gradients") {
  for (double p : {0.0, 0.3}) {
    CAPTURE(p);
    manual_seed(11);
    nn::MultiHeadAttention book(5, 6, 9, p, 3, true);
    manual_seed(11);
    nn::MultiHeadAttentionSDPA fused(5, 6, 9, p, 3, true);
    CHECK(keys_of(fused.state_dict()) == keys_of(book.state_dict()));
    for (size_t i = 0; i < book.state_dict().size(); ++i)
      CHECK(max_abs_diff(fused.state_dict()[i].second, book.state_dict()[i].second) == 0);
    const Tensor x = rand({2, 9, 5});
    Tensor outs[2];
    double next[2];
    for (int route = 0; route < 2; ++route) {
      nn::Module& m = route == 0 ? static_cast<nn::Module&>(book) : fused;
      manual_seed(99);  // the dropout masks: the same draws on both routes
      outs[route] = m(x);
      next[route] = rand({1}).item<double>();
      (outs[route] * outs[route]).sum().backward();
    }
    CHECK(next[0] == next[1]);
    CHECK(rel_diff(outs[1], outs[0]) < 1e-5);
    const auto bp = book.named_parameters(), fp = fused.named_parameters();
    for (size_t i = 0; i < bp.size(); ++i) {
      CAPTURE(bp[i].first);
      CHECK(rel_diff(fp[i].second.grad(), bp[i].second.grad()) < 1e-5);
    }
  }
}

TEST_CASE(
    "MHAPyTorchScaledDotProduct equals MultiHeadAttention with qkv = [W_query; W_key; "
    "W_value]") {
  manual_seed(3);
  nn::MultiHeadAttention mha(4, 6, 7, 0.0, 2, true);
  nn::MHAPyTorchScaledDotProduct sdpa(4, 6, 2, 7, 0.0, true);
  {
    NoGradGuard ng;
    sdpa.qkv->weight.copy_(cat({mha.W_query->weight, mha.W_key->weight, mha.W_value->weight}, 0));
    sdpa.qkv->bias.copy_(cat({mha.W_query->bias, mha.W_key->bias, mha.W_value->bias}, 0));
    sdpa.proj->weight.copy_(mha.out_proj->weight);
    sdpa.proj->bias.copy_(mha.out_proj->bias);
  }
  const Tensor x = rand({3, 7, 4});
  CHECK(rel_diff(sdpa(x), mha(x)) < 1e-5);
  CHECK(rel_diff(sdpa(x.slice(1, 0, 4)), mha(x.slice(1, 0, 4))) < 1e-5);  // fewer tokens
}

// The book's tests/test_mha_implementations.py (test_mha_einsum_matches_ch03): Ch03_MHA (the
// chapter's MultiHeadAttention) and MHAEinsum agree once MHAEinsum holds W_query.weight.T (and
// the rest), at the test's own sizes and seeds.
TEST_CASE("MHAEinsum equals MultiHeadAttention with copied weights (the book's test)") {
  struct Row {
    int64_t d_in, d_out, batch, seq_len, num_heads;
    uint64_t seed;
  };
  for (const Row& r : {Row{768, 768, 2, 4, 12, 123}, Row{768, 1536, 2, 4, 12, 456},
                       Row{1024, 512, 2, 4, 8, 789}}) {
    INFO("d_in " << r.d_in << ", d_out " << r.d_out << ", num_heads " << r.num_heads);
    manual_seed(r.seed);
    const Tensor x = randn({r.batch, r.seq_len, r.d_in});
    nn::MultiHeadAttention mha_linear(r.d_in, r.d_out, r.seq_len, 0.0, r.num_heads);
    nn::MHAEinsum mha_einsum(r.d_in, r.d_out, r.seq_len, 0.0, r.num_heads);
    mha_linear.eval();
    mha_einsum.eval();
    {
      NoGradGuard ng;
      mha_einsum.W_query.copy_(mha_linear.W_query->weight.T());
      mha_einsum.W_key.copy_(mha_linear.W_key->weight.T());
      mha_einsum.W_value.copy_(mha_linear.W_value->weight.T());
      mha_einsum.out_proj->weight.copy_(mha_linear.out_proj->weight);
      mha_einsum.out_proj->bias.copy_(mha_linear.out_proj->bias);
    }
    const Tensor out_linear = mha_linear(x), out_einsum = mha_einsum(x);
    REQUIRE(out_einsum.shape() == Shape{r.batch, r.seq_len, r.d_out});
    REQUIRE(out_linear.shape() == out_einsum.shape());
    const auto a = out_linear.to_vector<float>(), b = out_einsum.to_vector<float>();
    double maxdiff = 0;
    for (size_t i = 0; i < a.size(); ++i)
      maxdiff = std::max(maxdiff, double(std::abs(a[i] - b[i])));
    CHECK(maxdiff <= 1e-5);  // torch.allclose(out_linear, out_einsum, atol=1e-5)
  }
}

// ---- float64 gradient checks: every module, input and parameters ----

TEST_CASE("gradcheck: Linear, Embedding, LayerNorm, GELU, Sequential") {
  nn::Linear lin(4, 3);
  gradcheck_module(lin, rand64({2, 5, 4}, 1));
  nn::LayerNorm ln(4);
  {  // non-trivial scale and shift
    NoGradGuard ng;
    ln.scale.copy_(tensor({0.5, 1.5, -1.0, 2.0}));
    ln.shift.copy_(tensor({0.1, -0.2, 0.3, 0.0}));
  }
  gradcheck_module(ln, rand64({3, 4}, 2, -2, 2));
  nn::GELU act;
  gradcheck_module(act, rand64({7}, 3, -3, 3));
  nn::Sequential seq({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::GELU>(),
                      std::make_shared<nn::Linear>(4, 2)});
  gradcheck_module(seq, rand64({2, 3}, 4));
  // Embedding: the gradient reaches the weight rows the ids picked (a repeated id accumulates).
  nn::Embedding emb(6, 3);
  emb.to(DType::Float64);
  const Tensor ids = tensor({{1, 4}, {1, 0}});
  auto r = gradcheck([&](const std::vector<Tensor>&) { return emb(ids); }, {emb.weight});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("gradcheck: SelfAttention_v1, SelfAttention_v2, CausalAttention") {
  nn::SelfAttention_v1 v1(3, 2);
  gradcheck_module(v1, rand64({6, 3}, 5));
  nn::SelfAttention_v2 v2(3, 4, true);
  gradcheck_module(v2, rand64({5, 3}, 6));
  nn::CausalAttention ca(3, 2, 6, 0.0, true);
  gradcheck_module(ca, rand64({2, 6, 3}, 7));
  nn::CausalAttention shorter(3, 2, 8, 0.0);
  gradcheck_module(shorter, rand64({2, 5, 3}, 8));
}

TEST_CASE("gradcheck: MultiHeadAttentionWrapper and MultiHeadAttention, also with dropout") {
  nn::MultiHeadAttentionWrapper w(3, 2, 5, 0.0, 2, true);
  gradcheck_module(w, rand64({2, 5, 3}, 9));
  nn::MultiHeadAttention mha(3, 4, 5, 0.0, 2, true);
  gradcheck_module(mha, rand64({2, 5, 3}, 10));
  // Dropout 0.5 with a fixed mask: reseed the dropout generator before every forward.
  Generator g(0);
  nn::MultiHeadAttention mhd(4, 6, 4, 0.5, 3);
  mhd.dropout->gen = &g;
  gradcheck_module(mhd, rand64({2, 4, 4}, 11), [&] { g.manual_seed(2024); });
  nn::MultiHeadAttentionWrapper wd(4, 2, 4, 0.5, 2);
  for (size_t h = 0; h < 2; ++h) wd.head(h).dropout->gen = &g;
  gradcheck_module(wd, rand64({1, 4, 4}, 12), [&] { g.manual_seed(7); });
}

TEST_CASE("gradcheck: MultiHeadAttentionSDPA and MHAPyTorchScaledDotProduct, also with dropout") {
  nn::MultiHeadAttentionSDPA mha(3, 4, 5, 0.0, 2, true);
  gradcheck_module(mha, rand64({2, 5, 3}, 13));
  Generator g(0);
  nn::MultiHeadAttentionSDPA mhd(4, 6, 4, 0.5, 3);
  mhd.dropout->gen = &g;
  gradcheck_module(mhd, rand64({2, 4, 4}, 14), [&] { g.manual_seed(2024); });
  nn::MHAPyTorchScaledDotProduct sd(3, 4, 2, 5, 0.4, true, &g);
  gradcheck_module(sd, rand64({2, 5, 3}, 15), [&] { g.manual_seed(5); });
}

TEST_CASE("gradcheck: MHAEinsum, with and without qkv_bias, also with dropout") {
  nn::MHAEinsum plain(3, 4, 5, 0.0, 2);
  gradcheck_module(plain, rand64({2, 5, 3}, 16));
  nn::MHAEinsum biased(4, 6, 6, 0.0, 3, true);
  gradcheck_module(biased, rand64({2, 4, 4}, 17));  // fewer tokens than context_length
  Generator g(0);
  nn::MHAEinsum dropped(3, 4, 5, 0.5, 2, true, &g);
  gradcheck_module(dropped, rand64({2, 5, 3}, 18), [&] { g.manual_seed(11); });
}

TEST_CASE("gradcheck: the notebook's Ch03_MHA_Wrapper, combined QKV and SDPA without flash") {
  Generator g(0);
  const auto reseed = [&] { g.manual_seed(3); };
  nn::Ch03_MHA_Wrapper wrapper(3, 2, 5, 0.0, 2, true);
  gradcheck_module(wrapper, rand64({2, 5, 3}, 19));
  nn::Ch03_MHA_Wrapper wrapper_dropped(4, 2, 4, 0.5, 2, false, &g);
  gradcheck_module(wrapper_dropped, rand64({1, 4, 4}, 20), reseed);
  nn::MultiHeadAttentionCombinedQKV combined(4, 4, 2, 5, 0.0, true);
  gradcheck_module(combined, rand64({2, 3, 4}, 21));  // fewer tokens than context_length
  nn::MultiHeadAttentionCombinedQKV combined_dropped(4, 4, 2, 5, 0.5, true, &g);
  gradcheck_module(combined_dropped, rand64({2, 5, 4}, 22), reseed);
  // The last token's row reaches no key: its zero context must differentiate to zero too.
  nn::MHAPyTorchSDPAWithoutFlash no_flash(3, 4, 2, 5, 0.0, true);
  gradcheck_module(no_flash, rand64({2, 5, 3}, 23));
  nn::MHAPyTorchSDPAWithoutFlash no_flash_dropped(3, 4, 2, 5, 0.4, false, &g);
  gradcheck_module(no_flash_dropped, rand64({2, 4, 3}, 24), reseed);
}

// ---- errors: the book's assert and clear shape messages ----

TEST_CASE("errors name the module, the expectation and the shape") {
  CHECK_THROWS_WITH(nn::MultiHeadAttention(3, 3, 6, 0.0, 2),
                    "MultiHeadAttention: d_out must be divisible by num_heads (d_out=3, "
                    "num_heads=2)");
  CHECK_THROWS_WITH(nn::MultiHeadAttention(3, 4, 6, 0.0, 0),
                    doctest::Contains("num_heads must be >= 1"));
  CHECK_THROWS_WITH(nn::MultiHeadAttentionWrapper(3, 4, 6, 0.0, 0),
                    doctest::Contains("num_heads must be >= 1"));
  CHECK_THROWS_WITH(nn::MultiHeadAttention(3, 4, -1, 0.0, 2),
                    "MultiHeadAttention: context_length must be >= 1, got -1");
  CHECK_THROWS_WITH(nn::MultiHeadAttentionWrapper(3, 4, 0, 0.0, 2),
                    "MultiHeadAttentionWrapper: context_length must be >= 1, got 0");
  CHECK_THROWS_WITH(nn::CausalAttention(3, 4, -5, 0.0),
                    "CausalAttention: context_length must be >= 1, got -5");
  CHECK_THROWS_WITH(nn::MHAPyTorchScaledDotProduct(3, 4, 2, -1),
                    "MHAPyTorchScaledDotProduct: context_length must be >= 1, got -1");
  CHECK_THROWS_WITH(nn::MHAPyTorchScaledDotProduct(3, 3, 2, 6),
                    "MHAPyTorchScaledDotProduct: d_out is indivisible by num_heads (d_out=3, "
                    "num_heads=2)");
  CHECK_THROWS_WITH(nn::MHAPyTorchScaledDotProduct(3, 4, 2, 6, 1.5),
                    "MHAPyTorchScaledDotProduct: dropout must be in [0, 1], got 1.500000");
  CHECK_THROWS_WITH(nn::MHAEinsum(3, 3, 6, 0.0, 2),
                    "MHAEinsum: d_out must be divisible by num_heads (d_out=3, num_heads=2)");
  CHECK_THROWS_WITH(nn::MHAEinsum(3, 4, 0, 0.0, 2),
                    "MHAEinsum: context_length must be >= 1, got 0");
  nn::MHAEinsum me(3, 4, 6, 0.0, 2);
  CHECK_THROWS_WITH(me(zeros({2, 6, 4})),
                    "MHAEinsum: input (b, num_tokens, d_in) of shape [2, 6, 4] has d_in = 4, but "
                    "the module was built with d_in = 3");
  CHECK_THROWS_WITH(me(zeros({2, 7, 3})),
                    "MHAEinsum: input (b, num_tokens, d_in) of shape [2, 7, 3] has num_tokens = "
                    "7, more than context_length = 6 (the causal mask is 6x6)");
  nn::MHAPyTorchScaledDotProduct sd(3, 4, 2, 6);
  CHECK_THROWS_WITH(sd(zeros({2, 7, 3})),
                    "MHAPyTorchScaledDotProduct: input (b, num_tokens, d_in) of shape [2, 7, 3] "
                    "has num_tokens = 7, more than context_length = 6 (the causal mask is 6x6)");
  nn::MultiHeadAttentionSDPA ms(3, 4, 6, 0.0, 2);
  CHECK_THROWS_WITH(ms(zeros({2, 6, 4})),
                    "MultiHeadAttention: input (b, num_tokens, d_in) of shape [2, 6, 4] has d_in = "
                    "4, but the module was built with d_in = 3");
  nn::CausalAttention ca(3, 2, 6, 0.0);
  CHECK_THROWS_WITH(ca(zeros({2, 7, 3})),
                    "CausalAttention: input (b, num_tokens, d_in) of shape [2, 7, 3] has "
                    "num_tokens = 7, more than context_length = 6 (the causal mask is 6x6)");
  CHECK_THROWS_WITH(ca(zeros({6, 3})),
                    "CausalAttention: expected a 3-D input (b, num_tokens, d_in) with d_in = 3, "
                    "got a 2-D tensor of shape [6, 3]");
  CHECK_THROWS_WITH(ca(zeros({2, 6, 4})),
                    "CausalAttention: input (b, num_tokens, d_in) of shape [2, 6, 4] has d_in = "
                    "4, but the module was built with d_in = 3");
  nn::MultiHeadAttention mha(3, 4, 6, 0.0, 2);
  CHECK_THROWS_WITH(
      mha(zeros({1, 8, 3})),
      doctest::Contains("MultiHeadAttention: input (b, num_tokens, d_in) of shape "
                        "[1, 8, 3] has num_tokens = 8, more than context_length = 6"));
  CHECK_THROWS_WITH(mha(zeros({1, 6})), doctest::Contains("MultiHeadAttention: expected a 3-D"));
  nn::MultiHeadAttentionWrapper w(3, 2, 6, 0.0, 2);
  CHECK_THROWS_WITH(w(zeros({1, 6, 5})), doctest::Contains("MultiHeadAttentionWrapper: input"));
  nn::SelfAttention_v1 v1(3, 2);
  CHECK_THROWS_WITH(v1(zeros({2, 6, 3})),
                    "SelfAttention_v1: expected a 2-D input (num_tokens, d_in) with d_in = 3, got "
                    "a 3-D tensor of shape [2, 6, 3]");
  nn::SelfAttention_v2 v2(3, 2);
  CHECK_THROWS_WITH(v2(zeros({6, 2})), doctest::Contains("has d_in = 2, but the module was built "
                                                         "with d_in = 3"));
}
