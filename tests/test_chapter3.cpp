// Chapter 3 against its two references:
//   1. the notebook's printed numbers (ch03.ipynb, torch 2.4), pinned here to 4 decimals;
//   2. goldens from PyTorch 1.13.1 running the book's classes (tests/golden/gen_ch03.py ->
//      ch03_torch113.txt): the weights each constructor draws (bit for bit), the outputs, and the
//      gradients of the input and of every parameter for loss = Σ output ⊙ loss_weights.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/causal_attention.h"
#include "nn/causal_mask.h"
#include "nn/containers.h"
#include "nn/dropout.h"
#include "nn/gelu.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/mha_einsum.h"
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"
#include "nn/sdpa_attention.h"
#include "nn/self_attention.h"
#include "nn/simple_attention.h"
#include "tests/golden_cases.h"
#include "tests/module_goldens.h"

using namespace tg;
using tg::testing::check_module_goldens;
using tg::testing::check_tensor;
using tg::testing::GoldenCase;
using tg::testing::load_goldens;

namespace {

const Tensor& book_inputs() {
  static const Tensor inputs = tensor({{0.43, 0.15, 0.89},    // Your     (x^1)
                                       {0.55, 0.87, 0.66},    // journey  (x^2)
                                       {0.57, 0.85, 0.64},    // starts   (x^3)
                                       {0.22, 0.58, 0.33},    // with     (x^4)
                                       {0.77, 0.25, 0.10},    // one      (x^5)
                                       {0.05, 0.80, 0.55}});  // step     (x^6)
  return inputs;
}
Tensor book_batch() { return stack({book_inputs(), book_inputs()}, 0); }

// The notebook prints 4 decimals: the value must round to the printed digits.
void check_printed(const Tensor& t, const std::vector<double>& printed, const char* what) {
  const std::vector<double> v = t.to_vector<double>();
  REQUIRE(v.size() >= printed.size());
  for (size_t i = 0; i < printed.size(); ++i) {
    INFO(what << " element " << i << ": got " << v[i] << ", the notebook prints " << printed[i]);
    CHECK(std::abs(v[i] - printed[i]) <= 0.5e-4 + 1e-7);
  }
}

}  // namespace

// ---- 1. the notebook's numbers ----

TEST_CASE("§3.3 notebook: scores, naive and stable softmax, context vectors") {
  const Tensor& inputs = book_inputs();
  const Tensor attn_scores_2 = nn::attention_scores_for_query(inputs, inputs[1]);
  check_printed(attn_scores_2, {0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865}, "attn_scores_2");
  check_printed(nn::softmax_naive(attn_scores_2), {0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581},
                "softmax_naive");
  const Tensor attn_weights_2 = softmax(attn_scores_2, 0);
  check_printed(nn::context_vector_loop(attn_weights_2, inputs), {0.4419, 0.6515, 0.5683},
                "context_vec_2");
  check_printed(nn::attention_scores_loop(inputs), {0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310},
                "attn_scores row 0");
  check_printed(nn::simple_self_attention(inputs),
                {0.4421, 0.5931, 0.5790, 0.4419, 0.6515, 0.5683, 0.4431, 0.6496, 0.5671, 0.4304,
                 0.6298, 0.5510, 0.4671, 0.5910, 0.5266, 0.4177, 0.6503, 0.5645},
                "all_context_vecs");
}

TEST_CASE("§3.4.1 notebook: rand(3, 2) weights at seed 123 give query_2 = [0.4306, 1.4551]") {
  manual_seed(123);
  const Tensor W_query = rand({3, 2}), W_key = rand({3, 2}), W_value = rand({3, 2});
  const Tensor x_2 = book_inputs()[1];
  const Tensor query_2 = matmul(x_2, W_query);
  check_printed(query_2, {0.4306, 1.4551}, "query_2");
  const Tensor keys = matmul(book_inputs(), W_key);
  check_printed(matmul(query_2, keys[1]), {1.8524}, "attn_score_22");
  const Tensor attn_weights_2 = softmax(matmul(query_2, keys.T()) / std::sqrt(2.0), -1);
  check_printed(attn_weights_2, {0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820}, "attn_weights_2");
  check_printed(matmul(attn_weights_2, matmul(book_inputs(), W_value)), {0.3061, 0.8210},
                "context_vec_2");
}

TEST_CASE("§3.4.2 notebook: SelfAttention_v1 (seed 123) and SelfAttention_v2 (seed 789)") {
  manual_seed(123);
  nn::SelfAttention_v1 sa_v1(3, 2);
  check_printed(sa_v1(book_inputs()),
                {0.2996, 0.8053, 0.3061, 0.8210, 0.3058, 0.8203, 0.2948, 0.7939, 0.2927, 0.7891,
                 0.2990, 0.8040},
                "sa_v1");
  manual_seed(789);
  nn::SelfAttention_v2 sa_v2(3, 2);
  const Tensor out = sa_v2(book_inputs());
  check_printed(out,
                {-0.0739, 0.0713, -0.0748, 0.0703, -0.0749, 0.0702, -0.0760, 0.0685, -0.0763,
                 0.0679, -0.0754, 0.0693},
                "sa_v2");
  CHECK(out.grad_fn_name() == "MmBackward0");
}

TEST_CASE("§3.5 notebook: both causal masks, dropout at seed 123") {
  manual_seed(789);
  nn::SelfAttention_v2 sa_v2(3, 2);
  const Tensor queries = (*sa_v2.W_query)(book_inputs());
  const Tensor keys = (*sa_v2.W_key)(book_inputs());
  const Tensor attn_scores = matmul(queries, keys.T());
  const Tensor attn_weights = softmax(attn_scores / std::sqrt(2.0), -1);
  check_printed(attn_weights, {0.1921, 0.1646, 0.1652, 0.1550, 0.1721, 0.1510}, "attn_weights");
  const std::vector<double> causal = {1.0000, 0, 0, 0,      0,      0,      0.5517, 0.4483, 0,
                                      0,      0, 0, 0.3800, 0.3097, 0.3103, 0,      0,      0};
  check_printed(nn::masked_simple_norm(attn_weights), causal, "masked_simple_norm");
  const Tensor masked = nn::mask_future_scores(attn_scores);
  CHECK(std::isinf(masked[0][1].item()));
  check_printed(masked[5], {0.3408, 0.1270, 0.1290, 0.0198, 0.1290, 0.0078}, "masked row 5");
  const Tensor via_inf = softmax(masked / std::sqrt(2.0), -1);
  check_printed(via_inf, causal, "softmax of -inf-masked scores");

  manual_seed(123);
  nn::Dropout dropout(0.5);
  check_printed(dropout(ones({6, 6})), {2, 2, 0, 2, 2, 0, 0, 0, 0, 2, 0, 2}, "Dropout(0.5)");
  manual_seed(123);
  check_printed(tg::dropout(via_inf, 0.5), {2.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.7599, 0.6194},
                "F.dropout(attn_weights)");
}

TEST_CASE("§3.5.3 / §3.6 notebook: CausalAttention, the wrapper and MultiHeadAttention") {
  const Tensor batch = book_batch();
  manual_seed(123);
  nn::CausalAttention ca(3, 2, batch.size(1), 0.0);
  const Tensor ca_out = ca(batch);
  CHECK(ca_out.shape() == Shape{2, 6, 2});
  const std::vector<double> head0 = {-0.4519, 0.2216,  -0.5874, 0.0058,  -0.6300, -0.0632,
                                     -0.5675, -0.0843, -0.5526, -0.0981, -0.5299, -0.1081};
  check_printed(ca_out[1], head0, "CausalAttention, batch element 1");

  manual_seed(123);
  nn::MultiHeadAttentionWrapper wrapper(3, 2, batch.size(1), 0.0, 2);
  const Tensor w_out = wrapper(batch);
  CHECK(w_out.shape() == Shape{2, 6, 4});
  check_printed(w_out[0].slice(1, 2, 4),
                {0.4772, 0.1063, 0.5891, 0.3257, 0.6202, 0.3860, 0.5478, 0.3589, 0.5321, 0.3428,
                 0.5077, 0.3493},
                "wrapper head 1");
  check_printed(w_out[0].slice(1, 0, 2), head0, "wrapper head 0");

  manual_seed(123);
  nn::MultiHeadAttention mha(3, 2, batch.size(1), 0.0, 2);
  const Tensor m_out = mha(batch);
  CHECK(m_out.shape() == Shape{2, 6, 2});
  check_printed(m_out[0],
                {0.3190, 0.4858, 0.2943, 0.3897, 0.2856, 0.3593, 0.2693, 0.3873, 0.2639, 0.3928,
                 0.2575, 0.4028},
                "MultiHeadAttention");
}

// ---- 2. goldens from PyTorch 1.13.1 ----

namespace {

std::unique_ptr<nn::Module> make(const std::string& name) {
  if (name == "SelfAttention_v1") return std::make_unique<nn::SelfAttention_v1>(3, 2);
  if (name == "SelfAttention_v2") return std::make_unique<nn::SelfAttention_v2>(3, 2);
  if (name == "SelfAttention_v2_bias") return std::make_unique<nn::SelfAttention_v2>(3, 4, true);
  if (name == "CausalAttention") return std::make_unique<nn::CausalAttention>(3, 2, 6, 0.0);
  if (name == "CausalAttention_dropout") return std::make_unique<nn::CausalAttention>(3, 2, 6, 0.5);
  if (name == "CausalAttention_short")
    return std::make_unique<nn::CausalAttention>(3, 2, 8, 0.0, true);
  if (name == "MultiHeadAttentionWrapper")
    return std::make_unique<nn::MultiHeadAttentionWrapper>(3, 2, 6, 0.0, 2);
  if (name == "MultiHeadAttentionWrapper_dropout")
    return std::make_unique<nn::MultiHeadAttentionWrapper>(3, 2, 6, 0.5, 3, true);
  if (name == "MultiHeadAttention")
    return std::make_unique<nn::MultiHeadAttention>(3, 2, 6, 0.0, 2);
  if (name == "MultiHeadAttention_dropout")
    return std::make_unique<nn::MultiHeadAttention>(3, 4, 6, 0.5, 2, true);
  if (name == "MHAPyTorchScaledDotProduct")
    return std::make_unique<nn::MHAPyTorchScaledDotProduct>(3, 4, 2, 6, 0.0);
  if (name == "MHAPyTorchScaledDotProduct_bias")
    return std::make_unique<nn::MHAPyTorchScaledDotProduct>(3, 6, 3, 8, 0.0, true);
  if (name == "MHAEinsum") return std::make_unique<nn::MHAEinsum>(8, 8, 6, 0.0, 2);
  if (name == "MHAEinsum_bias") return std::make_unique<nn::MHAEinsum>(8, 8, 6, 0.0, 2, true);
  if (name == "MHAEinsum_d_in_ne_d_out")
    return std::make_unique<nn::MHAEinsum>(5, 8, 7, 0.0, 4, true);
  if (name == "MHAEinsum_dropout") return std::make_unique<nn::MHAEinsum>(8, 8, 6, 0.5, 2, true);
  if (name == "LayerNorm") return std::make_unique<nn::LayerNorm>(3);
  if (name == "GELU") return std::make_unique<nn::GELU>();
  if (name == "Sequential") {
    // Built in Python's order: Linear(3, 4), GELU(), Linear(4, 2), then the Sequential.
    auto l1 = std::make_shared<nn::Linear>(3, 4);
    auto act = std::make_shared<nn::GELU>();
    auto l2 = std::make_shared<nn::Linear>(4, 2);
    return std::make_unique<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{l1, act, l2});
  }
  return nullptr;
}

}  // namespace

TEST_CASE("goldens (PyTorch 1.13.1): weights drawn, outputs, input and weight gradients") {
  const std::vector<GoldenCase> cases =
      load_goldens("ch03_torch113.txt", "ch03", "tests/golden/gen_ch03.py");
  CHECK(cases.size() == 13);
  check_module_goldens(cases, make);
}

TEST_CASE(
    "goldens (PyTorch 2): the bonus notebook's MHAPyTorchScaledDotProduct and "
    "F.scaled_dot_product_attention") {
  const std::vector<GoldenCase> all =
      load_goldens("sdpa_torch2.txt", "sdpa", "tests/golden/gen_sdpa.py");
  std::vector<GoldenCase> modules, functional;
  for (const GoldenCase& c : all) (c.name.rfind("F.", 0) == 0 ? functional : modules).push_back(c);
  CHECK(modules.size() == 2);
  CHECK(functional.size() == 4);
  check_module_goldens(modules, make);
  for (const GoldenCase& c : functional) {
    CAPTURE(c.name);
    Tensor q = c.at("q").clone(), k = c.at("k").clone(), v = c.at("v").clone();
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
    Tensor mask;
    if (c.flags.count("mask_is_bool"))
      mask = c.flags.at("mask_is_bool") ? gt(c.at("mask"), 0.5) : c.at("mask");
    std::optional<double> scale;
    for (const auto& [key, t] : c.tensors)
      if (key == "scale") scale = t.item<double>();
    const Tensor y =
        scaled_dot_product_attention(q, k, v, mask, 0.0, c.flags.at("is_causal"), scale);
    check_tensor(c.name + " output", y, c.at("output"), 1e-6, 1e-5);
    (y * c.at("loss_weights")).sum().backward();
    check_tensor(c.name + " grad.q", q.grad(), c.at("grad.q"), 1e-6, 1e-5);
    check_tensor(c.name + " grad.k", k.grad(), c.at("grad.k"), 1e-6, 1e-5);
    check_tensor(c.name + " grad.v", v.grad(), c.at("grad.v"), 1e-6, 1e-5);
  }
}
TEST_CASE(
    "goldens (PyTorch 2.6): the bonus notebook's MHAEinsum, drawn by randn then "
    "reset_parameters") {
  const std::vector<GoldenCase> cases =
      load_goldens("mha_einsum_torch2.txt", "mha_einsum", "tests/golden/gen_mha_einsum.py");
  CHECK(cases.size() == 4);
  check_module_goldens(cases, make);
}
