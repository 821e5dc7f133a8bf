// The programs in examples/ run, and print what the book prints: chapter 3's context vectors and
// §2.5's token ids to the digit; the gradient the attention example prints agrees with central
// differences; the tiny GPT's loss falls.
#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "doctest/doctest.h"
#include "nn/multihead_attention.h"
#include "nn/simple_attention.h"

using namespace tg;

namespace {

// The example's stdout and stderr, and its exit status; `launcher` runs it (mpirun ...).
std::string run_example(const std::string& name, int& status, const std::string& launcher = "") {
  const std::string cmd = launcher + std::string(TG_EXAMPLES_DIR) + "/" + name + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// Every number with a decimal point in `s`, in order (PyTorch's print: 0.0302, -1.2e-05).
std::vector<double> numbers_in(const std::string& s) {
  std::vector<double> v;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) continue;
    const size_t from = i > 0 && s[i - 1] == '-' ? i - 1 : i;
    char* end = nullptr;
    const double x = std::strtod(s.c_str() + from, &end);
    const std::string text(s.c_str() + from, static_cast<const char*>(end));
    if (text.find('.') != std::string::npos) v.push_back(x);
    i = size_t(end - s.c_str());
  }
  return v;
}

// The loss of a line "Ep E (Step SSSSSS): Train loss T.TTT, Val loss V.VVV", or -1 for another.
double train_loss_of(const std::string& line) {
  int epoch = 0, step = 0;
  double train = 0, val = 0;
  if (std::sscanf(line.c_str(), "Ep %d (Step %d): Train loss %lf, Val loss %lf", &epoch, &step,
                  &train, &val) != 4)
    return -1;
  char again[128];  // the book's exact format, or not the line
  std::snprintf(again, sizeof again, "Ep %d (Step %06d): Train loss %.3f, Val loss %.3f", epoch,
                step, train, val);
  return line == again ? train : -1;
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
  const Tensor inputs = nn::your_journey_inputs().to(DType::Float64);
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
  std::vector<double> train_loss;
  int samples = 0;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    const std::string l = out.substr(pos, end - pos);
    if (const double loss = train_loss_of(l); loss >= 0)
      train_loss.push_back(loss);
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

TEST_CASE("examples/ddp_regression fits its line on 2 ranks with the same weights on each") {
  // Under mpirun when this build has MPI (as root it needs the two variables); else alone.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const bool mpi = TG_HAVE_MPI && std::system("command -v mpirun > /dev/null 2>&1") == 0;
  if (!mpi) MESSAGE("no MPI in this build or no mpirun: one process");
  int status = 0;
  const std::string out =
      run_example("ddp_regression", status,
                  mpi ? "ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe -np 2 " : "");
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find(std::string(mpi ? "2" : "1") +
                 " rank(s): w = 3.000, b = -2.000, weights identical on every rank: yes\n") !=
        std::string::npos);
  CHECK(out.find("epoch 30: loss 0.000000\n") != std::string::npos);
}
