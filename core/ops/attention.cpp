// scaled_dot_product_attention: PyTorch 2's F.scaled_dot_product_attention as one node on the
// tape, over the fused kernel of core/kernels/attention.cpp (float32), its bfloat16 variant
// attention_bf16.cpp (bf16 q, k, v, also under autocast: products in bf16, softmax and sums in
// float32, the weights rounded to bf16 where PyTorch's CPU flash kernel rounds them) or its
// row-by-row reference (float64). The composite it replaces, the book's §3.5 formula:
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
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <unordered_map>
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

// The kernels pack each problem's key (kᵀ S × E, and v): an expanded key can be too long for it.
// Worded as every other allocation's failure, "(out of memory)" last.
[[noreturn]] void packing_out_of_memory(int64_t S, const Tensor& query, const Tensor& key) {
  fail(kOp, "cannot pack a key of length ", S, " for query ", shape_str(query.shape()), " and key ",
       shape_str(key.shape()), " (out of memory)");
}

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
Tensor additive_mask(const Tensor& mask, DType dt, const Dims& d) {
  if (mask.dtype() != DType::Bool && mask.dtype() != dt)
    fail(kOp, "attn_mask must be bool or have the query's dtype ", dtype_name(dt), ", got ",
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
    m = where(m, zeros({}, dt), tg::full({}, -std::numeric_limits<double>::infinity(), dt));
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

// The kernels' element type for T: bfloat16 is read as its bits (kernels.h), others as they are.
template <class T>
struct KernelElem {
  using type = T;
};
template <>
struct KernelElem<bfloat16> {
  using type = uint16_t;
};
template <class T>
auto kernel_view(kernels::MatrixBatch<T> m) {
  using E = typename KernelElem<std::remove_const_t<T>>::type;
  using U = std::conditional_t<std::is_const_v<T>, const E, E>;
  return kernels::MatrixBatch<U>{reinterpret_cast<U*>(m.base), m.ld, m.off};
}

// The problem the kernel solves, over operands it can read: q, k, v of type T, the mask and the
// scales of type F (float32 for bfloat16's kernel).
template <class T, class F = T>
struct Prepared {
  Dims d;
  bool causal = false;
  double scale = 1;
  BatchedTensor<const T> q, k, v;
  BatchedTensor<const F> mask;  // mask.tensor undefined: none
  int64_t mask_cs = 1;
  std::shared_ptr<std::vector<uint64_t>> bits;
  F keep_scale = 1;

  kernels::AttnProblem<typename KernelElem<T>::type, F> problem() const {
    kernels::AttnProblem<typename KernelElem<T>::type, F> p;
    p.batch = numel_of(d.batch), p.L = d.L, p.S = d.S, p.E = d.E, p.Ev = d.Ev;
    p.scale = F(scale), p.causal = causal;
    p.q = kernel_view(q.matrices()), p.k = kernel_view(k.matrices());
    p.v = kernel_view(v.matrices());
    if (mask.tensor.defined()) p.mask = mask.matrices(), p.mask_cs = mask_cs;
    if (bits) p.keep_bits = bits->data(), p.keep_scale = keep_scale;
    return p;
  }
};

template <class T, class F = T>
Prepared<T, F> prepare(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const Dims& d, bool causal, double scale) {
  Prepared<T, F> pr;
  pr.d = d, pr.causal = causal, pr.scale = scale;
  pr.q = batched<const T>(q, d.batch);
  pr.k = batched<const T>(k, d.batch);
  pr.v = batched<const T>(v, d.batch);
  if (mask.defined()) pr.mask = batched_mask<F>(mask, d, pr.mask_cs);
  return pr;
}

// The tiles of the kernel's grid that a mask empties (every key -inf), for the kernel to skip
// through flex attention's hook (kernels.h: AttnScoreMod), as it skips causal tiles past the
// diagonal. Skipping one changes no bit: its P is 0, so the online softmax's m, l and O pass
// through it unchanged (alpha = 1) and its gradients are 0. The bonus notebook's section 6 mask
// (triu(ones, 1).bool(), True: takes part) empties half the tiles. Every other tile runs with its
// mask as before. Problems that share a mask matrix (a mask broadcast over batch and heads) share
// one scan. Not used when q or k holds a NaN or an infinity: an emptied tile would then carry
// NaN (NaN + -inf) into its rows, as PyTorch's kernel does, and skipping would drop it.
class MaskTiles final : public kernels::AttnScoreMod {
 public:
  MaskTiles(const kernels::AttnProblem<float>& p, kernels::AttnTileSize ts)
      : nbr_((p.L + ts.br - 1) / ts.br), nbc_((p.S + ts.bc - 1) / ts.bc) {
    std::unordered_map<int64_t, size_t> seen;  // mask offset -> its scan in empty_
    which_.resize(size_t(p.batch));
    for (int64_t n = 0; n < p.batch; ++n) {
      const auto [at, fresh] = seen.emplace(p.mask.off[n], seen.size());
      which_[size_t(n)] = at->second;
      if (fresh) scan(p, ts, n);
    }
  }
  bool any_empty() const { return std::find(empty_.begin(), empty_.end(), 1) != empty_.end(); }
  kernels::TileInfo tile(int64_t n, int64_t ib, int64_t jb) const override {
    const size_t at = which_[size_t(n)] * size_t(nbr_ * nbc_) + size_t(ib * nbc_ + jb);
    return {empty_[at] ? kernels::TileKind::empty : kernels::TileKind::full, 0};
  }
  // No tile is partial, so the kernel never asks these.
  bool rewrite(int64_t, int64_t, int64_t, int64_t, int64_t, float, float*, int64_t,
               float*) const override {
    return false;
  }
  double element(int64_t, int64_t, int64_t, double scaled, double* grad) const override {
    *grad = 1;
    return scaled;
  }

 private:
  void scan(const kernels::AttnProblem<float>& p, kernels::AttnTileSize ts, int64_t n) {
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t ib = 0; ib < nbr_; ++ib)
      for (int64_t jb = 0; jb < nbc_; ++jb) {
        bool empty = true;
        for (int64_t i = ib * ts.br; i < std::min(p.L, (ib + 1) * ts.br) && empty; ++i) {
          const float* row = p.mask.at(n, i);
          for (int64_t j = jb * ts.bc; j < std::min(p.S, (jb + 1) * ts.bc) && empty; ++j)
            empty = row[j * p.mask_cs] == ninf;
        }
        empty_.push_back(empty ? 1 : 0);
      }
  }
  int64_t nbr_, nbc_;
  std::vector<size_t> which_;  // per problem: which scan
  std::vector<uint8_t> empty_;
};

// Whether every element of the rows of q (or k) is finite.
bool all_finite(kernels::MatrixBatch<const float> m, int64_t batch, int64_t rows, int64_t cols) {
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t i = 0; i < rows; ++i) {
      const float* r = m.at(n, i);
      for (int64_t j = 0; j < cols; ++j)
        if (!std::isfinite(r[j])) return false;
    }
  return true;
}

// The emptied tiles of a float32 problem with a mask, or null where there are none to skip.
std::shared_ptr<const MaskTiles> mask_tiles(const kernels::AttnProblem<float>& p) {
  if (p.mask.base == nullptr || p.causal || p.mod != nullptr || p.L == 0 || p.S == 0)
    return nullptr;
  if (!all_finite(p.q, p.batch, p.L, p.E) || !all_finite(p.k, p.batch, p.S, p.E)) return nullptr;
  auto t = std::make_shared<const MaskTiles>(p, kernels::sdpa_tile_size());
  return t->any_empty() ? t : nullptr;
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
  std::shared_ptr<const MaskTiles> tiles;
  if constexpr (std::is_same_v<T, float>) tiles = mask_tiles(pr.problem());
  const auto problem = [&](const Prepared<T>& prep) {
    auto pb = prep.problem();
    if constexpr (std::is_same_v<T, float>) pb.mod = tiles.get();
    return pb;
  };
  try {  // the kernel packs each problem's kᵀ (S × E): an expanded key can be too long for it
    kernels::sdpa_forward(problem(pr), batched<T>(out, d.batch).matrices(), lse.data<T>());
  } catch (const std::bad_alloc&) {
    packing_out_of_memory(d.S, query, key);
  }
  if (!any_requires_grad({&query, &key, &value})) return out;
  std::vector<Tensor> save = {query, key, value, out, lse};
  if (mask.defined()) save.push_back(mask);
  record("ScaledDotProductFlashAttentionForCpuBackward0", {query, key, value}, save,
         [d, causal, scale, bits = pr.bits, ks = pr.keep_scale, tiles](
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
           auto pb = pr.problem();
           if constexpr (std::is_same_v<T, float>) pb.mod = tiles.get();
           kernels::sdpa_backward(pb, out.matrices(), dout.matrices(),
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

// ---- bfloat16: kernels::sdpa_forward_bf16 (bf16 products, float32 softmax and sums) ----
// The gradient of a bf16 route's input from the kernel's (float32 holding bf16 values): summed
// over the leading dims the input broadcast over (that sum rounded to bf16 once more, as a bf16
// gradient's sum is), in the input's dtype: bf16, or float32 for a float32 input under autocast
// (what the cast's ToCopyBackward0 makes of the bf16 gradient, as autocast_linear keeps it).
Tensor input_grad(const Tensor& g, const Shape& shape, DType dt) {
  Tensor s = sum_to(g, shape);
  if (dt == DType::BFloat16 || s.shape() != g.shape()) s = s.to(DType::BFloat16);
  return s.to(dt);
}

// q16, k16, v16: the bf16 operands; in: the inputs the node takes gradients for (themselves, or
// the float32 tensors autocast cast to them off the tape: one node, as autocast_linear's).
// mask: additive in float32 (or undefined).
Tensor fused_bf16(const std::array<Tensor, 3>& in, const std::array<Tensor, 3>& x16,
                  const Tensor& mask, const Dims& d, bool causal, double scale, double p,
                  Generator* gen) {
  auto pr = prepare<bfloat16, float>(x16[0], x16[1], x16[2], mask, d, causal, scale);
  const int64_t nb = numel_of(d.batch);
  if (p > 0)
    pr.bits = draw_keep_bits(nb * d.L * d.S, p, gen), pr.keep_scale = keep_scale_of<float>(p);
  Tensor out = new_result(x16[0], d.batch, d.L, d.Ev, DType::BFloat16);
  Tensor lse = empty({nb * d.L}, DType::Float32);
  try {  // the kernel packs each problem's kᵀ and v: an expanded key can be too long for it
    kernels::sdpa_forward_bf16(
        pr.problem(), kernel_view(batched<bfloat16>(out, d.batch).matrices()), lse.data<float>());
  } catch (const std::bad_alloc&) {
    packing_out_of_memory(d.S, x16[0], x16[1]);
  }
  if (!any_requires_grad({&in[0], &in[1], &in[2]})) return out;
  std::vector<Tensor> save = {x16[0], x16[1], x16[2], out, lse};
  if (mask.defined()) save.push_back(mask);
  record(
      "ScaledDotProductFlashAttentionForCpuBackward0", {in[0], in[1], in[2]}, save,
      [d, causal, scale, bits = pr.bits, ks = pr.keep_scale,
       dt = std::array{in[0].dtype(), in[1].dtype(), in[2].dtype()}](
          Node& n, const Tensor& g) -> std::vector<Tensor> {
        const Tensor &q = n.saved_tensor(0), &k = n.saved_tensor(1), &v = n.saved_tensor(2);
        auto pr = prepare<bfloat16, float>(
            q, k, v, n.saved.size() > 5 ? n.saved_tensor(5) : Tensor(), d, causal, scale);
        pr.bits = bits, pr.keep_scale = ks;
        const auto out = batched<const bfloat16>(n.saved_tensor(3), d.batch);
        const auto dout = batched<const bfloat16>(g.to(DType::BFloat16), d.batch);
        const auto dq = batched<float>(new_result(q, d.batch, d.L, d.E, DType::Float32), d.batch);
        const auto dk = batched<float>(new_result(k, d.batch, d.S, d.E, DType::Float32), d.batch);
        const auto dv = batched<float>(new_result(v, d.batch, d.S, d.Ev, DType::Float32), d.batch);
        kernels::sdpa_backward_bf16(pr.problem(), kernel_view(out.matrices()),
                                    kernel_view(dout.matrices()), n.saved_tensor(4).data<float>(),
                                    dq.matrices(), dk.matrices(), dv.matrices());
        return {n.needs(0) ? input_grad(dq.tensor, q.shape(), dt[0]) : Tensor(),
                n.needs(1) ? input_grad(dk.tensor, k.shape(), dt[1]) : Tensor(),
                n.needs(2) ? input_grad(dv.tensor, v.shape(), dt[2]) : Tensor()};
      },
      {&out});
  return out;
}

// A bf16 attention whose float mask needs its gradient: the composite in float32 on operands
// widened on the tape (under autocast, cast to bf16 first, as torch.autocast casts them), its
// result rounded once.
Tensor composite_bf16(const Tensor& query, const Tensor& key, const Tensor& value,
                      const Tensor& mask, double p, double scale, Generator* gen) {
  const auto f32 = [](const Tensor& t) { return detail::autocast_bf16(t).to(DType::Float32); };
  const Tensor q = f32(query), k = f32(key), v = f32(value);
  AutocastGuard in_float32(false);
  return composite(q, k, v, mask.to(DType::Float32), p, scale, gen).to(DType::BFloat16);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  // Under autocast, float32 operands become bf16 off the tape: the bf16 node takes their
  // gradients (fused_bf16).
  const auto operand = [](const Tensor& t) {
    return autocast_enabled() && t.defined() && t.dtype() == DType::Float32
               ? t.detach().to(DType::BFloat16)
               : t;
  };
  const Tensor q16 = operand(query), k16 = operand(key), v16 = operand(value);
  const Dims d = check_shapes(q16, k16, v16);
  const bool bf16 = q16.dtype() == DType::BFloat16;
  if (!(dropout_p >= 0 && dropout_p <= 1))
    fail(kOp, "dropout_p must be in [0, 1], got ", dropout_p);
  if (scale && !std::isfinite(*scale)) fail(kOp, "scale must be finite, got ", *scale);
  if (is_causal && attn_mask.defined())
    fail(kOp, "an explicit attn_mask cannot be combined with is_causal=true");
  if (!scale && d.E == 0)
    fail(kOp, "query and key have E = 0, where the default scale 1/sqrt(E) is undefined (pass a ",
         "scale)");
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(d.E));
  // bf16: the mask added in float32 (a floating mask widened, as the softmax reads it).
  const Tensor m = bf16 && attn_mask.defined() && is_floating(attn_mask.dtype())
                       ? attn_mask.detach().to(DType::Float32)
                       : attn_mask;
  Tensor mask = m.defined() ? additive_mask(m, bf16 ? DType::Float32 : query.dtype(), d) : Tensor();
  if (attn_mask.defined() && attn_mask.requires_grad() && grad_enabled())
    return bf16 ? composite_bf16(query, key, value, attn_mask, dropout_p, sc, gen)
                : composite(query, key, value, attn_mask, dropout_p, sc, gen);
  if (bf16)
    return fused_bf16({query, key, value}, {q16, k16, v16}, mask, d, is_causal, sc, dropout_p, gen);
  return detail::dispatch_float(kOp, query.dtype(), [&](auto z) {
    return fused<decltype(z)>(query, key, value, mask, d, is_causal, sc, dropout_p, gen);
  });
}

}  // namespace tg
