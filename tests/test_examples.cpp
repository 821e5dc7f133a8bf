// The programs in examples/ run, and print what the book prints: chapter 3's context vectors and
// §2.5's token ids to the digit; the gradient the attention example prints agrees with central
// differences; the tiny GPT's loss falls.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "doctest/doctest.h"
#include "nn/multihead_attention.h"

using namespace tg;

namespace {

// The example's stdout and stderr, and its exit status.
std::string run_example(const std::string& name, int& status) {
  const std::string cmd = std::string(TG_EXAMPLES_DIR) + "/" + name + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// Every number in `s`, in order.
std::vector<double> numbers_in(const std::string& s) {
  static const std::regex number(R"(-?\d+\.\d+(e[-+]\d+)?)");
  std::vector<double> v;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod(it->str()));
  return v;
}

}  // namespace

TEST_CASE("examples/multihead_attention prints the book's context vectors and a true gradient") {
  int status = 0;
  const std::string out = run_example("multihead_attention", status);
  INFO(out);
  CHECK(status == 0);
  // ch03.ipynb, the MultiHeadAttention cell, as the book prints it.
  const std::string book =
      "tensor([[[0.3190, 0.4858],\n"
      "         [0.2943, 0.3897],\n"
      "         [0.2856, 0.3593],\n"
      "         [0.2693, 0.3873],\n"
      "         [0.2639, 0.3928],\n"
      "         [0.2575, 0.4028]],\n"
      "\n"
      "        [[0.3190, 0.4858],\n"
      "         [0.2943, 0.3897],\n"
      "         [0.2856, 0.3593],\n"
      "         [0.2693, 0.3873],\n"
      "         [0.2639, 0.3928],\n"
      "         [0.2575, 0.4028]]], grad_fn=<ViewBackward0>)\n"
      "context_vecs.shape: torch.Size([2, 6, 2])\n";
  CHECK(out.rfind(book, 0) == 0);

  // The printed gradient of sum(context_vecs) by W_query.weight (2, 3), against central
  // differences of the same module in float64.
  const size_t at = out.find("W_query.weight.grad:");
  REQUIRE(at != std::string::npos);
  const std::vector<double> printed = numbers_in(out.substr(at));
  REQUIRE(printed.size() == 6);
  manual_seed(123);
  nn::MultiHeadAttention mha(3, 2, 6, 0.0, 2);
  mha.to(DType::Float64);
  const Tensor inputs = tensor({{0.43, 0.15, 0.89},
                                {0.55, 0.87, 0.66},
                                {0.57, 0.85, 0.64},
                                {0.22, 0.58, 0.33},
                                {0.77, 0.25, 0.10},
                                {0.05, 0.80, 0.55}},
                               DType::Float64);
  const Tensor batch = stack({inputs, inputs}, 0);
  double* w = mha.W_query->weight.data<double>();
  NoGradGuard no_grad;
  for (size_t i = 0; i < 6; ++i) {
    const double w0 = w[i], eps = 1e-6;
    w[i] = w0 + eps;
    const double up = mha(batch).sum().item<double>();
    w[i] = w0 - eps;
    const double down = mha(batch).sum().item<double>();
    w[i] = w0;
    const double fd = (up - down) / (2 * eps);
    CHECK_MESSAGE(std::abs(printed[i] - fd) <= 1e-4 + 1e-3 * std::abs(fd),
                  "W_query.weight.grad[" << i << "] printed " << printed[i] << ", numeric " << fd);
  }
}

TEST_CASE("examples/tokenize gives the book's ids for its sentence, and decodes them back") {
  int status = 0;
  const std::string out = run_example("tokenize", status);
  INFO(out);
  CHECK(status == 0);
  CHECK(out ==
        "[15496, 11, 466, 345, 588, 8887, 30, 220, 50256, 554, 262, 4252, 18250, 8812, 2114, 286, "
        "617, 34680, 27271, 13]\n"
        "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace.\n");
}

TEST_CASE("examples/train_tiny_gpt prints the book's log and its loss falls") {
  int status = 0;
  const std::string out = run_example("train_tiny_gpt", status);
  INFO(out);
  CHECK(status == 0);
  static const std::regex line(
      R"(Ep (\d) \(Step (\d{6})\): Train loss (\d+\.\d{3}), Val loss (\d+\.\d{3}))");
  std::vector<double> train_loss;
  int samples = 0;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    const std::string l = out.substr(pos, end - pos);
    std::smatch m;
    if (std::regex_match(l, m, line))
      train_loss.push_back(std::stod(m[3]));
    else if (l.rfind("Every effort", 0) == 0)
      ++samples;
    else
      FAIL_CHECK("unexpected line: " << l);
    pos = end == std::string::npos ? out.size() : end + 1;
  }
  CHECK(samples == 2);  // one per epoch
  REQUIRE(train_loss.size() >= 10);
  CHECK(std::abs(train_loss.front() - std::log(257.0)) < 0.5);  // about uniform at first
  CHECK(train_loss.back() < 0.5 * train_loss.front());
}
