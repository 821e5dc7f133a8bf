// Views share storage with their input: only shape, strides and offset change. Their backward maps
// the gradient's geometry back (transpose back, reshape back, or scatter into zeros for slices).
// Also here: the copies contiguous(), clone() and to(dtype).
#include <algorithm>
#include <numeric>
#include <optional>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::fail;
using detail::wrap;
using detail::wrap_dim;

namespace {

Tensor make_view(const Tensor& a, const Shape& shape, const Shape& strides, int64_t offset,
                 const char* name, Node::BackwardFn backward) {
  auto impl = alias_impl(*a.impl(), shape, strides, offset);
  impl->is_view = true;
  Tensor out = wrap(impl);
  if (any_requires_grad({&a})) record(name, {a}, {}, std::move(backward), {&out});
  return out;
}

// Replaces one -1 with what makes the element count match.
Shape infer_shape(const char* op, const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  bool too_big = false;  // the given dims multiply past int64: no input has that many
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail(op, "shape ", shape_str(shape), " has more than one -1");
      infer = int64_t(i);
    } else if (out[i] < 0) {
      fail(op, "shape ", shape_str(shape), " has a negative dimension");
    } else {
      too_big = too_big || __builtin_mul_overflow(known, out[i], &known);
    }
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {  // 0 elements, however large
    known = 0;
    too_big = false;
  }
  if (infer >= 0 && !too_big && known != 0 && numel % known == 0) out[infer] = numel / known;
  if (too_big || (infer >= 0 && out[infer] == -1) || checked_numel(out, op) != numel)
    fail(op, "shape ", shape_str(shape), " is invalid for input of size ", numel, " (shape ",
         shape_str(from), ")");
  return out;
}

// PyTorch's computeStride: the strides that let `newshape` alias the old geometry, if any exist.
// Old dims are walked from the right in chunks that are contiguous among themselves; each chunk
// must be covered exactly by a run of new dims.
std::optional<Shape> view_strides(const Shape& oldshape, const Shape& oldstride,
                                  const Shape& newshape) {
  Shape newstride(newshape.size(), 1);
  if (oldshape.empty()) return newstride;
  if (numel_of(oldshape) == 0) return contiguous_strides(newshape);
  int64_t view_d = int64_t(newshape.size()) - 1;
  int64_t chunk_base_stride = oldstride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(oldshape.size()) - 1; d >= 0; --d) {
    tensor_numel *= oldshape[d];
    if (d == 0 || (oldshape[d - 1] != 1 && oldstride[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= newshape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = oldstride[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

// A new tensor of `shape` filled with zeros except the region described by (sub_shape,
// sub_strides, offset), which receives g: the adjoint of every slicing view.
Tensor scatter_into_zeros(const Tensor& g, const Shape& shape, const Shape& sub_shape,
                          const Shape& sub_strides, int64_t offset) {
  Tensor z = zeros(shape, g.dtype());
  auto region = alias_impl(*z.impl(), sub_shape, sub_strides, offset);
  detail::copy_into(*region, *g.impl());
  return z;
}

}  // namespace

Tensor Tensor::view(const Shape& shape_in) const {
  detail::check_defined("view", *this);
  const Shape shape = infer_shape("view", shape_in, numel(), this->shape());
  auto st = view_strides(this->shape(), strides(), shape);
  if (!st)
    fail("view", "shape ", shape_str(shape), " is not compatible with the input's shape ",
         shape_str(this->shape()), " and strides ", shape_str(strides()),
         " (at least one dim spans two non-contiguous chunks); use reshape() or contiguous()");
  return make_view(*this, shape, *st, offset(), "ViewBackward0",
                   [from = this->shape()](Node&, const Tensor& g) -> std::vector<Tensor> {
                     return {g.reshape(from)};
                   });
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  detail::check_defined("reshape", *this);
  const Shape shape = infer_shape("reshape", shape_in, numel(), this->shape());
  if (view_strides(this->shape(), strides(), shape)) return view(shape);
  Tensor c = contiguous();
  return c.view(shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  detail::check_defined("transpose", *this);
  const int64_t n = dim();
  if (n == 0)
    return make_view(*this, {}, {}, offset(), "TransposeBackward0",
                     [](Node&, const Tensor& g) -> std::vector<Tensor> { return {g}; });
  d0 = wrap_dim("transpose", d0, n);
  d1 = wrap_dim("transpose", d1, n);
  Shape s = shape(), st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(
      *this, s, st, offset(), "TransposeBackward0",
      [d0, d1](Node&, const Tensor& g) -> std::vector<Tensor> { return {g.transpose(d0, d1)}; });
}

Tensor Tensor::permute(const Shape& dims) const {
  detail::check_defined("permute", *this);
  const int64_t n = dim();
  if (int64_t(dims.size()) != n)
    fail("permute", "got ", dims.size(), " dims ", shape_str(dims), " for a tensor of shape ",
         shape_str(shape()));
  Shape perm(n), s(n), st(n), inverse(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    perm[i] = wrap_dim("permute", dims[i], n);
    if (seen[perm[i]]) fail("permute", "dim ", perm[i], " repeats in ", shape_str(dims));
    seen[perm[i]] = true;
    s[i] = shape()[perm[i]];
    st[i] = strides()[perm[i]];
    inverse[perm[i]] = i;
  }
  return make_view(
      *this, s, st, offset(), "PermuteBackward0",
      [inverse](Node&, const Tensor& g) -> std::vector<Tensor> { return {g.permute(inverse)}; });
}

Tensor Tensor::T() const {
  detail::check_defined("T", *this);
  if (dim() != 2)
    fail("T", "expects a 2-D tensor, got shape ", shape_str(shape()),
         "; use transpose(d0, d1) or permute()");
  return permute({1, 0});
}

Tensor Tensor::unsqueeze(int64_t d) const {
  detail::check_defined("unsqueeze", *this);
  d = wrap_dim("unsqueeze", d, dim() + 1);
  Shape s = shape(), st = strides();
  const int64_t stride = d < dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return make_view(*this, s, st, offset(), "UnsqueezeBackward0",
                   [d](Node&, const Tensor& g) -> std::vector<Tensor> { return {g.squeeze(d)}; });
}

Tensor Tensor::squeeze(int64_t d) const {
  detail::check_defined("squeeze", *this);
  if (dim() == 0)
    return make_view(*this, {}, {}, offset(), "SqueezeBackward1",
                     [](Node&, const Tensor& g) -> std::vector<Tensor> { return {g}; });
  d = wrap_dim("squeeze", d, dim());
  Shape s = shape(), st = strides();
  if (s[d] == 1) {
    s.erase(s.begin() + d);
    st.erase(st.begin() + d);
  }
  return make_view(*this, s, st, offset(), "SqueezeBackward1",
                   [from = shape()](Node&, const Tensor& g) -> std::vector<Tensor> {
                     return {g.reshape(from)};
                   });
}

Tensor Tensor::squeeze() const {
  detail::check_defined("squeeze", *this);
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) {
      s.push_back(shape()[i]);
      st.push_back(strides()[i]);
    }
  return make_view(*this, s, st, offset(), "SqueezeBackward0",
                   [from = shape()](Node&, const Tensor& g) -> std::vector<Tensor> {
                     return {g.reshape(from)};
                   });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  detail::check_defined("narrow", *this);
  if (dim() == 0) fail("narrow", "cannot narrow a 0-d tensor");
  d = wrap_dim("narrow", d, dim());
  const int64_t size = shape()[d];
  if (start < 0) start += size;
  if (start < 0 || length < 0 || start + length > size)
    fail("narrow", "start ", start, " and length ", length, " are out of range for dim ", d,
         " of size ", size, " (shape ", shape_str(shape()), ")");
  Shape s = shape();
  s[d] = length;
  const int64_t off = offset() + start * strides()[d];
  return make_view(*this, s, strides(), off, "SliceBackward0",
                   [from = shape(), d, start](Node&, const Tensor& g) -> std::vector<Tensor> {
                     const Shape cs = contiguous_strides(from);
                     return {scatter_into_zeros(g, from, g.shape(), cs, start * cs[d])};
                   });
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  detail::check_defined("slice", *this);
  if (dim() == 0) fail("slice", "cannot slice a 0-d tensor");
  const int64_t size = shape()[wrap_dim("slice", d, dim())];
  // Python slice semantics: negative bounds count from the end, out-of-range bounds clamp.
  auto clamp = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  const int64_t s = clamp(start), e = std::max(clamp(end), s);
  return narrow(d, s, e - s);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  detail::check_defined("select", *this);
  if (dim() == 0) fail("select", "cannot index a 0-d tensor");
  d = wrap_dim("select", d, dim());
  const int64_t size = shape()[d];
  if (index < -size || index >= size)
    throw std::out_of_range("select: index " + std::to_string(index) +
                            " is out of bounds for dim " + std::to_string(d) + " with size " +
                            std::to_string(size) + " (shape " + shape_str(shape()) + ")");
  if (index < 0) index += size;
  Shape s = shape(), st = strides();
  const int64_t off = offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(*this, s, st, off, "SelectBackward0",
                   [from = shape(), d, index](Node&, const Tensor& g) -> std::vector<Tensor> {
                     const Shape cs = contiguous_strides(from);
                     Shape sub_st = cs;
                     sub_st.erase(sub_st.begin() + d);
                     return {scatter_into_zeros(g, from, g.shape(), sub_st, index * cs[d])};
                   });
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  detail::check_defined("flatten", *this);
  if (dim() == 0) return reshape({1});
  start = wrap_dim("flatten", start, dim());
  end = wrap_dim("flatten", end, dim());
  if (start > end) fail("flatten", "start dim ", start, " comes after end dim ", end);
  Shape s(shape().begin(), shape().begin() + start);
  s.push_back(checked_numel(Shape(shape().begin() + start, shape().begin() + end + 1), "flatten"));
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::expand(const Shape& shape_in) const {
  detail::check_defined("expand", *this);
  if (shape_in.size() < shape().size())
    fail("expand", "cannot expand shape ", shape_str(shape()), " to fewer dims ",
         shape_str(shape_in));
  const size_t lead = shape_in.size() - shape().size();
  Shape s(shape_in.size()), st(shape_in.size(), 0);
  for (size_t i = 0; i < shape_in.size(); ++i) {
    const int64_t want = shape_in[i];
    if (i < lead) {
      if (want < 0)
        fail("expand", "-1 is not allowed for a new leading dim in ", shape_str(shape_in));
      s[i] = want;
      continue;
    }
    const int64_t have = shape()[i - lead];
    if (want == -1 || want == have) {
      s[i] = have;
      st[i] = strides()[i - lead];
    } else if (have == 1) {
      s[i] = want;
    } else {
      fail("expand", "cannot expand shape ", shape_str(shape()), " to ", shape_str(shape_in),
           " (dim ", i, ": ", have, " is not 1)");
    }
  }
  checked_numel(s, "expand");
  return make_view(*this, s, st, offset(), "ExpandBackward0",
                   [from = shape()](Node&, const Tensor& g) -> std::vector<Tensor> {
                     return {sum_to(g, from)};
                   });
}

namespace {
// Where torch.diagonal's view sits in a tensor of shape s and strides st: dims d1 and d2 dropped,
// one last dim of the elements (i, i + offset) whose stride is the sum of theirs, and its first
// element's offset (0 when the diagonal is empty, as PyTorch keeps it in range).
struct DiagonalGeometry {
  Shape shape, strides;
  int64_t start = 0;
};
DiagonalGeometry diagonal_geometry(const Shape& s, const Shape& st, int64_t offset, int64_t d1,
                                   int64_t d2) {
  const int64_t n = offset >= 0 ? std::min(s[d1], s[d2] - offset) : std::min(s[d1] + offset, s[d2]);
  const int64_t size = std::max<int64_t>(n, 0);
  DiagonalGeometry geo{s, st, 0};
  if (size > 0) geo.start = offset >= 0 ? offset * st[d2] : -offset * st[d1];
  for (int64_t d : {std::max(d1, d2), std::min(d1, d2)}) {
    geo.shape.erase(geo.shape.begin() + d);
    geo.strides.erase(geo.strides.begin() + d);
  }
  geo.shape.push_back(size);
  geo.strides.push_back(st[d1] + st[d2]);
  return geo;
}
}  // namespace

// A view of t's elements; its adjoint writes g onto the same diagonal of zeros (never overlaps).
Tensor diagonal(const Tensor& t, int64_t offset, int64_t dim1, int64_t dim2) {
  detail::check_defined("diagonal", t);
  const int64_t d1 = wrap_dim("diagonal", dim1, t.dim()), d2 = wrap_dim("diagonal", dim2, t.dim());
  if (d1 == d2)
    fail("diagonal", "dim1 and dim2 are both dim ", d1, " (shape ", shape_str(t.shape()), ")");
  const DiagonalGeometry geo = diagonal_geometry(t.shape(), t.strides(), offset, d1, d2);
  return make_view(
      t, geo.shape, geo.strides, t.offset() + geo.start, "DiagonalBackward0",
      [from = t.shape(), offset, d1, d2](Node&, const Tensor& g) -> std::vector<Tensor> {
        const DiagonalGeometry back =
            diagonal_geometry(from, contiguous_strides(from), offset, d1, d2);
        return {scatter_into_zeros(g, from, back.shape, back.strides, back.start)};
      });
}

// --- copies ---
Tensor Tensor::clone() const {
  detail::check_defined("clone", *this);
  Tensor out = wrap(detail::materialize(*impl(), dtype()));
  if (any_requires_grad({this}))
    record("CloneBackward0", {*this}, {},
           [](Node&, const Tensor& g) -> std::vector<Tensor> { return {g}; }, {&out});
  return out;
}

Tensor Tensor::contiguous() const {
  detail::check_defined("contiguous", *this);
  return is_contiguous() ? *this : clone();
}

namespace {
// float32 <-> bfloat16 of a contiguous tensor through the vector kernels (the same bits as the
// element loop: c10's rounding, exact widening); undefined for any other conversion.
Tensor convert_bf16(const Tensor& t, DType d) {
  const DType from = t.dtype();
  if (!t.is_contiguous() || !((from == DType::Float32 && d == DType::BFloat16) ||
                              (from == DType::BFloat16 && d == DType::Float32)))
    return Tensor();
  Tensor out = empty(t.shape(), d);
  if (d == DType::BFloat16)
    kernels::f32_to_bf16(t.numel(), t.data<float>(),
                         reinterpret_cast<uint16_t*>(out.data<bfloat16>()));
  else
    kernels::bf16_to_f32(t.numel(), reinterpret_cast<const uint16_t*>(t.data<bfloat16>()),
                         out.data<float>());
  return out;
}
}  // namespace

Tensor Tensor::to(DType d) const {
  detail::check_defined("to", *this);
  if (d == dtype()) return *this;
  Tensor out = convert_bf16(*this, d);
  if (!out.defined()) out = wrap(detail::materialize(*impl(), d));
  if (any_requires_grad({this}) && is_floating(d))
    record("ToCopyBackward0", {*this}, {},
           [from = dtype()](Node&, const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; },
           {&out});
  return out;
}

}  // namespace tg
