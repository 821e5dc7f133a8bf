// nn::MultiheadAttention (torch.nn.MultiheadAttention) and the bonus notebook's MHAPyTorchClass
// against PyTorch 2.6 (tests/golden/gen_torch_mha.py -> torch_mha_torch2.txt): the weights each
// constructor draws (bit for bit, PyTorch's state_dict keys and order), attn_output, the attention
// weights, and the gradients of query, key, value and every parameter for
// loss = Σ output ⊙ loss_weights (+ Σ weights ⊙ loss_weights2), over the argument table.
// Then the mask conventions on their own, and the bad-argument messages.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "nn/mha_pytorch_class.h"
#include "nn/torch_multihead_attention.h"
#include "tests/golden_cases.h"
#include "tests/gradcheck.h"

using namespace tg;
using tg::testing::check_tensor;
using tg::testing::GoldenCase;
using tg::testing::load_goldens;

namespace {

constexpr double kAtol = 1e-6, kRtol = 1e-5;

std::vector<GoldenCase> goldens(const std::string& prefix) {
  static const std::vector<GoldenCase> all =
      load_goldens("torch_mha_torch2.txt", "torch_mha", "tests/golden/gen_torch_mha.py");
  std::vector<GoldenCase> out;
  for (const GoldenCase& c : all)
    if (c.name.rfind(prefix, 0) == 0) out.push_back(c);
  return out;
}

bool has(const GoldenCase& c, const std::string& key) {
  for (const auto& [k, t] : c.tensors)
    if (k == key) return true;
  return false;
}

// A stored mask, bool again when it was one (stored as 0 / 1); undefined when absent.
Tensor golden_mask(const GoldenCase& c, const std::string& key) {
  if (!has(c, key)) return Tensor();
  return c.flags.at(key + "_is_bool") ? gt(c.at(key), 0.5) : c.at(key);
}

Tensor leaf(const GoldenCase& c, const std::string& key) {
  Tensor t = c.at(key).clone();
  t.requires_grad_(true);
  return t;
}

// The same state_dict keys in PyTorch's order, and the same numbers bit for bit.
void check_init(const nn::Module& m, const GoldenCase& c) {
  std::vector<std::string> golden_keys, our_keys;
  for (const auto& [k, t] : c.tensors)
    if (k.rfind("init.", 0) == 0) golden_keys.push_back(k.substr(5));
  for (const auto& [k, t] : m.state_dict()) {
    our_keys.push_back(k);
    check_tensor(c.name + " init." + k, t, c.at("init." + k), 0, 0);
  }
  CHECK(our_keys == golden_keys);
}

void check_param_grads(const nn::Module& m, const GoldenCase& c) {
  for (const auto& [k, p] : m.named_parameters())
    check_tensor(c.name + " grad." + k, p.grad(), c.at("grad." + k), kAtol, kRtol);
}

std::unique_ptr<nn::MultiheadAttention> make_mha(const GoldenCase& c) {
  const auto& f = c.flags;
  return std::make_unique<nn::MultiheadAttention>(
      f.at("embed_dim"), f.at("num_heads"), c.at("dropout").item<double>(), f.at("bias"),
      f.at("add_bias_kv"), f.at("add_zero_attn"), f.at("kdim"), f.at("vdim"), f.at("batch_first"));
}

void check_mha_case(const GoldenCase& c) {
  CAPTURE(c.name);
  manual_seed(c.seed);
  auto m = make_mha(c);
  check_init(*m, c);
  const Tensor q = leaf(c, "query"), k = leaf(c, "key"), v = leaf(c, "value");
  const auto& f = c.flags;
  // Dropout cases draw their masks here, after the construction, from the global generator.
  const auto [out, weights] =
      m->forward(q, k, v, golden_mask(c, "key_padding_mask"), f.at("need_weights"),
                 golden_mask(c, "attn_mask"), f.at("average_attn_weights"), f.at("is_causal"));
  check_tensor(c.name + " output", out, c.at("output"), kAtol, kRtol);
  Tensor loss = (out * c.at("loss_weights")).sum();
  REQUIRE(weights.defined() == bool(f.at("need_weights")));
  if (weights.defined()) {
    check_tensor(c.name + " weights", weights, c.at("weights"), kAtol, kRtol);
    loss = loss + (weights * c.at("loss_weights2")).sum();
  }
  loss.backward();
  check_tensor(c.name + " grad.query", q.grad(), c.at("grad.query"), kAtol, kRtol);
  check_tensor(c.name + " grad.key", k.grad(), c.at("grad.key"), kAtol, kRtol);
  check_tensor(c.name + " grad.value", v.grad(), c.at("grad.value"), kAtol, kRtol);
  check_param_grads(*m, c);
}

}  // namespace

TEST_CASE("goldens (PyTorch 2.6): nn::MultiheadAttention over its argument table") {
  const std::vector<GoldenCase> cases = goldens("MHA.");
  CHECK(cases.size() == 24);
  for (const GoldenCase& c : cases) check_mha_case(c);
}

TEST_CASE("goldens (PyTorch 2.6): the bonus notebook's MHAPyTorchClass, need_weights both ways") {
  const std::vector<GoldenCase> cases = goldens("MHAPyTorchClass.");
  CHECK(cases.size() == 6);
  for (const GoldenCase& c : cases) {
    CAPTURE(c.name);
    const auto& f = c.flags;
    manual_seed(c.seed);
    nn::MHAPyTorchClass m(f.at("d_in"), f.at("d_out"), f.at("num_heads"), f.at("context_length"),
                          c.at("dropout").item<double>(), f.at("qkv_bias"), f.at("need_weights"));
    check_init(m, c);
    const Tensor x = leaf(c, "input");
    const Tensor y = m(x);
    check_tensor(c.name + " output", y, c.at("output"), kAtol, kRtol);
    (y * c.at("loss_weights")).sum().backward();
    check_tensor(c.name + " grad.input", x.grad(), c.at("grad.input"), kAtol, kRtol);
    check_param_grads(m, c);
  }
}

TEST_CASE("MultiheadAttention: a bool mask's True means not allowed, as -inf in a float mask") {
  manual_seed(3);
  nn::MultiheadAttention m(8, 2, 0.0, true, false, false, 0, 0, /*batch_first=*/true);
  const Tensor x = randn({2, 5, 8});
  const Tensor banned = ones({5, 5}).triu(1).to(DType::Bool);
  const Tensor additive =
      zeros({5, 5}).masked_fill(banned, -std::numeric_limits<double>::infinity());
  const auto [out_bool, w_bool] = m.forward(x, x, x, Tensor(), true, banned);
  const auto [out_float, w_float] = m.forward(x, x, x, Tensor(), true, additive);
  check_tensor("bool vs float mask", out_bool, out_float, 0, 0);
  // forward(x) is self-attention without masks.
  check_tensor("forward(x)", m(x), m.forward(x, x, x).first, 0, 0);
  // Causal: every weight above the diagonal is 0, and the fused path and the hint agree.
  const Tensor allowed = eq(ones({5, 5}).triu(1), 0.0);
  CHECK(max(w_bool.masked_fill(allowed, 0.0)).item() == 0.0);
  const Tensor fused = m.forward(x, x, x, Tensor(), false, banned).first;
  const Tensor hinted = m.forward(x, x, x, Tensor(), false, banned, true, true).first;
  check_tensor("fused vs weights path", fused, out_bool, 1e-6, 1e-5);
  check_tensor("is_causal hint vs mask", hinted, fused, 1e-6, 1e-5);
}

TEST_CASE("gradcheck (float64): every option at once, both paths") {
  // kdim != vdim, add_bias_kv, add_zero_attn, a padding mask and a float attn_mask, per-head
  // weights, batch_first; the gradients of query, key and value against central differences.
  manual_seed(11);
  nn::MultiheadAttention m(4, 2, 0.0, true, true, true, 3, 5, /*batch_first=*/true);
  m.to(DType::Float64);
  const Tensor kpm = tensor({{0, 0, 1, 0}, {1, 0, 0, 0}}).to(DType::Bool);
  Tensor attn_mask = testing::rand64({3, 4}, 7);
  const Tensor banned = tensor({{0, 1, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}}).to(DType::Bool);
  attn_mask.masked_fill_(banned, -std::numeric_limits<double>::infinity());
  for (bool need_weights : {true, false}) {
    CAPTURE(need_weights);
    auto r = testing::gradcheck(
        [&](const std::vector<Tensor>& x) {
          auto [out, w] = m.forward(x[0], x[1], x[2], kpm, need_weights, attn_mask, false);
          return need_weights ? cat({out.flatten(), w.flatten()}) : out;
        },
        {testing::rand64({2, 3, 4}, 1), testing::rand64({2, 4, 3}, 2),
         testing::rand64({2, 4, 5}, 3)});
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("MultiheadAttention: bad arguments, one message naming it and the shapes") {
  nn::MultiheadAttention m(8, 2);                                   // (L, N, E)
  nn::MultiheadAttention sep(8, 2, 0.0, true, false, false, 5, 7);  // kdim 5, vdim 7
  const Tensor q = zeros({5, 2, 8}), kv = zeros({6, 2, 8}), none;
  // forward(query, key, value, key_padding_mask, need_weights, attn_mask, average, is_causal)
  auto fwd = [](nn::MultiheadAttention& mha, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& kpm, const Tensor& attn_mask, bool is_causal = false) {
    return [&mha, q, k, v, kpm, attn_mask, is_causal] {
      mha.forward(q, k, v, kpm, true, attn_mask, true, is_causal);
    };
  };
  const std::vector<std::pair<std::function<void()>, std::string>> table = {
      {[] { nn::MultiheadAttention(10, 3); },
       "embed_dim must be divisible by num_heads (embed_dim=10, num_heads=3)"},
      {[] { nn::MultiheadAttention(0, 2); },
       "embed_dim and num_heads must be greater than 0, got embed_dim=0 and num_heads=2 instead"},
      {[] { nn::MultiheadAttention(8, -1); },
       "embed_dim and num_heads must be greater than 0, got embed_dim=8 and num_heads=-1 instead"},
      {[] { nn::MultiheadAttention(8, 2, 1.5); },
       "dropout probability has to be between 0 and 1, but got 1.500000"},
      {[] { nn::MultiheadAttention(8, 2, 0.0, true, false, false, -1); },
       "kdim and vdim must be >= 0 (0: embed_dim), got kdim=-1 and vdim=0"},
      {fwd(m, zeros({1, 5, 2, 8}), kv, kv, none, none),
       "query should be unbatched 2D or batched 3D tensor but received 4-D query tensor"},
      {fwd(m, q, zeros({6, 8}), kv, none, none),
       "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found 2-D and 3-D "
       "tensors respectively"},
      {fwd(m, zeros({5, 8}), zeros({6, 8}), kv, none, none),
       "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found 2-D and 3-D "
       "tensors respectively"},
      {fwd(m, q, kv, kv, zeros({2, 6, 1}, DType::Bool), none),
       "For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but found "
       "3-D tensor instead"},
      {fwd(m, q, kv, kv, none, zeros({1, 2, 5, 6}, DType::Bool)),
       "For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found 4-D "
       "tensor instead"},
      {fwd(m, q, kv, kv, none, zeros({5, 6}, DType::Int64)),
       "only bool and floating types of attn_mask are supported, got torch.int64"},
      {fwd(m, zeros({5, 2, 7}), kv, kv, none, none),
       "was expecting embedding dimension of 8, but got 7 (query [5, 2, 7])"},
      {fwd(m, q, kv, zeros({4, 2, 8}), none, none),
       "key shape [6, 2, 8] does not match value shape [4, 2, 8]"},
      {fwd(sep, q, zeros({6, 2, 5}), zeros({4, 2, 7}), none, none),
       "key's sequence and batch dims [6, 2] do not match value's [4, 2]"},
      {fwd(sep, q, zeros({6, 2, 5}), zeros({6, 2, 8}), none, none),
       "expected key (..., kdim=5) and value (..., vdim=7), got key [6, 2, 5] and value "
       "[6, 2, 8]"},
      {fwd(m, q, zeros({6, 3, 8}), zeros({6, 3, 8}), none, none),
       "query's batch size 2 does not match key's 3 (query [5, 2, 8], key [6, 3, 8])"},
      {fwd(m, q, kv, kv, zeros({2, 5}, DType::Bool), none),
       "Expected key_padding_mask.shape to be [2, 6], but got [2, 5]"},
      {fwd(m, q, kv, kv, none, zeros({5, 5}, DType::Bool)),
       "The shape of the 2D attn_mask is [5, 5], but should be [5, 6]."},
      {fwd(m, q, kv, kv, none, zeros({2, 5, 6})),
       "The shape of the 3D attn_mask is [2, 5, 6], but should be [4, 5, 6]."},
      {fwd(m, zeros({5, 8}), zeros({6, 8}), zeros({6, 8}), none, zeros({4, 5, 6})),
       "The shape of the 3D attn_mask is [4, 5, 6], but should be [2, 5, 6]."},
      {fwd(m, q, kv, kv, none, none, /*is_causal=*/true),
       "Need attn_mask if specifying the is_causal hint (a bool (L, S) mask, True above the "
       "diagonal)"},
  };
  for (const auto& [call, message] : table) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(call(), ("MultiheadAttention: " + message).c_str(), std::invalid_argument);
  }
  CHECK_NOTHROW(fwd(m, q, kv, kv, none, zeros({5, 6}, DType::Bool))());

  // The notebook's class: more tokens than context_length slices a context_length mask, which
  // MultiheadAttention refuses, as PyTorch does; an input of d_in != d_out features is refused.
  nn::MHAPyTorchClass cls(8, 8, 2, 4);
  CHECK_THROWS_WITH_AS(cls(zeros({1, 6, 8})),
                       "MultiheadAttention: The shape of the 2D attn_mask is [4, 4], but should "
                       "be [6, 6].",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cls(zeros({1, 4, 5})),
                       "MHAPyTorchClass: expected x (b, num_tokens, d_out) with d_out = 8 (the "
                       "notebook's class never uses d_in), got [1, 4, 5]",
                       std::invalid_argument);
}
