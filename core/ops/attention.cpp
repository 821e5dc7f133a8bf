// scaled_dot_product_attention: PyTorch 2's F.scaled_dot_product_attention as one node on the
// tape, over the fused kernel of core/kernels/attention.cpp (float32) or its row-by-row reference
// (float64). The composite it replaces, the book's §3.5 formula:
//   attn = softmax(q·kᵀ · scale + mask) (causal: j ≤ i),  attn = dropout(attn, p),  out = attn · v
//
// Forward (per matrix of the batch; the kernel stores only out and the row's log-sum-exp):
//   x = q·kᵀ · scale + mask;  lse = log Σ_j exp(x);  P = exp(x − lse);  out = (P ∘ keep) · v
// Backward (llm.c's attention_backward, P recomputed from lse instead of stored):
//   in the forward: out = (P ∘ keep) · v  so  dv = (P ∘ keep)ᵀ · dout,  dP = (dout · vᵀ) ∘ keep
//   in the forward: P = softmax(x)  so  dx = P ∘ (dP − D),  D = rowsum(P ∘ dP) = rowsum(dout ∘ out)
//   in the forward: x = q·kᵀ · scale  so  dq = dx · k · scale,  dk = dxᵀ · q · scale
// A float attn_mask that requires grad takes the composite route (PyTorch's math path does too),
// so that its gradient exists; any other mask is fused.
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/rng.h"

namespace tg {

using detail::fail;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
Shape with_last2(Shape lead, int64_t a, int64_t b) {
  lead.push_back(a);
  lead.push_back(b);
  return lead;
}

// The operands' shapes, checked and broadcast: batch (the leading dims), L, S, E, Ev.
struct Dims {
  Shape batch;
  int64_t L = 0, S = 0, E = 0, Ev = 0;
};

Dims check_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (auto [name, t] : {std::pair{"query", &q}, {"key", &k}, {"value", &v}})
    if (!t->defined()) fail(kOp, name, " is an undefined tensor");
  if (!is_floating(q.dtype()))
    fail(kOp, "query must be a floating-point tensor, got ", dtype_name(q.dtype()), " ",
         shape_str(q.shape()));
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(kOp, "query, key and value must have the same dtype, got ", dtype_name(q.dtype()), ", ",
         dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  const std::string shapes =
      shape_str(q.shape()) + ", key " + shape_str(k.shape()) + ", value " + shape_str(v.shape());
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(kOp, "query (..., L, E), key (..., S, E) and value (..., S, Ev) need at least 2 dims, ",
         "got query ", shapes);
  if (q.size(-1) != k.size(-1))
    fail(kOp, "query and key must have the same last dim E, got query ", shapes);
  if (k.size(-2) != v.size(-2))
    fail(kOp, "key and value must have the same number of rows S, got query ", shapes);
  Dims d;
  try {
    d.batch = detail::broadcast_shapes(
        kOp, detail::broadcast_shapes(kOp, leading(q.shape()), leading(k.shape())),
        leading(v.shape()));
  } catch (const std::invalid_argument&) {
    fail(kOp, "the leading dims of query, key and value do not broadcast, got query ", shapes);
  }
  d.L = q.size(-2), d.S = k.size(-2), d.E = q.size(-1), d.Ev = v.size(-1);
  return d;
}

// The mask as the kernel reads it: additive, in the query's dtype, of its own shape (the kernel
// broadcasts it to (..., L, S) through strides, see batched_mask), its keys adjacent or all one
// value (a last dim of size 1 or stride 0); any other last-dim stride (a transposed mask) is
// copied. A bool mask keeps True (0) and removes False (-inf), as PyTorch's.
Tensor additive_mask(const Tensor& mask, const Tensor& q, const Dims& d) {
  if (mask.dtype() != DType::Bool && mask.dtype() != q.dtype())
    fail(kOp, "attn_mask must be bool or have the query's dtype ", dtype_name(q.dtype()), ", got ",
         dtype_name(mask.dtype()));
  const Shape full = with_last2(d.batch, d.L, d.S);
  Shape b;
  try {
    b = detail::broadcast_shapes(kOp, mask.shape(), full);
  } catch (const std::invalid_argument&) {
    b.clear();
  }
  if (b != full)
    fail(kOp, "attn_mask of shape ", shape_str(mask.shape()),
         " does not broadcast to the attention weights' shape ", shape_str(full));
  Tensor m = mask.detach();
  if (mask.dtype() == DType::Bool)
    m = where(m, zeros({}, q.dtype()),
              tg::full({}, -std::numeric_limits<double>::infinity(), q.dtype()));
  if (m.dim() > 0 && m.size(-1) > 1 && m.strides().back() > 1) m = m.contiguous();  // transposed
  return m;
}

// Offsets (in elements from e's first element) of the matrices of e, whose leading dims are
// `batch` (0 strides on those it broadcasts over).
std::vector<int64_t> batch_offsets(const Tensor& e, const Shape& batch) {
  const int64_t nb = int64_t(batch.size());
  std::vector<int64_t> off(size_t(numel_of(batch)), 0);
  Shape idx(size_t(nb), 0);
  for (size_t n = 0; n < off.size(); ++n) {
    int64_t o = 0;
    for (int64_t d = 0; d < nb; ++d) o += idx[size_t(d)] * e.strides()[size_t(d)];
    off[n] = o;
    for (int64_t d = nb - 1; d >= 0 && ++idx[size_t(d)] == batch[size_t(d)]; --d)
      idx[size_t(d)] = 0;
  }
  return off;
}

// A tensor as the kernel reads it, a batch of matrices: the tensor (unit column stride, else a
// contiguous copy), which keeps the storage alive, and its matrices' offsets.
template <class T>
struct BatchedTensor {
  Tensor tensor;
  std::vector<int64_t> off;
  kernels::MatrixBatch<T> matrices() const {
    using U = std::remove_const_t<T>;
    return {const_cast<T*>(tensor.template data<U>()), tensor.strides()[size_t(tensor.dim() - 2)],
            off.data()};
  }
};
template <class T>
BatchedTensor<T> batched(const Tensor& x, const Shape& batch) {
  Tensor t = x.strides().back() == 1 || x.size(-1) == 1 ? x.detach() : x.detach().contiguous();
  std::vector<int64_t> off =
      batch_offsets(t.expand(with_last2(batch, t.size(-2), t.size(-1))), batch);
  return {t, std::move(off)};
}
// The additive mask broadcast to batch + (L, S) by strides: the view's row stride is 0 where the
// mask has one row, its column stride (cs) 0 where it has one column, else 1 (additive_mask).
template <class T>
BatchedTensor<const T> batched_mask(const Tensor& mask, const Dims& d, int64_t& cs) {
  const Tensor e = mask.expand(with_last2(d.batch, d.L, d.S));
  cs = d.S > 1 ? e.strides().back() : 1;
  std::vector<int64_t> off = batch_offsets(e, d.batch);
  return {e, std::move(off)};
}

// A result of shape batch + (rows, cols), laid out as `like` is (PyTorch's CPU flash kernel does
// the same): when like's heads (dim -3) sit inside its rows, as the chapter's MultiHeadAttention's
// q = W_query(x).view(b, T, h, d).transpose(1, 2) does, the result is (..., rows, heads, cols) in
// memory, so merging the heads back is a view, not a copy. Otherwise contiguous.
Tensor new_result(const Tensor& like, const Shape& batch, int64_t rows, int64_t cols, DType dt) {
  const int64_t nd = like.dim();
  const bool heads_inside = batch.size() >= 2 && nd >= 4 && like.size(-3) > 1 &&
                            like.strides()[size_t(nd - 3)] < like.strides()[size_t(nd - 2)];
  if (!heads_inside) return empty(with_last2(batch, rows, cols), dt);
  // Memory (..., rows, heads, cols): allocate that, then give the same storage the geometry of
  // (..., heads, rows, cols) (an alias, not a view: nothing else holds the buffer).
  Shape mem(batch.begin(), batch.end() - 1);
  mem.insert(mem.end(), {rows, batch.back(), cols});
  const Tensor buf = empty(mem, dt);
  const size_t n = mem.size();
  Shape strides = buf.strides();
  std::swap(strides[n - 3], strides[n - 2]);
  return Tensor(alias_impl(*buf.impl(), with_last2(batch, rows, cols), strides, 0));
}

// The bits of the composite's dropout mask over [batch, L, S], drawn as F.dropout draws them.
std::shared_ptr<std::vector<uint64_t>> draw_keep_bits(int64_t n, double p, Generator* gen) {
  auto bits = std::make_shared<std::vector<uint64_t>>(size_t((n + 63) / 64), uint64_t{0});
  if (p < 1) dropout_keep_bits(bits->data(), n, p, gen ? *gen : default_generator());
  return bits;  // p == 1: nothing kept, nothing drawn (F.dropout returns x * 0)
}

// The composite route, for a mask that needs its gradient. A row that no key reaches gives 0 and
// passes no gradient back, as the fused route (and PyTorch's _safe_softmax) does: its scores are
// replaced by 0 before the softmax, whose weights and gradient would be NaN on a row of -inf
// (NaN · 0 is NaN, so zeroing its weights afterwards alone would not stop that gradient).
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p,
                 double scale, Generator* gen) {
  const Tensor x = matmul(q, k.transpose(-2, -1)) * scale + mask;
  if (x.size(-1) == 0) return matmul(x, v);  // no key at all: every row is an empty sum, 0
  const Tensor none =
      eq(std::get<0>(max(x.detach(), -1, true)), -std::numeric_limits<double>::infinity());
  const Tensor w = softmax(x.masked_fill(none, 0.0), -1).masked_fill(none, 0.0);
  return matmul(dropout(w, p, true, gen), v);
}

// The problem the kernel solves, over operands it can read.
template <class T>
struct Prepared {
  Dims d;
  bool causal = false;
  double scale = 1;
  BatchedTensor<const T> q, k, v, mask;  // mask.tensor undefined: none
  int64_t mask_cs = 1;
  std::shared_ptr<std::vector<uint64_t>> bits;
  T keep_scale = 1;

  kernels::AttnProblem<T> problem() const {
    kernels::AttnProblem<T> p;
    p.batch = numel_of(d.batch), p.L = d.L, p.S = d.S, p.E = d.E, p.Ev = d.Ev;
    p.scale = T(scale), p.causal = causal;
    p.q = q.matrices(), p.k = k.matrices(), p.v = v.matrices();
    if (mask.tensor.defined()) p.mask = mask.matrices(), p.mask_cs = mask_cs;
    if (bits) p.keep_bits = bits->data(), p.keep_scale = keep_scale;
    return p;
  }
};

template <class T>
Prepared<T> prepare(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                    const Dims& d, bool causal, double scale) {
  Prepared<T> pr;
  pr.d = d, pr.causal = causal, pr.scale = scale;
  pr.q = batched<const T>(q, d.batch);
  pr.k = batched<const T>(k, d.batch);
  pr.v = batched<const T>(v, d.batch);
  if (mask.defined()) pr.mask = batched_mask<T>(mask, d, pr.mask_cs);
  return pr;
}

// F.dropout's kept value: 1/(1-p) rounded to the dtype, as its mask holds it.
template <class T>
T keep_scale_of(double p) {
  if (p >= 1) return T(0);
  return std::is_same_v<T, float> ? T(1.0f / float(1 - p)) : T(1.0 / (1 - p));
}

template <class T>
Tensor fused(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
             const Dims& d, bool causal, double scale, double p, Generator* gen) {
  Prepared<T> pr = prepare<T>(query, key, value, mask, d, causal, scale);
  const int64_t nb = numel_of(d.batch);
  if (p > 0) pr.bits = draw_keep_bits(nb * d.L * d.S, p, gen), pr.keep_scale = keep_scale_of<T>(p);
  Tensor out = new_result(query, d.batch, d.L, d.Ev, query.dtype());
  Tensor lse = empty({nb * d.L}, query.dtype());
  try {  // the kernel packs each problem's kᵀ (S × E): an expanded key can be too long for it
    kernels::sdpa_forward(pr.problem(), batched<T>(out, d.batch).matrices(), lse.data<T>());
  } catch (const std::bad_alloc&) {
    fail(kOp, "out of memory packing a key of length ", d.S, " (query ", shape_str(query.shape()),
         ", key ", shape_str(key.shape()), ")");
  }
  if (!any_requires_grad({&query, &key, &value})) return out;
  std::vector<Tensor> save = {query, key, value, out, lse};
  if (mask.defined()) save.push_back(mask);
  record("ScaledDotProductFlashAttentionForCpuBackward0", {query, key, value}, save,
         [d, causal, scale, bits = pr.bits, ks = pr.keep_scale](
             Node& n, const Tensor& g) -> std::vector<Tensor> {
           const Tensor &q = n.saved_tensor(0), &k = n.saved_tensor(1), &v = n.saved_tensor(2);
           Prepared<T> pr = prepare<T>(q, k, v, n.saved.size() > 5 ? n.saved_tensor(5) : Tensor(),
                                       d, causal, scale);
           pr.bits = bits, pr.keep_scale = ks;
           const auto out = batched<const T>(n.saved_tensor(3), d.batch);
           const auto dout = batched<const T>(g, d.batch);
           const auto dq = batched<T>(new_result(q, d.batch, d.L, d.E, g.dtype()), d.batch);
           const auto dk = batched<T>(new_result(k, d.batch, d.S, d.E, g.dtype()), d.batch);
           const auto dv = batched<T>(new_result(v, d.batch, d.S, d.Ev, g.dtype()), d.batch);
           kernels::sdpa_backward(pr.problem(), out.matrices(), dout.matrices(),
                                  n.saved_tensor(4).template data<T>(), dq.matrices(),
                                  dk.matrices(), dv.matrices());
           // Leading dims an input broadcast over get their gradients summed back.
           return {n.needs(0) ? sum_to(dq.tensor, q.shape()) : Tensor(),
                   n.needs(1) ? sum_to(dk.tensor, k.shape()) : Tensor(),
                   n.needs(2) ? sum_to(dv.tensor, v.shape()) : Tensor()};
         },
         {&out});
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  if (autocast_enabled()) {
    const Tensor q = detail::autocast_bf16(query), k = detail::autocast_bf16(key);
    const Tensor v = detail::autocast_bf16(value);
    if (!q.same(query) || !k.same(key) || !v.same(value))
      return scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  }
  const Dims d = check_shapes(query, key, value);
  if (query.dtype() == DType::BFloat16) {  // in float32, the result rounded once
    AutocastGuard in_float32(false);
    const auto f32 = [](const Tensor& t) {
      return t.defined() && is_floating(t.dtype()) ? t.to(DType::Float32) : t;
    };
    return scaled_dot_product_attention(f32(query), f32(key), f32(value), f32(attn_mask), dropout_p,
                                        is_causal, scale, gen)
        .to(DType::BFloat16);
  }
  if (!(dropout_p >= 0 && dropout_p <= 1))
    fail(kOp, "dropout_p must be in [0, 1], got ", dropout_p);
  if (scale && !std::isfinite(*scale)) fail(kOp, "scale must be finite, got ", *scale);
  if (is_causal && attn_mask.defined())
    fail(kOp, "an explicit attn_mask cannot be combined with is_causal=true");
  if (!scale && d.E == 0)
    fail(kOp, "query and key have E = 0, where the default scale 1/sqrt(E) is undefined (pass a ",
         "scale)");
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(d.E));
  Tensor mask = attn_mask.defined() ? additive_mask(attn_mask, query, d) : Tensor();
  if (attn_mask.defined() && attn_mask.requires_grad() && grad_enabled())
    return composite(query, key, value, attn_mask, dropout_p, sc, gen);
  return detail::dispatch_float(kOp, query.dtype(), [&](auto z) {
    return fused<decltype(z)>(query, key, value, mask, d, is_causal, sc, dropout_p, gen);
  });
}

}  // namespace tg
