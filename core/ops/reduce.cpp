// Reductions along dims (negative dims allowed, keepdim) and over the whole tensor: sum, mean,
// max (values and indices), var, argmax. The reduced dims are moved last and made contiguous, so
// every kernel here walks plain rows. float32 sums over the trailing dims of a contiguous tensor
// add in float in PyTorch's order (torch_float_row_sum), so that printed sums match torch's;
// other float32 sums accumulate in double.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::dispatch;
using detail::fail;
using detail::wrap;

namespace {

// `a` rearranged as [outer, inner] rows, inner running over the reduced dims.
struct Rows {
  Tensor data;  // contiguous, outer * inner elements
  int64_t outer = 1, inner = 1;
  Shape keep_shape;  // the result's shape with keepdim=true
  Shape out_shape;   // ... and with the caller's keepdim
};

Rows to_rows(const char* op, const Tensor& a, Shape dims, bool keepdim) {
  detail::check_defined(op, a);
  const int64_t nd = a.dim();
  for (auto& d : dims) d = detail::wrap_dim(op, d, nd);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    fail(op, "dim repeats in ", shape_str(dims));
  Rows r;
  Shape perm;
  std::vector<bool> reduced(size_t(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t s = a.shape()[d];
    if (reduced[d]) {
      r.inner *= s;
      r.keep_shape.push_back(1);
      if (keepdim) r.out_shape.push_back(1);
    } else {
      perm.push_back(d);
      r.outer *= s;
      r.keep_shape.push_back(s);
      r.out_shape.push_back(s);
    }
  }
  for (int64_t d : dims)
    if (d < nd) perm.push_back(d);
  r.data = nd == 0 ? a.detach() : a.detach().permute(perm).contiguous();
  return r;
}

// The gradient of a reduction, broadcast back over the reduced dims.
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return g.reshape(keep_shape).expand(in_shape);
}

Shape all_dims(const Tensor& a) {
  Shape d(size_t(a.dim()));
  for (int64_t i = 0; i < a.dim(); ++i) d[i] = i;
  return d;
}

// PyTorch's CPU float sum of one contiguous row (aten/src/ATen/native/cpu/SumKernel.cpp, 1.13 and
// 2.x, AVX2 build): accumulation in float, 4 interleaved partial sums (row_sum, "ilp_factor"), each
// a 4-level cascade (multi_row_sum); rows of 8 or more run the same on 8-lane vectors, and the
// lanes are added last (vectorized_inner_sum). Its rounding differs from a double accumulation:
// the notebook's `(s / s.sum()).sum()` prints tensor(1.0000) in torch, not tensor(1.).
template <int L>
struct Lanes {
  float v[L] = {};
  void add(const Lanes& o) {
    for (int l = 0; l < L; ++l) v[l] += o.v[l];
  }
};
template <int L>
Lanes<L> load_lanes(const float* p) {
  Lanes<L> x;
  for (int l = 0; l < L; ++l) x.v[l] = p[l];
  return x;
}
int64_t ceil_log2(int64_t x) {  // c10::utils::CeilLog2
  if (x <= 2) return 1;
  int64_t b = 0;
  for (uint64_t y = uint64_t(x - 1); y; y >>= 1) ++b;
  return b;
}
// multi_row_sum<acc, 4>: element (i, k) sits at p[(i * row_stride + k * col_stride) * L].
template <int L>
std::array<Lanes<L>, 4> multi_row_sum(const float* p, int64_t row_stride, int64_t col_stride,
                                      int64_t size) {
  constexpr int kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size) / kLevels);
  const int64_t level_step = int64_t(1) << level_power;
  const int64_t level_mask = level_step - 1;
  Lanes<L> acc[kLevels][4];
  auto load = [&](int64_t i, int k) {
    return load_lanes<L>(p + (i * row_stride + k * col_stride) * L);
  };
  int64_t i = 0;
  while (i + level_step <= size) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int k = 0; k < 4; ++k) acc[0][k].add(load(i, k));
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < 4; ++k) {
        acc[j][k].add(acc[j - 1][k]);
        acc[j - 1][k] = Lanes<L>{};
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < size; ++i)
    for (int k = 0; k < 4; ++k) acc[0][k].add(load(i, k));
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < 4; ++k) acc[0][k].add(acc[j][k]);
  return {acc[0][0], acc[0][1], acc[0][2], acc[0][3]};
}
// row_sum<acc>: `size` items of L floats, contiguous.
template <int L>
Lanes<L> row_sum(const float* p, int64_t size) {
  const int64_t size_ilp = size / 4;
  auto partial = multi_row_sum<L>(p, 4, 1, size_ilp);
  for (int64_t i = size_ilp * 4; i < size; ++i) partial[0].add(load_lanes<L>(p + i * L));
  for (int k = 1; k < 4; ++k) partial[0].add(partial[k]);
  return partial[0];
}
float torch_float_row_sum(const float* row, int64_t n) {
  constexpr int kVec = 8;  // Vectorized<float>::size() with AVX2
  if (n < kVec) return row_sum<1>(row, n).v[0];
  const int64_t vec_size = n / kVec;
  const Lanes<kVec> vec_acc = row_sum<kVec>(row, vec_size);
  float final_acc = 0;
  for (int64_t k = vec_size * kVec; k < n; ++k) final_acc += row[k];
  for (int l = 0; l < kVec; ++l) final_acc += vec_acc.v[l];
  return final_acc;
}

// Are `dims` the trailing dims of a contiguous `a`? Then torch reduces contiguous rows.
bool trailing_contiguous(const Tensor& a, Shape dims) {
  if (!a.is_contiguous()) return false;
  for (auto& d : dims) d = detail::wrap_dim("sum", d, a.dim());
  std::sort(dims.begin(), dims.end());
  for (size_t k = 0; k < dims.size(); ++k)
    if (dims[k] != a.dim() - int64_t(dims.size()) + int64_t(k)) return false;
  return true;
}

Tensor sum_impl(const Tensor& a, const Shape& dims, bool keepdim, const char* name) {
  if (a.dtype() == DType::BFloat16)  // accumulated in float32, rounded once
    return sum_impl(a.to(DType::Float32), dims, keepdim, name).to(DType::BFloat16);
  Rows r = to_rows("sum", a, dims, keepdim);
  const bool torch_order = a.dtype() == DType::Float32 && trailing_contiguous(a, dims);
  const DType out_dt = is_floating(a.dtype()) ? a.dtype() : DType::Int64;
  Tensor out = empty(r.out_shape, out_dt);
  dispatch(a.dtype(), [&](auto z) {
    using T = decltype(z);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    using Out = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    const T* p = r.data.template data<T>();
    Out* o = out.data<Out>();
    for (int64_t i = 0; i < r.outer; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        if (torch_order) {
          o[i] = torch_float_row_sum(p + i * r.inner, r.inner);
          continue;
        }
      }
      Acc acc = 0;
      const T* row = p + i * r.inner;
      for (int64_t j = 0; j < r.inner; ++j) acc += Acc(row[j]);
      o[i] = Out(acc);
    }
  });
  if (any_requires_grad({&a}))
    record(name, {a}, {},
           [keep = r.keep_shape, in = a.shape()](Node&, const Tensor& g) -> std::vector<Tensor> {
             return {expand_back(g, keep, in)};
           },
           {&out});
  return out;
}

}  // namespace

// --- sum: every input element receives the gradient of its row's sum ---
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  return sum_impl(a, dims, keepdim, "SumBackward1");
}
Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return sum(a, Shape{dim}, keepdim); }
Tensor sum(const Tensor& a) {
  detail::check_defined("sum", a);
  return sum_impl(a, all_dims(a), false, "SumBackward0");
}

// --- mean = sum / n ---
Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  detail::check_floating("mean", a);
  if (a.dtype() == DType::BFloat16)
    return mean(a.to(DType::Float32), dim, keepdim).to(DType::BFloat16);
  const int64_t n = a.dim() == 0 ? 1 : a.shape()[detail::wrap_dim("mean", dim, a.dim())];
  Tensor s;
  {
    NoGradGuard ng;
    s = div(sum(a, dim, keepdim), double(n));
  }
  if (any_requires_grad({&a})) {
    Shape keep = a.shape();
    if (a.dim() > 0) keep[detail::wrap_dim("mean", dim, a.dim())] = 1;
    record("MeanBackward1", {a}, {},
           [keep, in = a.shape(), n](Node&, const Tensor& g) -> std::vector<Tensor> {
             return {expand_back(g, keep, in) / double(n)};
           },
           {&s});
  }
  return s;
}

Tensor mean(const Tensor& a) {
  detail::check_floating("mean", a);
  if (a.dtype() == DType::BFloat16) return mean(a.to(DType::Float32)).to(DType::BFloat16);
  const int64_t n = a.numel();
  Tensor s;
  {
    NoGradGuard ng;
    s = div(sum(a), double(n));
  }
  if (any_requires_grad({&a}))
    record("MeanBackward0", {a}, {},
           [in = a.shape(), n](Node&, const Tensor& g) -> std::vector<Tensor> {
             return {g.expand(in) / double(n)};
           },
           {&s});
  return s;
}

// --- max along a dim: the gradient goes to the (first) position of each row's maximum ---
namespace {
std::pair<Tensor, Tensor> max_along(const char* op, const Tensor& a, int64_t dim, bool keepdim) {
  if (a.dtype() == DType::BFloat16) {  // compared in float32: the values themselves come back
    auto [v, i] = max_along(op, a.to(DType::Float32), dim, keepdim);
    return {v.to(DType::BFloat16), i};
  }
  Rows r = to_rows(op, a, {dim}, keepdim);
  if (r.inner == 0)
    fail(op, "cannot reduce an empty dim (shape ", shape_str(a.shape()), ", dim ", dim, ")");
  Tensor values = empty(r.out_shape, a.dtype());
  Tensor indices = empty(r.out_shape, DType::Int64);
  dispatch(a.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = r.data.template data<T>();
    T* v = values.data<T>();
    int64_t* ix = indices.data<int64_t>();
    for (int64_t i = 0; i < r.outer; ++i) {
      const T* row = p + i * r.inner;
      int64_t best = 0;
      for (int64_t j = 1; j < r.inner; ++j) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(row[best])) break;  // NaN wins, as in PyTorch
          if (std::isnan(row[j]) || row[j] > row[best]) best = j;
        } else {
          if (row[j] > row[best]) best = j;
        }
      }
      v[i] = row[best];
      ix[i] = best;
    }
  });
  if (any_requires_grad({&a})) {
    const int64_t d = detail::wrap_dim("max", dim, a.dim());
    record(
        "MaxBackward0", {a}, {indices},
        [in = a.shape(), keep = r.keep_shape, d](Node& n, const Tensor& g) -> std::vector<Tensor> {
          // Scatter each row's gradient to the index that won.
          const Tensor idx = n.saved_tensor(0).reshape(keep).contiguous();
          const Tensor gk = g.reshape(keep).contiguous();
          Tensor out = zeros(in, g.dtype());
          const int64_t nd = int64_t(in.size());
          const Shape ost = out.strides();
          int64_t outer = 1, inner = 1;
          for (int64_t i = 0; i < d; ++i) outer *= in[i];
          for (int64_t i = d + 1; i < nd; ++i) inner *= in[i];
          dispatch(g.dtype(), [&](auto z) {
            using T = decltype(z);
            const T* pg = gk.data<T>();
            const int64_t* pi = idx.data<int64_t>();
            T* po = out.data<T>();
            const int64_t len = nd == 0 ? 1 : in[d];
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t k = 0; k < inner; ++k) {
                const int64_t at = o * inner + k;
                po[(o * len + pi[at]) * inner + k] += pg[at];
              }
          });
          return {out};
        },
        {&values});
  }
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return max_along("max", a, dim, keepdim);
}

// --- max over everything: the gradient is shared evenly among the tied maxima ---
Tensor max(const Tensor& a) {
  detail::check_defined("max", a);
  if (a.dtype() == DType::BFloat16) return max(a.to(DType::Float32)).to(DType::BFloat16);
  if (a.numel() == 0)
    fail("max", "cannot reduce an empty tensor (shape ", shape_str(a.shape()), ")");
  Tensor flat = a.detach().reshape({-1});
  Tensor v = max(flat, 0, false).first;
  if (any_requires_grad({&a}))
    record("MaxBackward1", {a}, {a, v},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor mask = eq(n.saved_tensor(0), n.saved_tensor(1)).to(g.dtype());
             return {mask * (g / sum(mask))};
           },
           {&v});
  return v;
}

// --- var: two passes (mean, then squared deviations); d var / dx = 2 (x - mean) / (N - c) ---
Tensor var(const Tensor& a, int64_t dim, bool unbiased, bool keepdim) {
  detail::check_floating("var", a);
  if (a.dtype() == DType::BFloat16)
    return var(a.to(DType::Float32), dim, unbiased, keepdim).to(DType::BFloat16);
  Rows r = to_rows("var", a, {dim}, keepdim);
  const int64_t n = r.inner;
  const double denom = double(n - (unbiased ? 1 : 0));
  Tensor out = empty(r.out_shape, a.dtype());
  detail::dispatch_float("var", a.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = r.data.template data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < r.outer; ++i) {
      if (n == 0) {  // PyTorch: the variance of nothing is nan, biased or not
        o[i] = std::numeric_limits<T>::quiet_NaN();
        continue;
      }
      const T* row = p + i * n;
      double m = 0;
      for (int64_t j = 0; j < n; ++j) m += row[j];
      m /= double(n);
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += (row[j] - m) * (row[j] - m);
      o[i] = T(ss / denom);  // n - 1 == 0 gives nan, as in PyTorch
    }
  });
  if (any_requires_grad({&a}))
    record("VarBackward0", {a}, {a},
           [keep = r.keep_shape, in = a.shape(), dim, denom](
               Node& nd, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& x = nd.saved_tensor(0);
             const Tensor centered = x - mean(x, dim, true);
             return {centered * (expand_back(g, keep, in) * (2.0 / denom))};
           },
           {&out});
  return out;
}

Tensor var(const Tensor& a, bool unbiased) {
  detail::check_floating("var", a);
  return var(a.reshape({-1}), 0, unbiased, false);
}

// --- argmax: indices only, off the tape ---
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  NoGradGuard ng;
  return max_along("argmax", a, dim, keepdim).second;
}
Tensor argmax(const Tensor& a) {
  detail::check_defined("argmax", a);
  if (a.numel() == 0)
    fail("argmax", "cannot reduce an empty tensor (shape ", shape_str(a.shape()), ")");
  NoGradGuard ng;
  return max(a.reshape({-1}), 0, false).second;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - int64_t(shape.size());
  Shape dims;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return r.view(shape);
}

}  // namespace tg
