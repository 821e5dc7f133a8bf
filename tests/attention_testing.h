// Shared by the attention property test (tests/test_attention_property.cpp) and the attention
// fuzz harness (fuzz/fuzz_attention.cpp): operands laid out in memory in several ways, and
// scaled_dot_product_attention's composite formula built from the library's own ops.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"

namespace tg::testing {

// How an operand sits in memory; its shape and (but for `expanded`) its values do not change.
enum class Layout { contiguous, transposed, padded, expanded };
constexpr int kLayouts = 4;

// t laid out as `layout` asks: transposed storage of its last two dims, rows padded by 3
// elements, or (expanded) index 0 of every even-sized dim repeated through a stride of 0.
inline Tensor lay_out(const Tensor& t, Layout layout) {
  if (layout == Layout::transposed && t.dim() >= 2)
    return t.transpose(-2, -1).contiguous().transpose(-2, -1);
  if (layout == Layout::padded && t.dim() >= 1) {
    Shape wide = t.shape();
    wide.back() += 3;
    Tensor p = zeros(wide, t.dtype()).narrow(-1, 1, t.size(-1));
    p.copy_(t);
    return p;
  }
  if (layout == Layout::expanded) {
    Tensor e = t;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) > 0 && t.size(d) % 2 == 0) e = e.narrow(d, 0, 1);
    return e.expand(t.shape());
  }
  return t;
}

// softmax(q·kᵀ·scale + mask)·v from matmul, masked_fill, add and softmax: causal entries (j > i)
// and a bool mask's False entries -inf, an additive mask added, and a row where every score is
// -inf set to 0 with gradient 0 (PyTorch's _safe_softmax). q, k, v and an additive mask in one
// floating dtype; mask undefined for none.
inline Tensor sdpa_composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             bool causal, double scale) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = matmul(q, k.transpose(-2, -1)) * scale;
  if (causal) x = x.masked_fill(triu(ones({q.size(-2), k.size(-2)}), 1).to(DType::Bool), -inf);
  if (mask.defined() && mask.dtype() == DType::Bool)  // added, so that it may widen x's batch
    x = x + where(mask, zeros({}, x.dtype()), full({}, -inf, x.dtype()));
  else if (mask.defined())
    x = x + mask;
  const Tensor none = eq(std::get<0>(x.detach().max(-1, true)), -inf);  // no key reaches the row
  return matmul(softmax(x.masked_fill(none, 0.0), -1).masked_fill(none, 0.0), v);
}

// max |got − want| and max(1, max |want|), in float64; the difference is +inf if either holds a
// NaN.
struct Closeness {
  double diff = 0, scale = 1;
};
inline Closeness closeness(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> b = want.to(DType::Float64).contiguous().to_vector<double>();
  Closeness c;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) c.diff = std::numeric_limits<double>::infinity();
    c.diff = std::max(c.diff, std::fabs(a[i] - b[i]));
    c.scale = std::max(c.scale, std::fabs(b[i]));
  }
  return c;
}

}  // namespace tg::testing
