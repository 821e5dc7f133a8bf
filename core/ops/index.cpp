// masked_fill (and in place), tril/triu, cat, stack and embedding.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::dispatch;
using detail::fail;
using detail::wrap;

namespace {

void check_mask(const char* op, const Tensor& a, const Tensor& mask) {
  detail::check_defined(op, a);
  detail::check_defined(op, mask);
  if (mask.dtype() != DType::Bool)
    fail(op, "the mask must be a bool tensor, got ", dtype_name(mask.dtype()),
         " (use .to(DType::Bool) as the book's mask.bool())");
  if (detail::broadcast_shapes(op, a.shape(), mask.shape()) != a.shape())
    fail(op, "mask of shape ", shape_str(mask.shape()), " does not broadcast to the input's shape ",
         shape_str(a.shape()));
}

void check_value(const char* op, const Tensor& a, double value) {
  if (!is_floating(a.dtype()) && !std::isfinite(value))
    fail(op, "cannot fill a ", dtype_name(a.dtype()), " tensor with ", value);
}

// The kernel's layout: dst contiguous, and the mask a contiguous block over dst's trailing dims,
// repeated over the leading ones (a (T, T) causal mask over (B, H, T, T) scores). Reads src (a
// contiguous tensor of dst's shape and dtype) when given, so a copy and its fill are one pass.
bool fill_where_kernel(TensorImpl& dst, const Tensor& mask, double value,
                       const TensorImpl* src = nullptr) {
  if (!is_floating(dst.dtype) || dst.strides != contiguous_strides(dst.shape) || dst.shape.empty())
    return false;
  if (src && (src->dtype != dst.dtype || src->shape != dst.shape ||
              src->strides != contiguous_strides(src->shape)))
    return false;
  const Tensor m = mask.contiguous();  // a sliced causal mask is small: copying it is cheap
  if (m.numel() == 0) return false;
  const Shape& ms = m.shape();
  const size_t lead = dst.shape.size() - ms.size();
  size_t first = 0;  // the mask's leading size-1 dims broadcast like missing ones
  while (first < ms.size() && ms[first] == 1) ++first;
  if (first == ms.size()) return false;  // a single value: no row block to repeat
  for (size_t i = first; i < ms.size(); ++i)
    if (ms[i] != dst.shape[lead + i]) return false;
  const int64_t cols = dst.shape.back();
  if (cols == 0) return true;
  const int64_t rows = numel_of(dst.shape) / cols, mask_rows = m.numel() / cols;
  const auto* pm = reinterpret_cast<const uint8_t*>(m.data<bool>());
  if (!is_floating(dst.dtype) || dst.dtype == DType::BFloat16) return false;  // the loop below
  dispatch(dst.dtype, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<T>) {
      T* p = reinterpret_cast<T*>(dst.bytes());
      const T* x = src ? reinterpret_cast<const T*>(src->bytes()) : p;
      kernels::masked_fill(rows, cols, x, pm, mask_rows, T(value), p);
    }
  });
  return true;
}

// Writes `value` into dst wherever the (broadcast) mask is true.
void fill_where(TensorImpl& dst, const Tensor& mask, double value) {
  if (fill_where_kernel(dst, mask, value)) return;
  const Shape ms = detail::broadcast_strides(*mask.impl(), dst.shape);
  const bool* pm = mask.data<bool>();
  detail::dispatch_all(dst.dtype, [&](auto z) {
    using T = decltype(z);
    T* pd = reinterpret_cast<T*>(dst.bytes());
    T v{};
    if constexpr (std::is_same_v<T, bfloat16>)
      v = bfloat16(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    detail::for_each_run<2>(dst.shape, {&dst.strides, &ms}, {0, 0},
                            [&](std::array<int64_t, 2> o, int64_t n, std::array<int64_t, 2> s) {
                              for (int64_t i = 0; i < n; ++i)
                                if (pm[o[1] + i * s[1]]) pd[o[0] + i * s[0]] = v;
                            });
  });
}

// out = mask ? value : a as a fresh tensor: one pass through the kernel when the layouts allow.
Tensor filled_copy(const Tensor& a, const Tensor& mask, double value) {
  if (a.is_contiguous()) {
    Tensor out = empty(a.shape(), a.dtype());
    if (fill_where_kernel(*out.impl(), mask, value, a.impl())) return out;
  }
  Tensor out = wrap(detail::materialize(*a.impl(), a.dtype()));
  fill_where(*out.impl(), mask, value);
  return out;
}

// The gradient of a fill: zero where the mask replaced the input.
Node::BackwardFn masked_fill_backward() {
  return [](Node& n, const Tensor& g) -> std::vector<Tensor> {
    if (gradient_reusable(g) && fill_where_kernel(*g.impl(), n.saved_tensor(0), 0.0)) return {g};
    return {filled_copy(g, n.saved_tensor(0), 0.0)};
  };
}

}  // namespace

// --- masked_fill: out = mask ? value : a;  da = mask ? 0 : g ---
// The mask is saved unexpanded and broadcast where it is applied, which keeps backward small.
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  check_mask("masked_fill", a, mask);
  check_value("masked_fill", a, value);
  Tensor out = filled_copy(a, mask, value);
  if (any_requires_grad({&a}))
    record("MaskedFillBackward0", {a}, {mask}, masked_fill_backward(), {&out});
  return out;
}

// In place: the tensor takes a new grad_fn whose edge leads to the node that made it before.
Tensor& masked_fill_(Tensor& a, const Tensor& mask, double value) {
  check_mask("masked_fill_", a, mask);
  check_value("masked_fill_", a, value);
  detail::check_inplace("masked_fill_", a);
  fill_where(*a.impl(), mask, value);
  detail::bump_version(a);
  if (any_requires_grad({&a}))
    record("MaskedFillBackward0", {a}, {mask}, masked_fill_backward(), {&a});
  return a;
}

// --- tril / triu on the last two dims: the gradient is masked the same way ---
namespace {
Tensor triangle(const char* op, const char* name, const Tensor& t, int64_t k, bool lower) {
  detail::check_defined(op, t);
  if (t.dim() < 2) fail(op, "expects at least 2 dims, got shape ", shape_str(t.shape()));
  Tensor out = wrap(detail::materialize(*t.impl(), t.dtype()));
  const int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
  const int64_t mats = R * C == 0 ? 0 : out.numel() / (R * C);
  detail::dispatch_all(t.dtype(), [&](auto z) {
    using T = decltype(z);
    T* p = out.data<T>();
    for (int64_t b = 0; b < mats; ++b)
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          const bool keep = lower ? j - i <= k : j - i >= k;
          if (!keep) p[(b * R + i) * C + j] = T(0);
        }
  });
  if (any_requires_grad({&t}))
    record(name, {t}, {},
           [k, lower](Node&, const Tensor& g) -> std::vector<Tensor> {
             return {lower ? tril(g, k) : triu(g, k)};
           },
           {&out});
  return out;
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) {
  return triangle("tril", "TrilBackward0", t, diagonal, true);
}
Tensor triu(const Tensor& t, int64_t diagonal) {
  return triangle("triu", "TriuBackward0", t, diagonal, false);
}

// --- cat: inputs are laid side by side along dim; each gets its slice of the gradient ---
namespace {
Tensor cat_impl(const char* op, const std::vector<Tensor>& ts, int64_t dim, Shape* sizes_out) {
  if (ts.empty()) fail(op, "expected a non-empty list of tensors");
  for (const Tensor& t : ts) detail::check_defined(op, t);
  const Tensor& first = ts[0];
  if (first.dim() == 0) fail(op, "zero-dimensional tensors cannot be concatenated");
  const int64_t d = detail::wrap_dim(op, dim, first.dim());
  DType dt = first.dtype();
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    dt = detail::promote(dt, t.dtype());
    bool ok = t.dim() == first.dim();
    for (int64_t j = 0; ok && j < t.dim(); ++j)
      if (j != d && t.shape()[j] != first.shape()[j]) ok = false;
    if (!ok)
      fail(op, "tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has shape ",
           shape_str(first.shape()), "; they must match except in dim ", d);
    if (__builtin_add_overflow(shape[d], t.shape()[d], &shape[d]))
      fail(op, "the sizes along dim ", d, " add up to more than ",
           std::numeric_limits<int64_t>::max(), " at tensor ", i, " (shape ", shape_str(t.shape()),
           ")");
    sizes_out->push_back(t.shape()[d]);
  }
  Tensor out = detail::empty_for(op, shape, dt);
  int64_t at = 0;
  for (const Tensor& t : ts) {
    Shape sub = shape;
    sub[d] = t.shape()[d];
    auto region = alias_impl(*out.impl(), sub, out.strides(), at * out.strides()[d]);
    detail::copy_into(*region, *t.impl());
    at += t.shape()[d];
  }
  return out;
}
}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  Shape sizes;
  Tensor out = cat_impl("cat", ts, dim, &sizes);
  if (any_requires_grad(ts)) {
    const int64_t d = detail::wrap_dim("cat", dim, ts[0].dim());
    record("CatBackward0", ts, {},
           [sizes, d](Node& n, const Tensor& g) -> std::vector<Tensor> {
             std::vector<Tensor> gs;
             int64_t at = 0;
             for (size_t i = 0; i < sizes.size(); ++i) {
               gs.push_back(n.needs(i) ? g.narrow(d, at, sizes[i]) : Tensor());
               at += sizes[i];
             }
             return gs;
           },
           {&out});
  }
  return out;
}

// --- stack: cat of the inputs each with a new dim; input i's gradient is g.select(dim, i) ---
Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  if (ts.empty()) fail("stack", "expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    detail::check_defined("stack", ts[i]);
    if (ts[i].shape() != ts[0].shape())
      fail("stack", "tensor ", i, " has shape ", shape_str(ts[i].shape()),
           " but tensor 0 has shape ", shape_str(ts[0].shape()), "; all must be equal");
  }
  const int64_t d = detail::wrap_dim("stack", dim, ts[0].dim() + 1);
  std::vector<Tensor> parts;
  for (const Tensor& t : ts) parts.push_back(t.detach().unsqueeze(d));
  Shape sizes;
  Tensor out = cat_impl("stack", parts, d, &sizes);
  if (any_requires_grad(ts))
    record("StackBackward0", ts, {},
           [count = ts.size(), d](Node& n, const Tensor& g) -> std::vector<Tensor> {
             std::vector<Tensor> gs;
             for (size_t i = 0; i < count; ++i)
               gs.push_back(n.needs(i) ? g.select(d, int64_t(i)) : Tensor());
             return gs;
           },
           {&out});
  return out;
}

// --- embedding: out[..., :] = weight[ids[...], :];  dweight[id] += g[...] (scatter-add) ---
Tensor embedding(const Tensor& ids, const Tensor& weight) {
  detail::check_defined("embedding", ids);
  detail::check_floating("embedding", weight);
  if (ids.dtype() != DType::Int64)
    fail("embedding", "ids must be int64, got ", dtype_name(ids.dtype()));
  if (weight.dim() != 2)
    fail("embedding", "weight must be 2-D (num_embeddings, embedding_dim), got ",
         shape_str(weight.shape()));
  const int64_t num = weight.shape()[0], D = weight.shape()[1];
  const Tensor idc = ids.contiguous();
  const int64_t* ip = idc.data<int64_t>();
  const int64_t n = idc.numel();
  for (int64_t i = 0; i < n; ++i)
    if (ip[i] < 0 || ip[i] >= num)
      throw std::out_of_range("embedding: index " + std::to_string(ip[i]) +
                              " is out of range for " + std::to_string(num) + " rows (weight " +
                              shape_str(weight.shape()) + ")");
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = detail::empty_for("embedding", shape, weight.dtype());
  const Tensor w = weight.detach().contiguous();
  detail::dispatch_all(weight.dtype(), [&](auto z) {  // a gather of rows
    using T = decltype(z);
    const T* pw = w.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < n; ++i) std::memcpy(po + i * D, pw + ip[i] * D, size_t(D) * sizeof(T));
  });
  if (any_requires_grad({&weight}))
    record("EmbeddingBackward0", {ids, weight}, {idc},
           [num, D](Node& nd, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& id = nd.saved_tensor(0);
             const int64_t* p = id.data<int64_t>();
             const Tensor gc = detail::widen(g).contiguous();  // bf16 sums in float32
             Tensor gw = zeros({num, D}, gc.dtype());
             dispatch(gc.dtype(), [&](auto z) {
               using T = decltype(z);
               const T* pg = gc.data<T>();
               T* pw = gw.data<T>();
               for (int64_t i = 0, n = id.numel(); i < n; ++i)
                 for (int64_t j = 0; j < D; ++j) pw[p[i] * D + j] += pg[i * D + j];
             });
             return {Tensor(), gw.to(g.dtype())};
           },
           {&out});
  return out;
}

}  // namespace tg
