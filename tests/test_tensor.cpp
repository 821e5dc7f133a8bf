// Tensor basics: creation, views, broadcasting, reductions, printing, autograd semantics and the
// error messages. Gradients themselves are checked numerically in test_gradcheck.cpp.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/impl.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/rng.h"

using namespace tg;

namespace {
// The chapter's six 3-d embeddings: "Your journey starts with one step".
Tensor book_inputs() {
  return tensor({{0.43, 0.15, 0.89},
                 {0.55, 0.87, 0.66},
                 {0.57, 0.85, 0.64},
                 {0.22, 0.58, 0.33},
                 {0.77, 0.25, 0.10},
                 {0.05, 0.80, 0.55}});
}

std::string what_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}
}  // namespace

TEST_CASE("sgemm_ref multiplies a 2x2 by a 2x2") {
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[4];
  kernels::sgemm_ref(2, 2, 2, a, 2, 1, b, 2, 1, 0.f, c, 2);
  CHECK(c[0] == 19);
  CHECK(c[1] == 22);
  CHECK(c[2] == 43);
  CHECK(c[3] == 50);
}

TEST_CASE("3.3.1: attention scores, weights and context vector for query x^(2)") {
  const Tensor inputs = book_inputs();
  const Tensor query = inputs[1];
  CHECK(query.shape() == Shape{3});
  // attn_scores_2[i] = dot(x_i, query), as the book's loop computes it
  Tensor attn_scores_2 = empty({6});
  for (int64_t i = 0; i < 6; ++i)
    attn_scores_2.data<float>()[i] = matmul(inputs[i], query).item<float>();
  CHECK(attn_scores_2.str() == "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])");
  const Tensor tmp = attn_scores_2 / attn_scores_2.sum();
  CHECK(tmp.str() == "tensor([0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656])");
  const Tensor attn_weights_2 = softmax(attn_scores_2, 0);
  CHECK(attn_weights_2.str() == "tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])");
  CHECK(attn_weights_2.sum().str() == "tensor(1.)");
  const Tensor context_vec_2 = matmul(attn_weights_2, inputs);
  CHECK(context_vec_2.str() == "tensor([0.4419, 0.6515, 0.5683])");
}

TEST_CASE("3.3.2: all attention weights and context vectors in matrix form") {
  const Tensor inputs = book_inputs();
  const Tensor attn_scores = matmul(inputs, inputs.T());
  CHECK(attn_scores.str() ==
        "tensor([[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],\n"
        "        [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],\n"
        "        [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],\n"
        "        [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],\n"
        "        [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],\n"
        "        [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]])");
  const Tensor attn_weights = softmax(attn_scores, -1);
  CHECK(attn_weights.sum(-1).str() == "tensor([1.0000, 1.0000, 1.0000, 1.0000, 1.0000, 1.0000])");
  const Tensor all_context_vecs = matmul(attn_weights, inputs);
  CHECK(all_context_vecs.str() ==
        "tensor([[0.4421, 0.5931, 0.5790],\n"
        "        [0.4419, 0.6515, 0.5683],\n"
        "        [0.4431, 0.6496, 0.5671],\n"
        "        [0.4304, 0.6298, 0.5510],\n"
        "        [0.4671, 0.5910, 0.5266],\n"
        "        [0.4177, 0.6503, 0.5645]])");
}

TEST_CASE("creation: nested lists infer dtype and shape; ragged lists are refused") {
  CHECK(tensor({1, 2, 3}).dtype() == DType::Int64);
  CHECK(tensor({1, 2.5}).dtype() == DType::Float32);
  CHECK(tensor({{1.0, 2.0}, {3.0, 4.0}}, DType::Float64).shape() == Shape{2, 2});
  CHECK(tensor(3.5).dim() == 0);
  CHECK(what_of([] { tensor({{1.0, 2.0}, {3.0}}); }).find("tensor: nested lists are ragged") == 0);
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0.0, 1.0, 0.25).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(full({2}, 7.0).to_vector<float>() == std::vector<float>{7, 7});
  CHECK(ones({2, 2}).tril().str() == "tensor([[1., 0.],\n        [1., 1.]])");
  CHECK(ones({2, 3}).triu(1).to_vector<float>() == std::vector<float>{0, 1, 1, 0, 0, 1});
}

TEST_CASE("views share storage; geometry follows PyTorch") {
  Tensor x = arange(0.0, 6.0).view({2, 3});
  Tensor t = x.T();
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.strides() == Shape{1, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.contiguous().to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(x.view({-1}).shape() == Shape{6});
  CHECK(x.view({3, -1}).shape() == Shape{3, 2});
  CHECK(x.unsqueeze(0).shape() == Shape{1, 2, 3});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 1});
  CHECK(x.unsqueeze(0).squeeze().shape() == Shape{2, 3});
  CHECK(x.permute({1, 0}).to_vector<float>() == t.contiguous().to_vector<float>());
  CHECK(x.narrow(1, 1, 2).to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  CHECK(x.slice(1, -2, 100).to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  CHECK(x[1].to_vector<float>() == std::vector<float>{3, 4, 5});
  CHECK(x.select(1, -1).to_vector<float>() == std::vector<float>{2, 5});
  CHECK(x.flatten().shape() == Shape{6});
  // Splitting a dim of a transposed tensor is still a view (PyTorch's computeStride).
  Tensor y = arange(0.0, 24.0).view({4, 6}).T();  // (6, 4) with strides (1, 6)
  CHECK(y.view({2, 3, 4}).strides() == Shape{3, 1, 6});
  CHECK(what_of([&] { y.view({24}); }).find("view: shape [24] is not compatible") == 0);
  CHECK(y.reshape({24}).to_vector<float>()[1] == 6);
  // A write through a view is seen by the base.
  {
    NoGradGuard ng;
    x[0].fill_(9);
  }
  CHECK(x.to_vector<float>() == std::vector<float>{9, 9, 9, 3, 4, 5});
}

TEST_CASE("broadcasting and promotion follow PyTorch") {
  const Tensor a = arange(0.0, 6.0).view({2, 3});
  const Tensor b = tensor({10.0, 20.0, 30.0});
  CHECK((a + b).to_vector<float>() == std::vector<float>{10, 21, 32, 13, 24, 35});
  CHECK((a * tensor({{2.0}, {3.0}})).to_vector<float>() == std::vector<float>{0, 2, 4, 9, 12, 15});
  CHECK((a.to(DType::Float64) + b).dtype() == DType::Float64);
  CHECK((arange(3) + 1).dtype() == DType::Int64);
  CHECK((arange(3) * 0.5).dtype() == DType::Float32);
  CHECK((arange(3) / 2).to_vector<float>() == std::vector<float>{0, 0.5f, 1});
  CHECK(gt(a, 2.5).str() == "tensor([[False, False, False],\n        [ True,  True,  True]])");
  CHECK(what_of([&] { add(a, ones({4})); }) ==
        "add: shapes [2, 3] and [4] cannot be broadcast (dim -1: 3 vs 4)");
}

TEST_CASE("reductions: dims, keepdim, max with indices, var, argmax") {
  const Tensor a = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}});
  CHECK(a.sum(0).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(a.sum(-1, true).shape() == Shape{2, 1});
  CHECK(a.sum().item<float>() == 21);
  CHECK(a.mean(1).to_vector<float>() == std::vector<float>{3, 4});
  auto [v, i] = a.max(1);
  CHECK(v.to_vector<float>() == std::vector<float>{5, 6});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(a.max().item<float>() == 6);
  CHECK(a.argmax().item<int64_t>() == 5);
  CHECK(a.var(1, false).to_vector<float>()[0] == doctest::Approx(8.0 / 3));
  CHECK(a.var(1).to_vector<float>()[0] == doctest::Approx(4.0));
  CHECK(sum(a, Shape{0, 1}).item<float>() == 21);
  CHECK(what_of([&] { a.sum(2); }) ==
        "sum: dim 2 is out of range for a tensor of 2 dims (expected -2 to 1)");
  CHECK(what_of([&] { arange(3).mean(); }).find("mean: expected a floating-point tensor") == 0);
}

TEST_CASE("matmul: torch.matmul semantics and its errors") {
  const Tensor v = tensor({1.0, 2.0, 3.0});
  const Tensor m = arange(0.0, 6.0).view({3, 2});
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item<float>() == 14);
  CHECK(matmul(v, m).to_vector<float>() == std::vector<float>{16, 22});
  CHECK(matmul(m.T(), v).to_vector<float>() == std::vector<float>{16, 22});
  const Tensor batch = arange(0.0, 24.0).view({2, 2, 2, 3});
  CHECK(matmul(batch, m).shape() == Shape{2, 2, 2, 2});
  CHECK(matmul(ones({5, 1, 2, 3}), ones({4, 3, 7})).shape() == Shape{5, 4, 2, 7});
  CHECK(what_of([] {
          matmul(ones({2, 3}), ones({4, 5}));
        }) == "matmul: cannot multiply [2, 3] by [4, 5]");
  CHECK(what_of([] {
          matmul(ones({2, 3}), ones({3}, DType::Float64));
        }).find("matmul: expected both operands to have the same dtype") == 0);
  CHECK(what_of([] {
          matmul(ones({2, 2, 3}), ones({3, 3, 1}));
        }).find("matmul: cannot multiply [2, 2, 3] by [3, 3, 1] (batch dims") == 0);
}

TEST_CASE("exp: a strided view gives the same bits as its contiguous copy") {
  manual_seed(11);
  for (DType dt : {DType::Float32, DType::Float64}) {
    CAPTURE(std::string(dtype_name(dt)));
    const Tensor x = (randn({67, 45}) * 20.0).to(dt);  // e^-60 .. e^60: every exponent range
    const Tensor xt = x.T();
    REQUIRE_FALSE(xt.is_contiguous());
    const Tensor want = xt.contiguous().exp(), got = xt.exp();
    if (dt == DType::Float32)
      CHECK(got.contiguous().to_vector<float>() == want.to_vector<float>());
    else
      CHECK(got.contiguous().to_vector<double>() == want.to_vector<double>());
  }
  // Integers become float32 first, as in PyTorch: the same bits as exp of the float32 tensor.
  const Tensor ints = arange(-87, 89, 1, DType::Int64);
  const Tensor from_ints = ints.exp();
  CHECK(from_ints.dtype() == DType::Float32);
  CHECK(from_ints.to_vector<float>() == ints.to(DType::Float32).exp().to_vector<float>());
}

TEST_CASE("softmax: stable for large inputs; an all -inf row gives nan like PyTorch") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor s = softmax(tensor({1000.0, 1000.0}), 0);
  CHECK(s.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  const Tensor r = softmax(tensor({{-inf, -inf}, {0.0, -inf}}), 1);
  const auto rv = r.to_vector<float>();
  CHECK(std::isnan(rv[0]));
  CHECK(rv[2] == 1.0f);
  CHECK(rv[3] == 0.0f);
  CHECK(log_softmax(tensor({0.0, 0.0}), 0).to_vector<float>()[0] ==
        doctest::Approx(-std::log(2.0)));
}

TEST_CASE("masked_fill with -inf, in place, and mask checks") {
  Tensor scores = ones({3, 3});
  const Tensor mask = triu(ones({3, 3}), 1).to(DType::Bool);
  scores.masked_fill_(mask, -std::numeric_limits<double>::infinity());
  CHECK(scores.str() ==
        "tensor([[1., -inf, -inf],\n        [1., 1., -inf],\n        [1., 1., 1.]])");
  CHECK(what_of([&] {
          masked_fill(scores, ones({3, 3}), 0);
        }).find("masked_fill: the mask must be a bool tensor") == 0);
  CHECK(what_of([&] { masked_fill(scores, ones({4}).to(DType::Bool), 0); }).find("masked_fill:") ==
        0);
  // A single-value mask (0-d, [1], [1, 1]) broadcasts over every element, forward and backward.
  for (const Shape& ms : {Shape{}, Shape{1}, Shape{1, 1}}) {
    INFO("mask shape " << shape_str(ms));
    Tensor x = ones({2, 3}).requires_grad_();
    const Tensor on = ones(ms).to(DType::Bool), off = zeros(ms).to(DType::Bool);
    const Tensor y = x.masked_fill(on, 5.0) + x.masked_fill(off, 5.0);
    CHECK(y.to_vector<float>() == std::vector<float>(6, 6.f));
    y.sum().backward();
    CHECK(x.grad().to_vector<float>() == std::vector<float>(6, 1.f));
    Tensor z = ones({2, 3});
    z.masked_fill_(on, -1.0);
    CHECK(z.to_vector<float>() == std::vector<float>(6, -1.f));
  }
}

TEST_CASE("cat, stack, embedding") {
  const Tensor a = ones({2, 2}), b = zeros({2, 1});
  CHECK(cat({a, b}, 1).shape() == Shape{2, 3});
  CHECK(cat({a, b}, -1).to_vector<float>() == std::vector<float>{1, 1, 0, 1, 1, 0});
  CHECK(stack({a, a}, 0).shape() == Shape{2, 2, 2});
  CHECK(stack({a, a}, 2).shape() == Shape{2, 2, 2});
  CHECK(what_of([&] { cat({a, ones({3, 3})}, 1); }).find("cat: tensor 1 has shape [3, 3]") == 0);
  CHECK(what_of([&] { stack({a, b}); }).find("stack: tensor 1 has shape [2, 1]") == 0);
  const Tensor w = arange(0.0, 8.0).view({4, 2});
  const Tensor e = embedding(tensor({{3, 0}, {1, 1}}), w);
  CHECK(e.shape() == Shape{2, 2, 2});
  CHECK(e.to_vector<float>() == std::vector<float>{6, 7, 0, 1, 2, 3, 2, 3});
  CHECK(what_of([&] { embedding(tensor({4}), w); }) ==
        "embedding: index 4 is out of range for 4 rows (weight [4, 2])");
  CHECK(what_of([&] { embedding(tensor({1.0}), w); }).find("embedding: ids must be int64") == 0);
}

TEST_CASE("cross_entropy's backward writes over logits nobody holds, and only then") {
  manual_seed(5);
  const Tensor w0 = randn({6, 37}) * 3.0;
  const Tensor targets = tensor({0, 36, 5, -100, 2, 2});
  // logits = gelu(w) has a buffer of its own; GeluBackward writes w's gradient into the gradient
  // it receives when nothing else holds it, so w.grad() shows where cross_entropy's went.
  auto grad_of_w = [&](bool keep_logits, bool twice, const float** logits_buffer) {
    Tensor w = w0.detach().requires_grad_();
    Tensor logits = gelu(w);
    *logits_buffer = logits.data<float>();
    Tensor loss = cross_entropy(logits, targets);
    if (!keep_logits) logits = Tensor();
    if (twice) loss.backward(Tensor(), /*retain_graph=*/true);
    loss.backward();
    if (keep_logits) CHECK(logits.to_vector<float>() == gelu(w0).to_vector<float>());
    return w.grad();
  };
  const float* kept_buffer = nullptr;
  const float* dropped_buffer = nullptr;
  const float* unused = nullptr;
  const Tensor kept = grad_of_w(true, false, &kept_buffer);
  const Tensor dropped = grad_of_w(false, false, &dropped_buffer);
  CHECK(kept.to_vector<float>() == dropped.to_vector<float>());
  CHECK(kept.data<float>() != kept_buffer);        // the logits are the caller's: a new buffer
  CHECK(dropped.data<float>() == dropped_buffer);  // nobody else's: written in place
  // With retain_graph the saved logits must survive the first backward: two backwards give
  // twice the gradient.
  const Tensor retained = grad_of_w(false, true, &unused);
  CHECK(retained.to_vector<float>() == (kept * 2.0).to_vector<float>());
  // Logits still visible through a view, or saved by another op (mul keeps both factors), are
  // left alone: the view reads the forward's values, and the other op's gradient is right.
  {
    Tensor w = w0.detach().requires_grad_();
    Tensor logits = gelu(w);
    const Tensor view = logits.flatten();
    const std::vector<float> before = view.to_vector<float>();
    Tensor loss = cross_entropy(logits, targets);
    logits = Tensor();
    loss.backward();
    CHECK(view.to_vector<float>() == before);
    CHECK(w.grad().to_vector<float>() == kept.to_vector<float>());
  }
  auto with_square = [&](bool keep_logits) {
    Tensor w = w0.detach().requires_grad_();
    Tensor logits = gelu(w);
    Tensor loss = (logits * logits).mean() + cross_entropy(logits, targets);
    if (!keep_logits) logits = Tensor();
    loss.backward();
    return w.grad().to_vector<float>();
  };
  CHECK(with_square(false) == with_square(true));
}

// A padded vocabulary (train --pad-vocab): the loss over each row's first num_classes columns,
// read in place, is the sliced copy's loss and gradient bit for bit, and the padding's gradient
// is exactly 0, on the path that writes over the logits and on the one with a fresh buffer.
TEST_CASE("cross_entropy with num_classes below the row length: the sliced copy's bits") {
  manual_seed(11);
  const int64_t N = 7, V = 37;
  const Tensor targets = tensor({0, 36, 5, -100, 2, 2, 17});
  // loss and w's gradient; keep: hold the logits, so the backward takes a fresh buffer.
  auto run = [&](const Tensor& w0, int64_t classes, bool keep) {
    Tensor w = w0.detach().requires_grad_();
    Tensor logits = w * 1.0;  // exact: w's gradient is the logits' gradient
    Tensor loss = cross_entropy(logits, targets, classes);
    if (!keep) logits = Tensor();
    loss.backward();
    return std::pair{loss.item<double>(), w.grad()};
  };
  for (const DType dt : {DType::Float32, DType::Float64})
    for (const int64_t pad : {int64_t(0), int64_t(1), int64_t(27), int64_t(64)})
      for (const bool keep : {false, true}) {
        CAPTURE(pad);
        CAPTURE(keep);
        const Tensor full = (randn({N, V + pad}) * 3.0).to(dt);
        const auto [loss_sliced, grad_sliced] = run(full.slice(1, 0, V).contiguous(), -1, keep);
        const auto [loss, grad] = run(full, V, keep);
        CHECK(std::bit_cast<uint64_t>(loss) == std::bit_cast<uint64_t>(loss_sliced));
        const Tensor first = grad.slice(1, 0, V).contiguous().to(DType::Float64);
        CHECK(first.to_vector<double>() == grad_sliced.to(DType::Float64).to_vector<double>());
        for (const double g :
             grad.slice(1, V, V + pad).contiguous().to(DType::Float64).to_vector<double>())
          CHECK(std::bit_cast<uint64_t>(g) == 0);  // +0 exactly: AdamW keeps a zero row zero
      }
  const Tensor logits = randn({2, 5});
  CHECK(what_of([&] {
          cross_entropy(logits, tensor({0, 3}), 3);
        }) == "cross_entropy: target 3 at row 1 is out of bounds for 3 classes (logits [2, 5])");
  CHECK(what_of([&] {
          cross_entropy(logits, tensor({0, 1}), 6);
        }) == "cross_entropy: num_classes 6 is more than the logits' 5 columns (logits [2, 5])");
}

TEST_CASE("cross_entropy: mean of -log softmax at the targets; targets are checked") {
  const Tensor logits = tensor({{2.0, 1.0, 0.1}, {0.5, 2.5, 0.3}});
  const Tensor targets = tensor({0, 1});
  const double expect =
      (-std::log(std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + std::exp(0.1))) -
       std::log(std::exp(2.5) / (std::exp(0.5) + std::exp(2.5) + std::exp(0.3)))) /
      2;
  CHECK(cross_entropy(logits, targets).item<double>() == doctest::Approx(expect).epsilon(1e-6));
  CHECK(
      cross_entropy(logits, tensor({0, -100})).item<double>() ==
      doctest::Approx(-std::log(std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + std::exp(0.1)))));
  // A target whose probability underflows float32 still gets its exact loss, x[t] - logsumexp.
  CHECK(cross_entropy(tensor({{0.0, 1000.0}}), tensor({0})).item<double>() ==
        doctest::Approx(1000.0));
  CHECK(what_of([&] {
          cross_entropy(logits, tensor({0, 3}));
        }) == "cross_entropy: target 3 at row 1 is out of bounds for 3 classes (logits [2, 3])");
  CHECK(what_of([&] {
          cross_entropy(logits, tensor({0.0, 1.0}));
        }).find("cross_entropy: targets must be int64") == 0);
  // The backward reads the saved logits (see softmax.cpp): editing them in place in between is
  // an error, never a gradient silently computed from the edited values.
  Tensor w = tensor({{2.0, 1.0, 0.1}, {0.5, 2.5, 0.3}}).requires_grad_();
  Tensor z = w * 1.0;
  Tensor loss = cross_entropy(z, targets);
  z.masked_fill_(tensor({{1, 0, 0}, {0, 0, 0}}).to(DType::Bool), 0.0);
  CHECK(what_of([&] { loss.backward(); })
            .find("NllLossBackward0: a tensor of shape [2, 3] needed for gradient computation "
                  "was modified by an in-place operation") == 0);
}

TEST_CASE("autograd: backward on a scalar, accumulation, fan-out, zero_grad") {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = (x * x + x).sum();  // x used three times
  CHECK(y.grad_fn_name() == "SumBackward0");
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 5, 7});
  (x * 2).sum().backward();  // gradients accumulate across backward calls
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 7, 9});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: backward(grad) on a non-scalar, and its errors") {
  Tensor x = ones({2, 2}).requires_grad_();
  Tensor y = x * 3;
  CHECK(what_of([&] { y.backward(); }) ==
        "backward: grad can be implicitly created only for a tensor with one element; got shape "
        "[2, 2], pass a gradient of that shape");
  CHECK(what_of([&] { y.backward(ones({3})); }) ==
        "backward: gradient of shape [3] for a tensor of shape [2, 2]");
  y.backward(full({2, 2}, 2.0));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 6, 6, 6});
  CHECK(what_of([] {
          ones({2}).backward();
        }).find("backward: the tensor (shape [2]) does not require grad") == 0);
  // A float64 gradient for a float32 root is cast to float32 first, as PyTorch does, so the
  // float32 backwards (softmax, GELU) see their own dtype.
  Tensor z = tensor({{0.5, -1.0, 2.0}}).requires_grad_();
  const Tensor w = gelu(softmax(z, 1));
  const Tensor g64 = tensor({{1.0, 2.0, 3.0}}).to(DType::Float64);
  w.backward(g64, /*retain_graph=*/true);
  const std::vector<float> from64 = z.grad().to_vector<float>();
  z.zero_grad();
  w.backward(g64.to(DType::Float32));
  CHECK(z.grad().to_vector<float>() == from64);
}

TEST_CASE("autograd: retain_graph, released saved tensors, a second backward") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 8});
  CHECK(what_of([&] { y.backward(); }).find("trying to backward through the graph a second time") !=
        std::string::npos);
  // Saved tensors are dropped by backward: the node keeps nothing alive.
  Tensor a = ones({1000}).requires_grad_();
  Tensor h = a.exp();
  std::weak_ptr<Storage> saved_storage = h.impl()->storage;
  Tensor loss = (h * h).sum();
  h = Tensor();
  CHECK_FALSE(saved_storage.expired());  // still held by the tape
  loss.backward();
  CHECK(saved_storage.expired());
}

TEST_CASE("autograd: no-grad scope, detach, requires_grad rules") {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn_name().empty());
  }
  Tensor d = (x * 2).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(what_of([] { arange(3).requires_grad_(); }).find("requires_grad_: only floating-point") ==
        0);
}

TEST_CASE("autograd: in-place ops are checked like PyTorch's version counter") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  // A leaf that requires grad cannot be written in place while grad mode is on.
  CHECK(what_of([&] { x.fill_(0); }).find("fill_: a leaf tensor that requires grad") == 0);
  // Modifying a tensor that a backward will read is detected at backward time.
  Tensor y = x.exp();
  Tensor z = y.sum();
  Tensor m = tensor({1, 0}).to(DType::Bool);
  y.masked_fill_(m, 0.0);  // allowed: y is not a leaf, and exp's saved output changes...
  Tensor loss = (y * 1.0).sum() + z;
  CHECK(what_of([&] { loss.backward(); })
            .find("ExpBackward0: a tensor of shape [2] needed for gradient computation was "
                  "modified by an in-place operation") == 0);
  // In place on an unsaved intermediate is fine and the gradient respects the mask.
  Tensor w = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor s = w * 2;
  s.masked_fill_(tensor({0, 1, 0}).to(DType::Bool), -1.0);
  CHECK(s.grad_fn_name() == "MaskedFillBackward0");
  s.sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 0, 2});
  // A product saves each operand only for the other one's gradient: under a mask that needs no
  // gradient (dropout) the activations are not saved, so writing over them is no error; with
  // both operands requiring grad it is. matmul does the same.
  const Tensor mask = tensor({0.0, 2.0, 2.0});
  for (const bool both : {false, true}) {
    Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_();
    Tensor h = a * 3.0;
    const Tensor other = both ? mask.clone().requires_grad_() : mask;
    Tensor d = h * other, p = matmul(h, other);
    h.masked_fill_(tensor({1, 0, 0}).to(DType::Bool), 5.0);
    const std::string e = what_of([&] { (d.sum() + p).backward(); });
    if (both) {
      CHECK(e.find(": a tensor of shape [3] needed for gradient computation was modified") !=
            std::string::npos);
    } else {
      CHECK(e == "(no exception)");
      CHECK(a.grad().to_vector<float>() == std::vector<float>{0, 12, 12});
    }
  }
  // A view of a tensor that requires grad is refused.
  Tensor v = (w * 1.0)[0];
  CHECK(what_of([&] {
          v.masked_fill_(tensor(true).to(DType::Bool), 0.0);
        }).find("masked_fill_: in-place modification of a view") == 0);
}

TEST_CASE("grad_fn names match PyTorch's") {
  Tensor a = ones({2, 3}).requires_grad_(), b = ones({3, 4}).requires_grad_();
  CHECK(matmul(a, b).grad_fn_name() == "MmBackward0");
  CHECK(matmul(ones({5, 2, 3}).requires_grad_(), b).grad_fn_name() == "UnsafeViewBackward0");
  CHECK(matmul(a[0], a[1]).grad_fn_name() == "DotBackward0");
  CHECK(softmax(a, 1).grad_fn_name() == "SoftmaxBackward0");
  CHECK((a * 2).grad_fn_name() == "MulBackward0");
  CHECK((a / 2).grad_fn_name() == "DivBackward0");
  CHECK(a.T().grad_fn_name() == "PermuteBackward0");
  CHECK(a.transpose(0, 1).grad_fn_name() == "TransposeBackward0");
  CHECK(a.view({6}).grad_fn_name() == "ViewBackward0");
  CHECK(cat({a, a}).grad_fn_name() == "CatBackward0");
  CHECK(a.masked_fill(gt(a, 0.5), 0).grad_fn_name() == "MaskedFillBackward0");
  CHECK(layer_norm(a, ones({3}), zeros({3})).grad_fn_name() == "NativeLayerNormBackward0");
}

TEST_CASE("errors name the op and the shapes") {
  const Tensor a = ones({2, 3});
  CHECK(what_of([&] {
          a.view({4, 2});
        }) == "view: shape [4, 2] is invalid for input of size 6 (shape [2, 3])");
  CHECK(what_of([&] { a.view({-1, -1}); }) == "view: shape [-1, -1] has more than one -1");
  CHECK(what_of([&] { a.transpose(0, 2); }) ==
        "transpose: dim 2 is out of range for a tensor of 2 dims (expected -2 to 1)");
  CHECK(what_of([&] { a[2]; }) ==
        "select: index 2 is out of bounds for dim 0 with size 2 (shape [2, 3])");
  CHECK(what_of([&] { a.narrow(1, 2, 2); }) ==
        "narrow: start 2 and length 2 are out of range for dim 1 of size 3 (shape [2, 3])");
  CHECK(what_of([&] { a.permute({0, 0}); }) == "permute: dim 0 repeats in [0, 0]");
  CHECK(what_of([&] {
          a.T().T().expand({3, 3});
        }).find("expand: cannot expand shape [2, 3] to [3, 3]") == 0);
  CHECK(what_of([&] { a.item(); }) ==
        "item: a tensor with 6 elements (shape [2, 3]) cannot be converted to a scalar");
  CHECK(what_of([&] { a.data<double>(); }) ==
        "data: the tensor holds torch.float32, not torch.float64");
  CHECK(what_of([&] { ones({2}).T(); }).find("T: expects a 2-D tensor, got shape [2]") == 0);
  CHECK(what_of([&] {
          linear(ones({2, 3}), ones({4, 5}));
        }) ==
        "linear: input of shape [2, 3] does not match weight of shape [4, 5] (expected the last "
        "dim to be 5)");
  CHECK(what_of([&] { layer_norm(a, ones({2}), zeros({3})); }) ==
        "layer_norm: expected weight and bias of shape [C] for input (..., C), got [2] and [3] "
        "for input [2, 3]");
  CHECK(what_of([&] {
          layer_norm(tensor({1, 2}), ones({2}), zeros({2}));
        }) == "layer_norm: expected a floating-point tensor, got torch.int64 of shape [2]");
  CHECK(what_of([&] {
          Tensor p = zeros({2}), m = zeros({2}), v = zeros({3});
          adamw_(p, ones({2}), m, v, {1e-3, 0.9, 0.999, 1e-8, 0.1, 1});
        }) ==
        "adamw_: expected contiguous float32 tensors of one shape, got torch.float32 [3] beside "
        "the parameter's [2]");
}

// Backward functions may write into the incoming gradient's buffer when nothing else holds it
// (gradient_reusable). Gradients shared between branches (an add passes one tensor to both
// inputs) or read twice must be left alone: the float32 graph, where reuse happens, must agree
// with the same graph in float64, where it never does.
TEST_CASE("backward: reusing gradient buffers keeps shared gradients intact") {
  auto run = [](DType dt) {
    manual_seed(7);
    Tensor x = randn({2, 3, 4, 4}).to(dt);
    x.requires_grad_();
    const Tensor c = rand({2, 3, 4, 4}).to(dt), upper = triu(ones({4, 4}), 1).to(DType::Bool);
    Tensor a = x * c;  // used by three consumers below
    Tensor s = softmax(a.masked_fill(upper, -std::numeric_limits<double>::infinity()) / 2.0, -1);
    Tensor b = s * c;  // one gradient wanted: may reuse
    Tensor h = b + a;  // the same gradient goes to both inputs
    Tensor loss = ((h * c) + (a * 3.0)).sum();
    loss.backward();
    return x.grad().to(DType::Float64).to_vector<double>();
  };
  const std::vector<double> g32 = run(DType::Float32), g64 = run(DType::Float64);
  REQUIRE(g32.size() == g64.size());
  for (size_t i = 0; i < g32.size(); ++i) CHECK(g32[i] == doctest::Approx(g64[i]).epsilon(1e-5));
}
