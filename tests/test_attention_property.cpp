// tg::scaled_dot_product_attention against the composite formula built from the library's own
// ops, on a few hundred seeded random cases: batch dims that broadcast, L != S and size-1 dims,
// masks of every shape that broadcasts to (..., L, S) (bool or additive, some needing their
// gradient), causal or not, float32 and float64, operands contiguous, transposed, padded or
// expanded. Forward and the gradients of q, k, v and an additive mask that requires grad.
// The composite (tests/attention_testing.h) runs in float64 on the same values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "tests/attention_testing.h"

using namespace tg;
using tg::testing::lay_out;
using tg::testing::Layout;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class MaskKind { none, boolean, additive };

struct Case {
  DType dt = DType::Float32;
  Shape batch;  // the broadcast leading dims
  Shape qlead, klead, vlead;
  int64_t L = 1, S = 1, E = 1, Ev = 1;
  MaskKind mask = MaskKind::none;
  Shape mask_shape;
  bool mask_grad = false, causal = false;
  std::optional<double> scale;
  Layout layout[4] = {};  // q, k, v, mask

  std::string str() const {
    std::ostringstream os;
    os << dtype_name(dt) << " q " << shape_str(qlead) << "+(" << L << "," << E << ") k "
       << shape_str(klead) << "+(" << S << "," << E << ") v " << shape_str(vlead) << "+(" << S
       << "," << Ev << ") mask " << int(mask) << " " << shape_str(mask_shape)
       << (mask_grad ? " grad" : "") << (causal ? " causal" : "") << " layouts " << int(layout[0])
       << int(layout[1]) << int(layout[2]) << int(layout[3]);
    if (scale) os << " scale " << *scale;
    return os.str();
  }
};

int64_t pick(std::mt19937& g, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(g);
}
bool chance(std::mt19937& g, double p) { return std::bernoulli_distribution(p)(g); }

// A sequence length: mostly short, sometimes across the fused kernel's 64-row/64-key blocks.
int64_t length(std::mt19937& g) { return chance(g, 0.12) ? pick(g, 60, 70) : pick(g, 1, 9); }

// `full` with some leading dims dropped and some of the rest set to 1: a shape that broadcasts
// to full. keep_last keeps that many trailing dims.
Shape broadcastable(std::mt19937& g, const Shape& full, size_t keep_last = 0) {
  const size_t drop = size_t(pick(g, 0, int64_t(full.size() - keep_last)));
  Shape s(full.begin() + ptrdiff_t(drop), full.end());
  for (int64_t& d : s)
    if (chance(g, 0.4)) d = 1;
  return s;
}

Case random_case(std::mt19937& g) {
  Case c;
  c.dt = chance(g, 0.5) ? DType::Float32 : DType::Float64;
  for (int64_t i = pick(g, 0, 2); i > 0; --i) c.batch.push_back(pick(g, 1, 3));
  c.L = length(g), c.S = length(g), c.E = pick(g, 1, 8), c.Ev = pick(g, 1, 6);
  // q keeps every batch dim, so that the op's batch is `batch`; k and v may broadcast.
  c.qlead = c.batch, c.klead = broadcastable(g, c.batch), c.vlead = broadcastable(g, c.batch);
  if (chance(g, 0.5)) std::swap(c.qlead, c.klead);  // or q broadcasts and k does not
  const int kind = int(pick(g, 0, 4));              // masks more often than not
  c.mask = kind == 0 ? MaskKind::none : kind <= 2 ? MaskKind::boolean : MaskKind::additive;
  if (c.mask != MaskKind::none) {
    Shape full = c.batch;
    full.push_back(c.L), full.push_back(c.S);
    c.mask_shape = broadcastable(g, full, 1);  // at least 1 dim
    c.mask_grad = c.mask == MaskKind::additive && chance(g, 0.35);
  }
  c.causal = c.mask == MaskKind::none && chance(g, 0.5);
  if (chance(g, 0.2)) c.scale = std::uniform_real_distribution<double>(-1.5, 1.5)(g);
  for (Layout& l : c.layout) l = Layout(pick(g, 0, testing::kLayouts - 1));
  return c;
}

Tensor operand(const Shape& shape, Layout layout, Generator& gen) {
  return lay_out(randn(shape, &gen, DType::Float64), layout);
}

// A bool mask with about 30% False, or an additive one with some -inf.
Tensor mask_values(const Case& c, Generator& gen) {
  const Tensor u = randn(c.mask_shape, &gen, DType::Float64);
  if (c.mask == MaskKind::boolean) return lay_out(gt(u, -0.5), c.layout[3]);
  return lay_out(u.masked_fill(gt(randn(c.mask_shape, &gen, DType::Float64), 1.2), -kInf),
                 c.layout[3]);
}

// max |got − want| <= tol · max(1, max |want|), NaN never.
void check_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  REQUIRE_MESSAGE(got.defined(), std::string(what) << " missing");
  REQUIRE_MESSAGE(got.shape() == want.shape(), std::string(what)
                                                   << ": shape " << shape_str(got.shape()) << " vs "
                                                   << shape_str(want.shape()));
  const testing::Closeness c = testing::closeness(got, want);
  CHECK_MESSAGE(c.diff <= tol * c.scale,
                std::string(what) << ": max diff " << c.diff << ", max |want| " << c.scale);
}

// A leaf with the values and strides of t, in dtype dt (a float64 leaf keeps t's strides).
Tensor leaf(const Tensor& t, DType dt) {
  Tensor x = t.dtype() == dt ? t.detach() : t.to(dt).detach();
  x.requires_grad_();
  return x;
}

void run_case(const Case& c, uint64_t seed) {
  Generator gen;
  gen.manual_seed(seed);
  auto shape = [](Shape lead, int64_t a, int64_t b) {
    lead.push_back(a), lead.push_back(b);
    return lead;
  };
  const Tensor q0 = operand(shape(c.qlead, c.L, c.E), c.layout[0], gen);
  const Tensor k0 = operand(shape(c.klead, c.S, c.E), c.layout[1], gen);
  const Tensor v0 = operand(shape(c.vlead, c.S, c.Ev), c.layout[2], gen);
  Tensor m0 = c.mask == MaskKind::none ? Tensor() : mask_values(c, gen);
  // Values at the op's dtype; the composite gets the same values in float64.
  const Tensor q = leaf(q0, c.dt), k = leaf(k0, c.dt), v = leaf(v0, c.dt);
  Tensor m = m0.defined() && c.mask == MaskKind::additive ? m0.to(c.dt).detach() : m0;
  if (c.mask_grad) m.requires_grad_();
  const Tensor q64 = leaf(q, DType::Float64), k64 = leaf(k, DType::Float64),
               v64 = leaf(v, DType::Float64);
  Tensor m64 = m.defined() && c.mask == MaskKind::additive ? leaf(m, DType::Float64) : m;
  const Tensor out = scaled_dot_product_attention(q, k, v, m, 0.0, c.causal, c.scale);
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(c.E));
  const Tensor want = testing::sdpa_composite(q64, k64, v64, m64, c.causal, scale);
  const double tol = c.dt == DType::Float32 ? 2e-5 : 1e-11;
  check_close(out, want, tol, "out");
  const Tensor w = randn(want.shape(), &gen, DType::Float64);  // the loss: Σ w ∘ out
  (out * w.to(c.dt)).sum().backward();
  (want * w).sum().backward();
  check_close(q.grad(), q64.grad(), tol, "dq");
  check_close(k.grad(), k64.grad(), tol, "dk");
  check_close(v.grad(), v64.grad(), tol, "dv");
  if (c.mask_grad) check_close(m.grad(), m64.grad(), tol, "dmask");
}

}  // namespace

TEST_CASE("sdpa property: 400 random cases equal the composite, forward and backward") {
  std::mt19937 g(20261126);
  for (uint64_t i = 0; i < 400; ++i) {
    const Case c = random_case(g);
    INFO("case " << i << ": " << c.str());
    run_case(c, 1000 + i);
  }
}

TEST_CASE("sdpa property: every mask shape that broadcasts, one at a time") {
  // (2, 3, L, S) weights; each mask shape a suffix of it with any dims set to 1 (a scalar too,
  // which broadcasts as well), bool and additive, needing its gradient or not: 31 shapes × 3.
  const Shape full = {2, 3, 5, 7};
  int shapes = 0;
  for (size_t rank = 0; rank <= full.size(); ++rank)
    for (unsigned ones = 0; ones < (1u << rank); ++ones) {
      Shape s(full.end() - ptrdiff_t(rank), full.end());
      for (size_t d = 0; d < rank; ++d)
        if (ones & (1u << d)) s[d] = 1;
      ++shapes;
      for (int kind = 0; kind < 3; ++kind) {
        Case c;
        c.batch = c.qlead = c.klead = c.vlead = {2, 3};
        c.L = 5, c.S = 7, c.E = 4, c.Ev = 3;
        c.mask = kind == 0 ? MaskKind::boolean : MaskKind::additive;
        c.mask_grad = kind == 2;
        c.mask_shape = s;
        for (DType dt : {DType::Float32, DType::Float64}) {
          c.dt = dt;
          INFO(c.str());
          run_case(c, uint64_t(shapes * 10 + kind));
        }
      }
    }
  CHECK(shapes == 31);
}
