// tg::scaled_dot_product_attention's argument checking on any bytes. The bytes choose, kept
// small: dtypes, ranks and shapes of query, key, value and attn_mask (batch dims 0 to 4, the
// last two 0 to 6 or, rarely, 60 to 69 to cross the kernel's 64-row blocks), their layouts in
// memory (transposed, padded, stride-0), is_causal, dropout_p, scale and which inputs require grad.
// The harness decides on its own whether PyTorch 2's rules accept the call; then the op must either
// throw std::invalid_argument starting "scaled_dot_product_attention: " (refused) or return the
// result of the broadcast shape (accepted), never anything else. An accepted call without dropout
// must also equal the composite formula (tests/attention_testing.h); its backward gives every input
// that requires grad a gradient of its shape.
//
// Byte layout (a missing byte reads as 0): flags, then per operand q, k, v, mask: dtype, rank,
// dims, layout; then dropout, scale, seed.
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/impl.h"
#include "core/ops.h"
#include "core/rng.h"
#include "fuzz/fuzz.h"
#include "tests/attention_testing.h"

using namespace tg;

namespace {

struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

// Bits of the first byte.
enum Flag : uint8_t {
  kHasMask = 1,
  kCausal = 2,
  kGradQ = 4,
  kGradK = 8,
  kGradV = 16,
  kGradMask = 32,
  kMixDtypes = 64,  // k, v and the mask draw their own dtype instead of the query's
};

DType dtype_of(uint8_t b) {
  constexpr DType kDtypes[] = {DType::Float32, DType::Float32, DType::Float32, DType::Float64,
                               DType::Float64, DType::Int64,   DType::Bool,    DType::Float32};
  return kDtypes[b & 7];
}

struct Operand {
  DType dt = DType::Float32;
  Shape shape;
  testing::Layout layout = testing::Layout::contiguous;
};

Operand read_operand(Bytes& in, DType default_dt, bool own_dtype, int max_rank) {
  Operand o;
  const uint8_t d = in.next();
  o.dt = own_dtype ? dtype_of(d) : default_dt;
  const int rank = in.next() % (max_rank + 1);
  for (int i = 0; i < rank; ++i) {  // batch dims 0 to 4; L, S, E, Ev 0 to 6 or 60 to 69
    const uint8_t b = in.next();
    o.shape.push_back(i < rank - 2 ? b % 5 : b >= 250 ? 60 + b % 10 : b % 7);
  }
  o.layout = testing::Layout(in.next() % testing::kLayouts);
  return o;
}

// Standard-normal values (a bool operand: about 70% True; an additive mask: some -inf), laid out.
Tensor make(const Operand& o, bool additive_mask, Generator& gen) {
  if (numel_of(o.shape) == 0) return testing::lay_out(zeros(o.shape, o.dt), o.layout);
  const Tensor u = randn(o.shape, &gen, DType::Float64);
  Tensor t = o.dt == DType::Bool ? gt(u, -0.5) : u.to(o.dt);
  if (additive_mask && is_floating(o.dt)) t.masked_fill_(gt(randn(o.shape, &gen), 1.2), -INFINITY);
  return testing::lay_out(t, o.layout);
}

// NumPy's broadcast of two shapes, or nullopt.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

struct Call {
  Operand q, k, v, mask;
  bool has_mask = false, causal = false, grad[4] = {};
  double dropout = 0;
  std::optional<double> scale;
};

Call read_call(Bytes& in) {
  Call c;
  const uint8_t flags = in.next();
  const bool mix = flags & kMixDtypes;
  c.q = read_operand(in, DType::Float32, true, 4);
  c.k = read_operand(in, c.q.dt, mix, 4);
  c.v = read_operand(in, c.q.dt, mix, 4);
  c.has_mask = flags & kHasMask;
  c.mask = read_operand(in, in.next() % 2 ? DType::Bool : c.q.dt, mix, 5);
  c.causal = flags & kCausal;
  c.grad[0] = flags & kGradQ, c.grad[1] = flags & kGradK, c.grad[2] = flags & kGradV;
  c.grad[3] = flags & kGradMask;
  constexpr double kDropouts[] = {0, 0, 0, 0.25, 1, -0.5, 1.5, NAN};
  c.dropout = kDropouts[in.next() % 8];
  constexpr double kScales[] = {0, 0, 0.5, -2, 0, INFINITY, NAN, 1e30};
  const uint8_t s = in.next() % 8;
  if (s >= 2) c.scale = kScales[s];
  return c;
}

Shape lead(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
Shape with_last2(Shape s, int64_t a, int64_t b) {
  s.push_back(a), s.push_back(b);
  return s;
}

// The result's shape when PyTorch 2's rules accept the call, else nullopt.
std::optional<Shape> expected_shape(const Call& c) {
  const Shape &q = c.q.shape, &k = c.k.shape, &v = c.v.shape;
  if (!is_floating(c.q.dt) || c.k.dt != c.q.dt || c.v.dt != c.q.dt) return std::nullopt;
  if (q.size() < 2 || k.size() < 2 || v.size() < 2) return std::nullopt;
  if (q.back() != k.back() || k[k.size() - 2] != v[v.size() - 2]) return std::nullopt;
  const std::optional<Shape> qk = broadcast(lead(q), lead(k));
  const std::optional<Shape> batch = qk ? broadcast(*qk, lead(v)) : std::nullopt;
  if (!batch) return std::nullopt;
  if (!(c.dropout >= 0 && c.dropout <= 1)) return std::nullopt;
  if (c.scale && !std::isfinite(*c.scale)) return std::nullopt;
  if (c.causal && c.has_mask) return std::nullopt;
  if (!c.scale && q.back() == 0) return std::nullopt;
  if (c.has_mask) {
    if (c.mask.dt != DType::Bool && c.mask.dt != c.q.dt) return std::nullopt;
    const Shape weights = with_last2(*batch, q[q.size() - 2], k[k.size() - 2]);
    if (broadcast(c.mask.shape, weights) != weights) return std::nullopt;
  }
  return with_last2(*batch, q[q.size() - 2], v.back());
}

bool moderate_scale(const Call& c) { return !c.scale || std::fabs(*c.scale) <= 100; }

// An accepted call without dropout gives the composite's values (a huge scale may round
// differently in float32, so only moderate ones are compared).
void check_values(const Call& c, const Tensor& out, const Tensor (&in)[4]) {
  if (c.dropout != 0 || !moderate_scale(c) || out.numel() == 0) return;
  if (c.k.shape[c.k.shape.size() - 2] == 0) {  // no key: every row is 0
    for (double x : out.to(DType::Float64).contiguous().to_vector<double>()) TG_FUZZ_CHECK(x == 0);
    return;
  }
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(c.q.shape.back()));
  auto f64 = [](const Tensor& t) { return t.defined() ? t.detach().to(DType::Float64) : t; };
  const Tensor mask = in[3].defined() && in[3].dtype() == DType::Bool ? in[3] : f64(in[3]);
  const Tensor want =
      testing::sdpa_composite(f64(in[0]), f64(in[1]), f64(in[2]), mask, c.causal, scale);
  const testing::Closeness d = testing::closeness(out, want);
  TG_FUZZ_CHECK(d.diff <= (c.q.dt == DType::Float32 ? 1e-4 : 1e-10) * d.scale);
}

// The backward gives every input that requires grad a gradient of its shape, finite for a
// moderate scale.
void check_grads(const Call& c, const Tensor& out, const Tensor (&in)[4]) {
  if (!out.requires_grad()) return;
  out.sum().backward();
  for (const Tensor& t : in) {
    if (!t.defined() || !t.requires_grad()) continue;
    TG_FUZZ_CHECK(t.grad().defined() && t.grad().shape() == t.shape());
    if (moderate_scale(c))
      for (double x : t.grad().to(DType::Float64).contiguous().to_vector<double>())
        TG_FUZZ_CHECK(std::isfinite(x));
  }
}

}  // namespace

TG_FUZZ_ENTRY(attention) {
  Bytes in{data, size};
  const Call c = read_call(in);
  Generator gen;
  gen.manual_seed(in.next());
  Tensor t[4] = {make(c.q, false, gen), make(c.k, false, gen), make(c.v, false, gen),
                 c.has_mask ? make(c.mask, true, gen) : Tensor()};
  for (int i = 0; i < 4; ++i)
    if (c.grad[i] && t[i].defined() && is_floating(t[i].dtype())) t[i].requires_grad_();
  const std::optional<Shape> want = expected_shape(c);
  Tensor out;
  try {
    out = scaled_dot_product_attention(t[0], t[1], t[2], t[3], c.dropout, c.causal, c.scale, &gen);
  } catch (const std::invalid_argument& e) {
    const bool named = std::string(e.what()).rfind("scaled_dot_product_attention: ", 0) == 0;
    if (!named || want) std::fprintf(stderr, "refused: %s\n", e.what());
    TG_FUZZ_CHECK(named);
    TG_FUZZ_CHECK(!want);
    return 0;
  }
  TG_FUZZ_CHECK(want && out.shape() == *want);
  check_values(c, out, t);
  check_grads(c, out, t);
  return 0;
}
