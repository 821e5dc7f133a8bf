// Shapes at the edges: element and byte counts past int64 refused with one message naming the op
// and the shape (checked_numel / checked_nbytes), memory that cannot be had named likewise, and
// tensors with a zero dimension working through the common ops as in PyTorch.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "nn/embedding.h"
#include "nn/linear.h"

using namespace tg;

// The out-of-memory case below needs the allocator to answer "no" rather than abort the process,
// which AddressSanitizer does by default.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

constexpr int64_t k32 = int64_t(1) << 32;
constexpr int64_t k40 = int64_t(1) << 40;

// A tensor of `shape` that holds one element: a size-1 tensor expanded (no memory).
Tensor huge(const Shape& shape, DType dtype = DType::Float32) {
  return zeros(Shape(shape.size(), 1), dtype).expand(shape);
}

struct Refusal {
  std::string name;
  std::function<void()> run;
  std::string message;
};

void check_refusals(const std::vector<Refusal>& table) {
  for (const Refusal& r : table) {
    CAPTURE(r.name);
    CHECK(what_of(r.run) == r.message);
  }
}

}  // namespace

TEST_CASE("factories: a shape past int64 (elements, bytes, strides) or a negative dim is refused") {
  check_refusals({
      {"ones 2^64",
       [] {
         ones({k32, k32});
       },
       "ones: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"zeros 2^80",
       [] {
         zeros({1 << 20, 1 << 20, 1 << 20, 1 << 20});
       },
       "zeros: shape [1048576, 1048576, 1048576, 1048576] has 1208925819614629174706176 elements, "
       "more than 9223372036854775807"},
      {"zeros 10^19 (zero limbs in the count)",
       [] {
         zeros({1000000000, 1000000000, 10});
       },
       "zeros: shape [1000000000, 1000000000, 10] has 10000000000000000000 elements, more than "
       "9223372036854775807"},
      {"empty 2^64 bytes",
       [] {
         empty({int64_t(1) << 31, int64_t(1) << 31});
       },
       "empty: shape [2147483648, 2147483648] of torch.float32 needs 18446744073709551616 bytes, "
       "more than 9223372036854775807"},
      {"full float64", [] { full({int64_t(1) << 61}, 0, DType::Float64); },
       "full: shape [2305843009213693952] of torch.float64 needs 18446744073709551616 bytes, "
       "more than 9223372036854775807"},
      {"randn",
       [] {
         randn({k32, k32, 3});
       },
       "randn: shape [4294967296, 4294967296, 3] has 55340232221128654848 elements, more than "
       "9223372036854775807"},
      {"rand",
       [] {
         rand({k40, k40});
       },
       "rand: shape [1099511627776, 1099511627776] has 1208925819614629174706176 elements, more "
       "than 9223372036854775807"},
      {"empty, zero size but a stride past int64",
       [] {
         empty({0, k40, k40, 2});
       },
       "empty: shape [0, 1099511627776, 1099511627776, 2] has 0 elements but a row-major stride "
       "of 2417851639229258349412352, more than 9223372036854775807"},
      {"negative dim",
       [] {
         ones({2, -3});
       },
       "ones: negative dimension in shape [2, -3]"},
      {"arange", [] { arange(0, 1e30); },
       "arange: range start=0 end=1e+30 step=1 has 1e+30 elements, more than "
       "9223372036854775807"},
      {"from_vector",
       [] {
         from_vector(std::vector<float>{}, {k32, k32});
       },
       "from_vector: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
  });
}

TEST_CASE("views: a shape past int64 or a negative dim is refused naming op and shape") {
  check_refusals({
      {"expand to a negative dim",
       [] {
         zeros({1, 3}).expand({-2, 3});
       },
       "expand: negative dimension in shape [-2, 3]"},
      {"expand",
       [] {
         zeros({1, 1}).expand({k32, k32});
       },
       "expand: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"view",
       [] {
         zeros({6}).view({k32, k32});
       },
       "view: shape [4294967296, 4294967296] is invalid for input of size 6 (shape [6])"},
      {"reshape with -1",
       [] {
         zeros({0}).reshape({-1, k40, k40});
       },
       "reshape: shape [-1, 1099511627776, 1099511627776] is invalid for input of size 0 (shape "
       "[0])"},
      {"view of zero size, stride past int64",
       [] {
         zeros({0}).view({0, k40, k40});
       },
       "view: shape [0, 1099511627776, 1099511627776] has 0 elements but a row-major stride of "
       "1208925819614629174706176, more than 9223372036854775807"},
      {"flatten",
       [] {
         empty({k40, k40, 0}).flatten(0, 1);
       },
       "flatten: shape [1099511627776, 1099511627776] has 1208925819614629174706176 elements, "
       "more than 9223372036854775807"},
  });
}

TEST_CASE("ops and modules whose result's shape overflows int64 are refused naming op and shape") {
  check_refusals({
      {"add broadcast",
       [] {
         add(huge({k32, 1}), huge({1, k32}));
       },
       "add: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"mul broadcast",
       [] {
         mul(huge({k32, 1, 1}), huge({1, k32, 1}));
       },
       "mul: shape [4294967296, 4294967296, 1] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"where",
       [] {
         where(huge({k32, 1}, DType::Bool), huge({1, k32}), zeros({1}));
       },
       "where: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"matmul",
       [] {
         matmul(huge({k32, 1}), huge({1, k32}));
       },
       "matmul: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"matmul batch",
       [] {
         matmul(huge({k32, 1, 1, 1}), huge({k32, 1, 1}));
       },
       "matmul: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"linear",
       [] {
         linear(huge({k32, 1}), huge({k32, 1}), huge({k32}));
       },
       "linear: shape [4294967296, 4294967296] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"cat",
       [] {
         cat({huge({int64_t(1) << 62}), huge({int64_t(1) << 62})}, 0);
       },
       "cat: the sizes along dim 0 add up to more than 9223372036854775807 at tensor 1 (shape "
       "[4611686018427387904])"},
      {"embedding",
       [] {
         embedding(zeros({1 << 20}, DType::Int64), huge({1, int64_t(1) << 44}));
       },
       "embedding: shape [1048576, 17592186044416] has 18446744073709551616 elements, more than "
       "9223372036854775807"},
      {"nn::Linear", [] { nn::Linear(int64_t(1) << 31, int64_t(1) << 31); },
       "Linear: shape [2147483648, 2147483648] of torch.float32 needs 18446744073709551616 bytes, "
       "more than 9223372036854775807"},
      {"nn::Embedding", [] { nn::Embedding(k40, k40); },
       "Embedding: shape [1099511627776, 1099511627776] has 1208925819614629174706176 elements, "
       "more than 9223372036854775807"},
  });
}

TEST_CASE("a representable shape the allocator cannot satisfy names the bytes and the shape") {
  // 2^62 bytes: past any machine's address space, so the allocator refuses at once.
  const std::string msg = what_of([] { ones({int64_t(1) << 30, int64_t(1) << 30}); });
  CHECK(msg ==
        "ones: cannot allocate 4611686018427387904 bytes for shape [1073741824, 1073741824] of "
        "torch.float32 (out of memory)");
  CHECK_THROWS_AS(zeros({int64_t(1) << 59}, DType::Float64), std::runtime_error);
}

TEST_CASE("attention over a key expanded past memory names the op, the length and the shapes") {
  const Tensor q = zeros({1, 1, 4, 8});
  // kᵀ packed: 2^44 keys × 8 floats = 2^49 bytes, past any address space.
  const Tensor k = zeros({1, 1, 1, 8}).expand({1, 1, int64_t(1) << 44, 8});
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, k),
                    "scaled_dot_product_attention: cannot pack a key of length 17592186044416 for "
                    "query [1, 1, 4, 8] and key [1, 1, 17592186044416, 8] (out of memory)");
}

TEST_CASE("a thread count past the pool's limit is refused saying the limit") {
  CHECK(what_of([] { parse_thread_count("4096"); }) ==
        "TAPEGRAD_THREADS='4096' is not a thread count: use an integer from 1 to 1024");
  CHECK(what_of([] { parse_thread_count("0"); }) ==
        "TAPEGRAD_THREADS='0' is not a thread count: use an integer from 1 to 1024");
  CHECK(what_of([] { parse_thread_count("99999999999999999999"); }) ==
        "TAPEGRAD_THREADS='99999999999999999999' is not a thread count: use an integer from 1 to "
        "1024");
  CHECK(what_of([] { parse_thread_count("2x"); }) ==
        "TAPEGRAD_THREADS='2x' is not a thread count: use an integer from 1 to 1024");
  CHECK(parse_thread_count("1024") == 1024);
  CHECK(parse_thread_count("3") == 3);
  CHECK(what_of([] { set_num_threads(4096); }) == "set_num_threads(4096): need 1 to 1024 threads");
  CHECK(what_of([] { set_num_threads(0); }) == "set_num_threads(0): need 1 to 1024 threads");
}

TEST_CASE("TAPEGRAD_HUGE_PAGES is 1, 0 or unset, and anything else is refused naming it") {
  CHECK_FALSE(parse_huge_pages(nullptr));
  CHECK_FALSE(parse_huge_pages(""));
  CHECK_FALSE(parse_huge_pages("0"));
  CHECK(parse_huge_pages("1"));
  for (const char* bad : {"yes", "2", " 1", "01", "off"})
    CHECK(what_of([&] { parse_huge_pages(bad); }) ==
          std::string("TAPEGRAD_HUGE_PAGES='") + bad +
              "' is not a switch: use 0 (the default) or 1");
}

TEST_CASE("a tensor past the huge-page size keeps its values through views, copies and frees") {
  // 32 MiB and more: a 2 MiB-aligned buffer given to madvise; 64 bytes less: the 64-byte one.
  for (const int64_t n : {int64_t(1) << 23, (int64_t(1) << 23) - 16, int64_t(3) << 22}) {
    const Tensor a = arange(double(0), double(n), 1.0);
    CHECK(reinterpret_cast<uintptr_t>(a.data<float>()) % 64 == 0);
    const Tensor b = a.slice(0, 1, n).contiguous() + 1.0;
    CHECK(b.numel() == n - 1);
    CHECK(b.data<float>()[0] == 2.0f);
    CHECK(b.data<float>()[n - 2] == float(n));
  }
}

TEST_CASE("a tensor with a zero dimension is contiguous and goes through views as in PyTorch") {
  manual_seed(0);
  const Tensor x = randn({2, 0, 8});
  CHECK(x.shape() == Shape{2, 0, 8});
  CHECK(x.strides() == Shape{8, 8, 1});  // torch.randn(2, 0, 8).stride()
  CHECK(x.numel() == 0);
  CHECK(x.is_contiguous());
  CHECK(x.contiguous().same(x));
  CHECK(x.view({0, 16}).shape() == Shape{0, 16});
  CHECK(x.view({-1}).shape() == Shape{0});
  CHECK(x.reshape({-1, 8}).shape() == Shape{0, 8});
  CHECK(x.reshape({4, -1}).shape() == Shape{4, 0});
  CHECK(x.transpose(0, 2).contiguous().shape() == Shape{8, 0, 2});
  CHECK(x.flatten().shape() == Shape{0});
  CHECK(x.str() == "tensor([], size=(2, 0, 8))");
  CHECK(zeros({0}).expand({3, 0}).shape() == Shape{3, 0});
  CHECK(empty({k40, k40, 0}).strides() == Shape{k40, 1, 1});  // 0 elements, strides that fit
  CHECK(zeros({0}).view({k40, k40, 0}).strides() == Shape{k40, 1, 1});
  CHECK(cat({ones({2, 3}), zeros({0, 3})}, 0).to_vector<float>() == std::vector<float>(6, 1.f));
  CHECK(what_of([&] {
          x.reshape({0, -1});
        }) == "reshape: shape [0, -1] is invalid for input of size 0 (shape [2, 0, 8])");
}

TEST_CASE("ops on zero-size tensors give PyTorch's results") {
  manual_seed(0);
  const Tensor x = randn({2, 0, 8});
  CHECK((x + 1.0).shape() == Shape{2, 0, 8});
  CHECK((x * x).exp().shape() == Shape{2, 0, 8});
  CHECK(softmax(x, -1).shape() == Shape{2, 0, 8});
  CHECK(x.sum().item() == 0.0);
  CHECK(x.sum(1).to_vector<float>() == std::vector<float>(16, 0.f));
  CHECK(std::isnan(x.mean().item()));
  CHECK(x.sum(2).shape() == Shape{2, 0});
  // A zero inner dimension: the product is all zeros, whatever the output's buffer held.
  CHECK(matmul(randn({3, 0}), randn({0, 4})).to_vector<float>() == std::vector<float>(12, 0.f));
  CHECK(matmul(randn({2, 3, 0}), randn({2, 0, 5})).to_vector<float>() ==
        std::vector<float>(30, 0.f));
  CHECK(matmul(randn({0}, nullptr, DType::Float64), randn({0}, nullptr, DType::Float64)).item() ==
        0.0);
  CHECK(matmul(randn({0, 3}), randn({3, 4})).shape() == Shape{0, 4});
  CHECK(matmul(randn({5, 3}), randn({3, 0})).shape() == Shape{5, 0});
  CHECK(what_of([&] { x.max(); }) == "max: cannot reduce an empty tensor (shape [2, 0, 8])");
}

// What torch 1.13 gives for the same calls (shown beside each).
TEST_CASE("more ops on zero-size tensors, forward and backward, as torch 1.13") {
  manual_seed(0);
  CHECK(std::isnan(cross_entropy(randn({0, 5}), zeros({0}, DType::Int64)).item()));  // nan
  CHECK(layer_norm(randn({0, 8}), ones({8}), zeros({8})).shape() == Shape{0, 8});
  const std::vector<float> two_nans = randn({2, 0}).var(1).to_vector<float>();  // [nan, nan]
  CHECK((two_nans.size() == 2 && std::isnan(two_nans[0]) && std::isnan(two_nans[1])));
  CHECK(randn({0, 3}).max(1).first.shape() == Shape{0});  // values=tensor([])
  CHECK(what_of([] {
          randn({2, 0}).max(1);
        }) == "max: cannot reduce an empty dim (shape [2, 0], dim 1)");
  CHECK(what_of([] {
          randn({2, 0}).argmax(1);
        }) == "argmax: cannot reduce an empty dim (shape [2, 0], dim 1)");
  CHECK(what_of([] {
          randn({0, 3}).argmax();
        }) == "argmax: cannot reduce an empty tensor (shape [0, 3])");
  CHECK(stack({zeros({0}), zeros({0})}, 0).shape() == Shape{2, 0});
  CHECK(ones({0, 0}).tril().shape() == Shape{0, 0});

  Tensor a = randn({0, 3}).requires_grad_(true), b = randn({3, 4}).requires_grad_(true);
  matmul(a, b).sum().backward();
  CHECK(a.grad().shape() == Shape{0, 3});
  CHECK(b.grad().to_vector<float>() == std::vector<float>(12, 0.f));  // no rows, no gradient
  Tensor w = randn({5, 3}).requires_grad_(true);
  const Tensor e = embedding(zeros({2, 0}, DType::Int64), w);
  CHECK(e.shape() == Shape{2, 0, 3});
  e.sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>(15, 0.f));
  Tensor s = randn({2, 0, 8}).requires_grad_(true);
  softmax(s, -1).sum().backward();
  CHECK(s.grad().shape() == Shape{2, 0, 8});
  Tensor m = randn({2, 0}).requires_grad_(true), k = randn({1}).requires_grad_(true);
  (m * k).sum().backward();
  CHECK(k.grad().to_vector<float>() == std::vector<float>{0.f});
}

TEST_CASE("nn::Linear(0, 8) gives its bias broadcast; backward reaches every parameter") {
  manual_seed(123);
  nn::Linear layer(0, 8);
  CHECK(layer.weight.shape() == Shape{8, 0});
  Tensor x = randn({5, 0}).requires_grad_(true);
  const Tensor y = layer.forward(x);
  CHECK(y.shape() == Shape{5, 8});
  CHECK(y.to_vector<float>() == layer.bias.expand({5, 8}).to_vector<float>());
  y.sum().backward();
  CHECK(layer.bias.grad().to_vector<float>() == std::vector<float>(8, 5.f));
  CHECK(layer.weight.grad().shape() == Shape{8, 0});
  CHECK(x.grad().shape() == Shape{5, 0});
  // The other way round: no outputs at all.
  nn::Linear none(8, 0);
  Tensor z = randn({5, 8}).requires_grad_(true);
  const Tensor w = none.forward(z);
  CHECK(w.shape() == Shape{5, 0});
  w.sum().backward();
  CHECK(z.grad().to_vector<float>() == std::vector<float>(40, 0.f));
}
