// The bonus notebook's classes (ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb) against PyTorch 2.6 running the notebook's own cells
// (tests/golden/gen_mha_notebook.py -> mha_notebook_torch2.txt): weights drawn, outputs,
// gradients, dropout draws. Then what the goldens show in words, and the errors.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "nn/mha_combined_qkv.h"
#include "nn/notebook_ch03_mha.h"
#include "nn/sdpa_attention.h"
#include "tests/golden_cases.h"
#include "tests/module_goldens.h"

using namespace tg;
using tg::testing::check_tensor;

namespace {

template <class M, class... Args>
std::function<std::unique_ptr<nn::Module>()> build(Args... args) {
  return [=] { return std::make_unique<M>(args...); };
}

// Each golden case's constructor call, as gen_mha_notebook.py writes it.
std::unique_ptr<nn::Module> make(const std::string& name) {
  using W = nn::Ch03_MHA_Wrapper;
  using C = nn::MultiHeadAttentionCombinedQKV;
  using S = nn::MHAPyTorchScaledDotProduct;
  using F = nn::MHAPyTorchSDPAWithoutFlash;
  static const std::map<std::string, std::function<std::unique_ptr<nn::Module>()>> table = {
      // (d_in, d_out, context_length, dropout, num_heads, qkv_bias)
      {"Ch03_MHA_Wrapper", build<W>(8, 4, 6, 0.0, 2)},
      {"Ch03_MHA_Wrapper_bias_short", build<W>(5, 3, 8, 0.0, 3, true)},
      {"Ch03_MHA_Wrapper_dropout", build<W>(8, 4, 6, 0.5, 2, true)},
      {"Ch03_MHA", build<nn::Ch03_MHA>(8, 8, 6, 0.0, 2)},
      {"Ch03_MHA_bias_short", build<nn::Ch03_MHA>(5, 8, 7, 0.0, 4, true)},
      {"Ch03_MHA_dropout", build<nn::Ch03_MHA>(8, 8, 6, 0.5, 2, true)},
      // (d_in, d_out, num_heads, context_length, dropout, qkv_bias)
      {"MultiHeadAttentionCombinedQKV", build<C>(8, 8, 2, 6)},
      {"MultiHeadAttentionCombinedQKV_bias_short", build<C>(8, 8, 4, 9, 0.0, true)},
      {"MultiHeadAttentionCombinedQKV_dropout", build<C>(8, 8, 2, 6, 0.5, true)},
      {"MHAPyTorchScaledDotProduct_bias_short", build<S>(5, 8, 4, 7, 0.0, true)},
      {"MHAPyTorchScaledDotProduct_dropout", build<S>(8, 8, 2, 6, 0.5, true)},
      {"MHAPyTorchSDPAWithoutFlash", build<F>(8, 8, 2, 6)},
      {"MHAPyTorchSDPAWithoutFlash_bias_short", build<F>(5, 8, 4, 7, 0.0, true)},
      {"MHAPyTorchSDPAWithoutFlash_dropout", build<F>(8, 8, 2, 6, 0.5, true)},
  };
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second();
}

}  // namespace

TEST_CASE("goldens (PyTorch 2.6 running the notebook's cells): weights, outputs, gradients") {
  const std::vector<tg::testing::GoldenCase> cases = tg::testing::load_goldens(
      "mha_notebook_torch2.txt", "mha_notebook", "tests/golden/gen_mha_notebook.py");
  CHECK(cases.size() == 14);
  tg::testing::check_module_goldens(cases, make);
}

TEST_CASE("MHAPyTorchSDPAWithoutFlash: the notebook's mask lets the last token see no key") {
  manual_seed(1);
  nn::MHAPyTorchSDPAWithoutFlash m(4, 4, 2, 5, 0.0, true);
  // triu(ones, 1).bool(), which SDPA reads as "takes part": each token sees the later ones only.
  CHECK(m.mask[0][0].item() == 0.0);
  CHECK(m.mask[0][1].item() == 1.0);
  CHECK(m.mask[4].to(DType::Float32).sum().item() == 0.0);
  Tensor x = randn({2, 5, 4});
  x.requires_grad_(true);
  const Tensor y = m(x);
  // The last token's context vector is 0 (PyTorch 2.6), so its output is proj's bias bit for
  // bit, and nothing of x reaches it.
  for (int64_t b = 0; b < 2; ++b) check_tensor("last token", y[b][4], m.proj->bias, 0, 0);
  y.select(1, 4).sum().backward();
  check_tensor("d(last token)/dx", x.grad(), zeros({2, 5, 4}), 0, 0);
}

TEST_CASE("MultiHeadAttentionCombinedQKV equals Ch03_MHA once qkv stacks W_query, W_key, W_value") {
  for (const bool bias : {false, true}) {
    CAPTURE(bias);
    manual_seed(3);
    nn::Ch03_MHA ch03(6, 6, 5, 0.0, 3, bias);
    nn::MultiHeadAttentionCombinedQKV combined(6, 6, 3, 5, 0.0, bias);
    nn::NamedTensors sd = {
        {"mask", combined.mask},
        {"qkv.weight", cat({ch03.W_query->weight, ch03.W_key->weight, ch03.W_value->weight}, 0)},
        {"proj.weight", ch03.out_proj->weight},
        {"proj.bias", ch03.out_proj->bias}};
    if (bias)
      sd.insert(sd.begin() + 2,
                {"qkv.bias", cat({ch03.W_query->bias, ch03.W_key->bias, ch03.W_value->bias}, 0)});
    combined.load_state_dict(sd);
    const Tensor x = randn({2, 4, 6});
    check_tensor("combined vs Ch03_MHA", combined(x), ch03(x), 1e-6, 1e-5);
  }
}

TEST_CASE("bad arguments: each class names itself, the notebook's assert and the shapes") {
  struct Bad {
    std::function<void()> call;
    const char* message;
  };
  const Tensor x8 = zeros({2, 7, 8});
  const std::vector<Bad> bad = {
      {[] { nn::Ch03_MHA(3, 3, 6, 0.0, 2); },
       "Ch03_MHA: d_out must be divisible by num_heads (d_out=3, num_heads=2)"},
      {[] { nn::Ch03_MHA(3, 4, 0, 0.0, 2); }, "Ch03_MHA: context_length must be >= 1, got 0"},
      {[] {
         nn::Ch03_MHA(3, 4, 6, 0.0, 2)(zeros({2, 7, 3}));
       },
       "Ch03_MHA: input (b, num_tokens, d_in) of shape [2, 7, 3] has num_tokens = 7, more than "
       "context_length = 6 (the causal mask is 6x6)"},
      {[] { nn::Ch03_MHA_Wrapper(3, 2, 6, 0.0, 0); },
       "Ch03_MHA_Wrapper: num_heads must be >= 1, got 0"},
      {[] { nn::Ch03_MHA_Wrapper(3, 2, 0, 0.0, 2); },
       "Ch03_MHA_Wrapper: context_length must be >= 1, got 0"},
      {[] {
         nn::Ch03_MHA_Wrapper(3, 2, 6, 0.0, 2)(zeros({2, 6, 4}));
       },
       "Ch03_MHA_Wrapper: input (b, num_tokens, d_in) of shape [2, 6, 4] has d_in = 4, but the "
       "module was built with d_in = 3"},
      {[] { nn::MultiHeadAttentionCombinedQKV(8, 6, 4, 6); },
       "MultiHeadAttentionCombinedQKV: d_out is indivisible by num_heads (d_out=6, num_heads=4)"},
      {[] { nn::MultiHeadAttentionCombinedQKV(8, 8, 0, 6); },
       "MultiHeadAttentionCombinedQKV: num_heads must be >= 1, got 0"},
      {[] {
         nn::MultiHeadAttentionCombinedQKV(5, 8, 4, 7)(zeros({2, 6, 5}));
       },
       "MultiHeadAttentionCombinedQKV: input of shape [2, 6, 5] has embed_dim = 5, but the "
       "notebook's forward views its (b, num_tokens, d_out = 8) context as (b, num_tokens, "
       "embed_dim), so d_in must equal d_out (PyTorch: shape '[2, 6, 5]' is invalid for input "
       "of size 96)"},
      {[&] { nn::MultiHeadAttentionCombinedQKV(8, 8, 2, 6)(x8); },
       "MultiHeadAttentionCombinedQKV: input (b, num_tokens, d_in) of shape [2, 7, 8] has "
       "num_tokens = 7, more than context_length = 6 (the causal mask is 6x6)"},
      {[] { nn::MHAPyTorchSDPAWithoutFlash(8, 6, 4, 6); },
       "MHAPyTorchSDPAWithoutFlash: d_out is indivisible by num_heads (d_out=6, num_heads=4)"},
      {[] { nn::MHAPyTorchSDPAWithoutFlash(8, 8, 2, 6, -0.1); },
       "MHAPyTorchSDPAWithoutFlash: dropout must be in [0, 1], got -0.100000"},
      {[] { nn::MHAPyTorchSDPAWithoutFlash(8, 8, 2, 0); },
       "MHAPyTorchSDPAWithoutFlash: context_length must be >= 1, got 0"},
      // The notebook's else-branch would hand SDPA a 6x6 mask for 7 tokens.
      {[&] { nn::MHAPyTorchSDPAWithoutFlash(8, 8, 2, 6)(x8); },
       "MHAPyTorchSDPAWithoutFlash: input (b, num_tokens, d_in) of shape [2, 7, 8] has "
       "num_tokens = 7, more than context_length = 6 (the causal mask is 6x6)"},
      {[] {
         nn::MHAPyTorchSDPAWithoutFlash(8, 8, 2, 6)(zeros({6, 8}));
       },
       "MHAPyTorchSDPAWithoutFlash: expected a 3-D input (b, num_tokens, d_in) with d_in = 8, got "
       "a 2-D tensor of shape [6, 8]"},
      {[] { nn::MHAPyTorchScaledDotProduct(8, 6, 4, 6); },
       "MHAPyTorchScaledDotProduct: d_out is indivisible by num_heads (d_out=6, num_heads=4)"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.message);
    CHECK_THROWS_WITH_AS(b.call(), b.message, std::invalid_argument);
  }
}
