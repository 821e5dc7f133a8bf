// tg::einsum (and the diagonal view it takes for repeated labels) against three references:
//   1. PyTorch 2.6's torch.einsum on a table of equations (tests/golden/gen_einsum.py ->
//      einsum_torch2.txt): float32 outputs and operand gradients;
//   2. central differences in float64 (tests/gradcheck.h) on a table of equations covering every
//      form: explicit and implicit output, diagonals, sums, batch labels, ellipses, size-1
//      broadcasting, three operands;
//   3. the same products written with matmul, sum and transpose.
// And a table of bad equations with the exact messages.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "tests/golden_cases.h"
#include "tests/gradcheck.h"

using namespace tg;
using tg::testing::check_tensor;
using tg::testing::gradcheck;
using tg::testing::rand64;

namespace {

struct EinsumCase {
  std::string equation;
  std::vector<Shape> shapes;
};

// Float64 leaves of these shapes, distinct seeds.
std::vector<Tensor> operands64(const std::vector<Shape>& shapes) {
  std::vector<Tensor> ops;
  for (size_t i = 0; i < shapes.size(); ++i) ops.push_back(rand64(shapes[i], 17 + i));
  return ops;
}

const std::vector<EinsumCase> kGradTable = {
    {"ij,jk->ik", {{2, 3}, {3, 4}}},
    {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 2}}},
    {"bnd,do->bno", {{2, 3, 4}, {4, 5}}},
    {"bhnd,bhmd->bhnm", {{2, 2, 3, 2}, {2, 2, 4, 2}}},
    {"bhnm,bhmd->bhnd", {{2, 2, 3, 4}, {2, 2, 4, 2}}},
    {"ii->i", {{3, 3}}},
    {"ii", {{3, 3}}},
    {"iji->j", {{3, 2, 3}}},
    {"bii->bi", {{2, 3, 3}}},
    {"iij,jk->ik", {{3, 3, 2}, {2, 4}}},
    {"ii,ii->i", {{3, 3}, {3, 3}}},
    {"ij->", {{2, 3}}},
    {"ij->j", {{2, 3}}},
    {"ba", {{2, 3}}},
    {"Ba,aC", {{2, 3}, {3, 4}}},
    {"i,j->ij", {{3}, {4}}},
    {"i,i->", {{4}, {4}}},
    {"ij,ij->ij", {{2, 3}, {1, 3}}},
    {"ij,jk->ik", {{2, 1}, {3, 4}}},
    {"bij,bjk->bik", {{1, 3, 4}, {2, 4, 2}}},
    {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}},
    {"...ij,jk", {{2, 3, 4}, {4, 2}}},
    {"i...->...", {{3, 2, 4}}},
    {"...ii->...i", {{2, 3, 3}}},
    {"b...,b...->b", {{2, 3, 4}, {2, 1, 4}}},
    {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},
    {"ijk,ikl,ilm->ijm", {{2, 3, 4}, {2, 4, 2}, {2, 2, 3}}},
    {"i,i,i->i", {{4}, {4}, {1}}},
    {"ab,cd->", {{2, 3}, {4, 2}}},
    {" b n d , d o -> b n o ", {{2, 3, 4}, {4, 5}}},
};

}  // namespace

TEST_CASE("einsum goldens (PyTorch 2.6): outputs and operand gradients on a table of equations") {
  const auto cases =
      tg::testing::load_goldens("einsum_torch2.txt", "einsum", "tests/golden/gen_einsum.py");
  CHECK(cases.size() == 31);
  for (const auto& c : cases) {
    std::string equation = c.name;  // '_' stands for a space, which a case name cannot hold
    for (char& ch : equation)
      if (ch == '_') ch = ' ';
    CAPTURE(equation);
    std::vector<Tensor> ops;
    for (size_t i = 0;; ++i) {
      const std::string key = "op" + std::to_string(i);
      bool found = false;
      for (const auto& [k, t] : c.tensors) found = found || k == key;
      if (!found) break;
      ops.push_back(c.at(key).clone().requires_grad_());
    }
    const Tensor y = einsum(equation, ops);
    check_tensor(c.name + " output", y, c.at("output"), 1e-6, 1e-5);
    (y * c.at("loss_weights")).sum().backward();
    for (size_t i = 0; i < ops.size(); ++i)
      check_tensor(c.name + " grad.op" + std::to_string(i), ops[i].grad(),
                   c.at("grad.op" + std::to_string(i)), 1e-6, 1e-5);
  }
}

TEST_CASE("gradcheck: einsum on a table of equations (float64)") {
  for (const EinsumCase& c : kGradTable) {
    CAPTURE(c.equation);
    auto r = gradcheck([&](const std::vector<Tensor>& x) { return einsum(c.equation, x); },
                       operands64(c.shapes));
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("gradcheck: diagonal, with offsets, on non-adjacent and transposed dims") {
  for (int64_t offset : {0, 1, -2, 5}) {
    CAPTURE(offset);
    auto r = gradcheck([&](const std::vector<Tensor>& x) { return diagonal(x[0], offset, 0, 2); },
                       {rand64({3, 2, 4}, 3)});
    INFO(r.report);
    CHECK(r.ok);
  }
  auto r = gradcheck(
      [](const std::vector<Tensor>& x) { return diagonal(x[0].transpose(0, 1), 0, -1, 0); },
      {rand64({4, 3}, 4)});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("diagonal: values and shapes as torch.diagonal") {
  const Tensor a = arange(0.0, 12.0).reshape({3, 4});
  CHECK(diagonal(a).to_vector<float>() == std::vector<float>{0, 5, 10});
  CHECK(diagonal(a, 1).to_vector<float>() == std::vector<float>{1, 6, 11});
  CHECK(diagonal(a, -1).to_vector<float>() == std::vector<float>{4, 9});
  CHECK(diagonal(a, 4).shape() == Shape{0});
  CHECK(diagonal(a, -3).shape() == Shape{0});
  CHECK(diagonal(zeros({2, 3, 4}), 0, 0, 2).shape() == Shape{3, 2});
  CHECK_THROWS_WITH(diagonal(a, 0, 1, -1), "diagonal: dim1 and dim2 are both dim 1 (shape [3, 4])");
  CHECK_THROWS_WITH(diagonal(zeros({3}), 0, 0, 1),
                    "diagonal: dim 1 is out of range for a tensor of 1 dims (expected -1 to 0)");
}

TEST_CASE("einsum equals the products it names") {
  const Tensor a = rand64({2, 3, 4}, 1), b = rand64({2, 4, 5}, 2), m = rand64({3, 3}, 3);
  auto same = [](const Tensor& x, const Tensor& y) {
    REQUIRE_MESSAGE(x.shape() == y.shape(), shape_str(x.shape()) << " vs " << shape_str(y.shape()));
    const auto u = x.to_vector<double>(), v = y.to_vector<double>();
    for (size_t i = 0; i < u.size(); ++i) CHECK(u[i] == doctest::Approx(v[i]).epsilon(1e-12));
  };
  same(einsum("bij,bjk->bik", {a, b}), matmul(a, b));
  same(einsum("bij,bjk", {a, b}), sum(matmul(a, b), 0));  // implicit: b is seen twice, summed
  same(einsum("bij,bjk->bki", {a, b}), matmul(a, b).transpose(1, 2));
  same(einsum("bij->j", {a}), sum(a, Shape{0, 1}));
  same(einsum("ii", {m}), sum(diagonal(m)));
  same(einsum("ij->ji", {m}), m.transpose(0, 1));
  same(einsum("...ij,...jk->...ik", {a, b}), matmul(a, b));
  same(einsum("bij,bjk->bik", {a.slice(0, 0, 1), b}), matmul(a.slice(0, 0, 1), b));
  same(einsum("i j k , i k l", {a, b}), einsum("ijk,ikl", {a, b}));
  // Empty labels: a sum over nothing is 0, a product with nothing is empty.
  CHECK(einsum("ij,jk->ik", {zeros({2, 0}), zeros({0, 3})}).to_vector<float>() ==
        std::vector<float>(6, 0.0f));
  CHECK(einsum("ij,jk->ik", {zeros({0, 2}), zeros({2, 3})}).shape() == Shape{0, 3});
}

TEST_CASE("einsum: bad equations and operands, one message naming the equation and operand") {
  const Tensor m = zeros({2, 3}), v = zeros({3}), i64 = zeros({3}, DType::Int64);
  struct Bad {
    std::string equation;
    std::vector<Tensor> operands;
    std::string message;
  };
  const std::vector<Bad> table = {
      {"ij,jk->ik", {m}, "names 2 operand(s) but 1 tensor(s) were given"},
      {"ij", {m, m}, "names 1 operand(s) but 2 tensor(s) were given"},
      {"ij", {}, "names 1 operand(s) but 0 tensor(s) were given"},
      {"ijk", {m}, "operand 0 has 3 subscript(s) but 2 dim(s) (shape [2, 3])"},
      {"ij,j", {m, m}, "operand 1 has 1 subscript(s) but 2 dim(s) (shape [2, 3])"},
      {"ijk...",
       {m},
       "operand 0 has 3 subscript(s) besides its ellipsis but 2 dim(s) (shape [2, 3])"},
      {"ij,jk", {m, m}, "subscript j has size 2 in operand 1 (shape [2, 3]) but size 3 elsewhere"},
      {"...i,...i",
       {m, zeros({4, 3})},
       "the ellipsis dim 0 has size 4 in operand 1 (shape [4, 3]) but size 2 elsewhere"},
      {"ii", {m}, "subscript i is repeated in operand 0 (shape [2, 3]) with sizes 2 and 3"},
      {"i1",
       {m},
       "operand 0 has the invalid subscript '1' at index 1; subscripts must be in [a-zA-Z]"},
      {"ij->i_",
       {m},
       "the output has the invalid subscript '_' at index 5; subscripts must be in [a-zA-Z]"},
      {"ij-ji",
       {m},
       "operand 0 has the invalid subscript '-' at index 2; subscripts must be in [a-zA-Z]"},
      {"ij->k", {m}, "output subscript k does not appear in any operand"},
      {"ij->ii", {m}, "output subscript i appears more than once"},
      {"......", {m}, "operand 0 has more than one ellipsis '...'"},
      {"...->......", {m}, "the output has more than one ellipsis '...'"},
      {"i..j", {m}, "operand 0 has a '.' at index 1 that is not part of an ellipsis '...'"},
      {"i", {i64}, "operand 0 is torch.int64; einsum takes floating-point tensors"},
      {"i,i",
       {v, v.to(DType::Float64)},
       "operand 1 is torch.float64 but operand 0 is torch.float32"},
      {"i,i", {v, Tensor()}, "operand 1 is an undefined tensor"},
  };
  for (const Bad& b : table) {
    CAPTURE(b.equation);
    CHECK_THROWS_WITH_AS(einsum(b.equation, b.operands),
                         ("einsum: equation '" + b.equation + "': " + b.message).c_str(),
                         std::invalid_argument);
  }
}
