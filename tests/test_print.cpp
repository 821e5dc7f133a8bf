// Tests for tg::format_tensor: every case of the torch-generated golden file (gen_print.py) must
// print byte for byte as torch's repr, plus outputs copied from the chapter 3 notebooks and
// the input validation. Does not test printing through Tensor (that is the caller's side).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/print.h"

#ifndef TG_GOLDEN_DIR
#error "TG_GOLDEN_DIR must name tests/golden (set by tests/meson.build)"
#endif

namespace {

struct GoldenCase {
  std::string name;
  tg::PrintInput in;
  tg::PrintOptions opt;
  std::string expected;
};

double from_bits(const std::string& hex) {
  const uint64_t bits = std::stoull(hex, nullptr, 16);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Reads the "key rest-of-line" records written by gen_print.py; throws on any malformed record
// so a truncated or reformatted golden cannot pass silently.
std::vector<GoldenCase> load_golden(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  auto field = [&](const std::string& key) {
    std::string line;
    if (!std::getline(file, line)) throw std::runtime_error("golden ends before " + key);
    if (line.compare(0, key.size(), key) != 0)
      throw std::runtime_error("golden: expected '" + key + "', got '" + line.substr(0, 40) + "'");
    return std::istringstream(line.substr(key.size()));
  };
  std::vector<GoldenCase> cases;
  std::string line;
  while (file.peek() == '#') std::getline(file, line);
  while (file.peek() != EOF) {
    GoldenCase c;
    field("case ") >> c.name;
    field("options ") >> c.opt.precision >> c.opt.threshold >> c.opt.edgeitems >> c.opt.linewidth;
    auto shape = field("shape");
    for (int64_t n; shape >> n;) c.in.shape.push_back(n);
    std::string kind;
    field("kind ") >> kind;
    if (kind == "float32") {
      c.in.dtype = tg::DType::Float32;
    } else if (kind == "float64") {
      c.in.dtype = tg::DType::Float64;
    } else if (kind == "int64") {
      c.in.dtype = tg::DType::Int64;
    } else if (kind == "bool") {
      c.in.dtype = tg::DType::Bool;
    } else if (kind == "bfloat16") {
      c.in.dtype = tg::DType::BFloat16;
    } else {
      throw std::runtime_error("golden: unknown kind " + kind);
    }
    field("grad_fn ") >> c.in.grad_fn;
    if (c.in.grad_fn == "-") c.in.grad_fn.clear();
    field("requires_grad ") >> c.in.requires_grad;
    auto values = field("values");
    const bool floating = kind == "float32" || kind == "float64" || kind == "bfloat16";
    for (std::string v; values >> v;) {
      if (floating) {
        c.in.f.push_back(from_bits(v));
      } else {
        c.in.i.push_back(std::stoll(v));
      }
    }
    int n_lines = 0;
    field("repr ") >> n_lines;
    for (int k = 0; k < n_lines; ++k) {
      if (!std::getline(file, line)) throw std::runtime_error("golden: short repr in " + c.name);
      c.expected += (k ? "\n" : "") + line;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// A float32 PrintInput from the numbers of a printed tensor, read up to its last ']' (so the
// digits of a grad_fn suffix are not taken). Rounding each printed number to float32 gives a
// value that prints back to the same digits, so the check is about layout, as in the notebook.
tg::PrintInput from_printed(std::vector<int64_t> shape, const std::string& text,
                            std::string grad_fn = "") {
  tg::PrintInput in;
  in.shape = std::move(shape);
  in.grad_fn = std::move(grad_fn);
  const std::string body = text.substr(0, text.rfind(']'));
  for (size_t p = 0; p < body.size();) {
    const char c = body[p];
    if (c == '-' || c == '.' || (c >= '0' && c <= '9') || c == 'i') {
      size_t used = 0;
      in.f.push_back(static_cast<float>(std::stod(body.substr(p), &used)));
      p += used;
    } else {
      ++p;
    }
  }
  return in;
}

}  // namespace

TEST_CASE("golden: every torch repr in print_cases.txt is reproduced exactly") {
  const auto cases = load_golden(std::string(TG_GOLDEN_DIR) + "/print_cases.txt");
  REQUIRE(cases.size() >= 120);  // the generator writes 125; fewer means a damaged file
  for (const auto& c : cases) {
    CAPTURE(c.name);
    CHECK(tg::format_tensor(c.in, c.opt) == c.expected);
  }
}

TEST_CASE("golden: torch's repr of bfloat16 tensors (bf16_print_cases.txt, gen_bf16.py)") {
  const auto cases = load_golden(std::string(TG_GOLDEN_DIR) + "/bf16_print_cases.txt");
  REQUIRE(cases.size() >= 13);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    CHECK(tg::format_tensor(c.in, c.opt) == c.expected);
  }
}

TEST_CASE("notebook: 0-d scalars") {
  tg::PrintInput in;
  in.f = {static_cast<float>(0.9544)};
  CHECK(tg::format_tensor(in) == "tensor(0.9544)");
  in.f = {static_cast<double>(std::nextafter(1.0f, 0.0f))};  // a softmax sum just under 1
  CHECK(tg::format_tensor(in) == "tensor(1.0000)");
  in.f = {1.0};
  CHECK(tg::format_tensor(in) == "tensor(1.)");
}

TEST_CASE("notebook: 1-D attention scores and near-one row sums") {
  const std::string scores = "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])";
  CHECK(tg::format_tensor(from_printed({6}, scores)) == scores);
  tg::PrintInput sums;
  sums.shape = {6};
  const double below = std::nextafter(1.0f, 0.0f), above = std::nextafter(1.0f, 2.0f);
  sums.f = {1.0, below, above, 1.0, below, 1.0};
  CHECK(tg::format_tensor(sums) == "tensor([1.0000, 1.0000, 1.0000, 1.0000, 1.0000, 1.0000])");
}

TEST_CASE("notebook: 6x3 inputs and 6x6 attention scores") {
  tg::PrintInput inputs;
  inputs.shape = {6, 3};
  for (double v : {0.43, 0.15, 0.89, 0.55, 0.87, 0.66, 0.57, 0.85, 0.64, 0.22, 0.58, 0.33, 0.77,
                   0.25, 0.10, 0.05, 0.80, 0.55})
    inputs.f.push_back(static_cast<float>(v));
  CHECK(tg::format_tensor(inputs) ==
        "tensor([[0.4300, 0.1500, 0.8900],\n"
        "        [0.5500, 0.8700, 0.6600],\n"
        "        [0.5700, 0.8500, 0.6400],\n"
        "        [0.2200, 0.5800, 0.3300],\n"
        "        [0.7700, 0.2500, 0.1000],\n"
        "        [0.0500, 0.8000, 0.5500]])");
  const std::string scores =
      "tensor([[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],\n"
      "        [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],\n"
      "        [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],\n"
      "        [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],\n"
      "        [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],\n"
      "        [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]])";
  CHECK(tg::format_tensor(from_printed({6, 6}, scores)) == scores);
}

TEST_CASE("notebook: grad_fn suffix stays on the line when it fits") {
  const std::string out =
      "tensor([[-0.0739,  0.0713],\n"
      "        [-0.0748,  0.0703],\n"
      "        [-0.0749,  0.0702],\n"
      "        [-0.0760,  0.0685],\n"
      "        [-0.0763,  0.0679],\n"
      "        [-0.0754,  0.0693]], grad_fn=<MmBackward0>)";
  CHECK(tg::format_tensor(from_printed({6, 2}, out, "MmBackward0")) == out);
}

TEST_CASE("notebook: 6x6 softmax weights wrap grad_fn onto its own line") {
  const std::string out =
      "tensor([[0.1921, 0.1646, 0.1652, 0.1550, 0.1721, 0.1510],\n"
      "        [0.2041, 0.1659, 0.1662, 0.1496, 0.1665, 0.1477],\n"
      "        [0.2036, 0.1659, 0.1662, 0.1498, 0.1664, 0.1480],\n"
      "        [0.1869, 0.1667, 0.1668, 0.1571, 0.1661, 0.1564],\n"
      "        [0.1830, 0.1669, 0.1670, 0.1588, 0.1658, 0.1585],\n"
      "        [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529]],\n"
      "       grad_fn=<SoftmaxBackward0>)";
  CHECK(tg::format_tensor(from_printed({6, 6}, out, "SoftmaxBackward0")) == out);
}

TEST_CASE("notebook: -inf masked scores") {
  const std::string out =
      "tensor([[0.2899,   -inf,   -inf,   -inf,   -inf,   -inf],\n"
      "        [0.4656, 0.1723,   -inf,   -inf,   -inf,   -inf],\n"
      "        [0.4594, 0.1703, 0.1731,   -inf,   -inf,   -inf],\n"
      "        [0.2642, 0.1024, 0.1036, 0.0186,   -inf,   -inf],\n"
      "        [0.2183, 0.0874, 0.0882, 0.0177, 0.0786,   -inf],\n"
      "        [0.3408, 0.1270, 0.1290, 0.0198, 0.1290, 0.0078]],\n"
      "       grad_fn=<MaskedFillBackward0>)";
  const auto in = from_printed({6, 6}, out, "MaskedFillBackward0");
  REQUIRE(std::isinf(in.f[1]));
  CHECK(tg::format_tensor(in) == out);
}

TEST_CASE("notebook: integral floats print as 1. and mixed ones as 2.0000") {
  const std::string mask =
      "tensor([[1., 0., 0., 0., 0., 0.],\n"
      "        [1., 1., 0., 0., 0., 0.],\n"
      "        [1., 1., 1., 0., 0., 0.],\n"
      "        [1., 1., 1., 1., 0., 0.],\n"
      "        [1., 1., 1., 1., 1., 0.],\n"
      "        [1., 1., 1., 1., 1., 1.]])";
  CHECK(tg::format_tensor(from_printed({6, 6}, mask)) == mask);
  const std::string dropped =
      "tensor([[2.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],\n"
      "        [0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],\n"
      "        [0.7599, 0.6194, 0.6206, 0.0000, 0.0000, 0.0000],\n"
      "        [0.0000, 0.4921, 0.4925, 0.0000, 0.0000, 0.0000],\n"
      "        [0.0000, 0.3966, 0.0000, 0.3775, 0.0000, 0.0000],\n"
      "        [0.0000, 0.3327, 0.3331, 0.3084, 0.3331, 0.0000]],\n"
      "       grad_fn=<MulBackward0>)";
  CHECK(tg::format_tensor(from_printed({6, 6}, dropped, "MulBackward0")) == dropped);
}

TEST_CASE("notebook: 3-D batched context vectors") {
  const std::string two =
      "tensor([[[-0.4519,  0.2216],\n"
      "         [-0.5874,  0.0058],\n"
      "         [-0.6300, -0.0632],\n"
      "         [-0.5675, -0.0843],\n"
      "         [-0.5526, -0.0981],\n"
      "         [-0.5299, -0.1081]],\n"
      "\n"
      "        [[-0.4519,  0.2216],\n"
      "         [-0.5874,  0.0058],\n"
      "         [-0.6300, -0.0632],\n"
      "         [-0.5675, -0.0843],\n"
      "         [-0.5526, -0.0981],\n"
      "         [-0.5299, -0.1081]]], grad_fn=<UnsafeViewBackward0>)";
  CHECK(tg::format_tensor(from_printed({2, 6, 2}, two, "UnsafeViewBackward0")) == two);
  const std::string four =
      "tensor([[[-0.4519,  0.2216,  0.4772,  0.1063],\n"
      "         [-0.5874,  0.0058,  0.5891,  0.3257],\n"
      "         [-0.6300, -0.0632,  0.6202,  0.3860],\n"
      "         [-0.5675, -0.0843,  0.5478,  0.3589],\n"
      "         [-0.5526, -0.0981,  0.5321,  0.3428],\n"
      "         [-0.5299, -0.1081,  0.5077,  0.3493]],\n"
      "\n"
      "        [[-0.4519,  0.2216,  0.4772,  0.1063],\n"
      "         [-0.5874,  0.0058,  0.5891,  0.3257],\n"
      "         [-0.6300, -0.0632,  0.6202,  0.3860],\n"
      "         [-0.5675, -0.0843,  0.5478,  0.3589],\n"
      "         [-0.5526, -0.0981,  0.5321,  0.3428],\n"
      "         [-0.5299, -0.1081,  0.5077,  0.3493]]], grad_fn=<CatBackward0>)";
  CHECK(tg::format_tensor(from_printed({2, 6, 4}, four, "CatBackward0")) == four);
}

TEST_CASE("notebook: 4-D per-head scores") {
  const std::string out =
      "tensor([[[[1.3208, 1.1631, 1.2879],\n"
      "          [1.1631, 2.2150, 1.8424],\n"
      "          [1.2879, 1.8424, 2.0402]],\n"
      "\n"
      "         [[0.4391, 0.7003, 0.5903],\n"
      "          [0.7003, 1.3737, 1.0620],\n"
      "          [0.5903, 1.0620, 0.9912]]]])";
  CHECK(tg::format_tensor(from_printed({1, 2, 3, 3}, out)) == out);
}

TEST_CASE("int64, bool, float64 and requires_grad suffixes") {
  tg::PrintInput ints;
  ints.dtype = tg::DType::Int64;
  ints.shape = {3};
  ints.i = {0, 1, 2};
  CHECK(tg::format_tensor(ints) == "tensor([0, 1, 2])");
  tg::PrintInput bools;
  bools.dtype = tg::DType::Bool;
  bools.shape = {1, 2};
  bools.i = {1, 0};
  CHECK(tg::format_tensor(bools) == "tensor([[ True, False]])");
  tg::PrintInput d;
  d.dtype = tg::DType::Float64;
  d.shape = {2};
  d.f = {1.0, 2.0};
  d.requires_grad = true;
  CHECK(tg::format_tensor(d) == "tensor([1., 2.], dtype=torch.float64, requires_grad=True)");
  d.grad_fn = "AddBackward0";  // a grad_fn replaces requires_grad=True
  CHECK(tg::format_tensor(d) == "tensor([1., 2.], dtype=torch.float64, grad_fn=<AddBackward0>)");
  tg::PrintInput empty;
  empty.dtype = tg::DType::Int64;
  empty.shape = {0};
  CHECK(tg::format_tensor(empty) == "tensor([], dtype=torch.int64)");
}

TEST_CASE("bad input throws std::invalid_argument naming format_tensor and the shape") {
  tg::PrintInput in;
  in.shape = {2, 3};
  in.f = {1, 2, 3, 4, 5};
  CHECK_THROWS_AS(tg::format_tensor(in), std::invalid_argument);
  try {
    tg::format_tensor(in);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("format_tensor") != std::string::npos);
    CHECK(msg.find("[2, 3]") != std::string::npos);
  }
  in.shape = {-1, 5};
  CHECK_THROWS_WITH_AS(tg::format_tensor(in), doctest::Contains("format_tensor: shape [-1, 5]"),
                       std::invalid_argument);
  in.shape = {};  // 0-d needs exactly one value
  in.f = {};
  CHECK_THROWS_AS(tg::format_tensor(in), std::invalid_argument);
  in.dtype = tg::DType::Int64;  // ints are read from .i, not .f
  in.shape = {2};
  in.f = {1, 2};
  CHECK_THROWS_WITH_AS(tg::format_tensor(in), doctest::Contains("shape [2]"),
                       std::invalid_argument);
  in.dtype = tg::DType::Bool;
  in.i = {1, 2};
  CHECK_THROWS_AS(tg::format_tensor(in), std::invalid_argument);
  in.shape = {std::numeric_limits<int64_t>::max(), 4};
  CHECK_THROWS_AS(tg::format_tensor(in), std::invalid_argument);
  tg::PrintInput ok;
  ok.f = {1.0};
  tg::PrintOptions opt;
  opt.precision = -1;
  CHECK_THROWS_AS(tg::format_tensor(ok, opt), std::invalid_argument);
  opt = {};
  opt.edgeitems = 0;
  CHECK_THROWS_AS(tg::format_tensor(ok, opt), std::invalid_argument);
}
