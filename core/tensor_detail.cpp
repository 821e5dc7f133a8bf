// The tensor layer's shared helpers (tensor_detail.h): dim wrapping, broadcasting, conversion
// copies, in-place checks.
#include "core/tensor_detail.h"

#include <cstring>

namespace tg::detail {

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t n = ndim == 0 ? 1 : ndim;
  if (dim < -n || dim >= n)
    fail(op, "dim ", dim, " is out of range for a tensor of ", ndim, " dims (expected ", -n, " to ",
         n - 1, ")");
  return dim < 0 ? dim + n : dim;
}

void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "got an undefined tensor");
}

void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype()))
    fail(op, "expected a floating-point tensor, got ", dtype_name(t.dtype()), " of shape ",
         shape_str(t.shape()));
}

bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast (dim ",
           int64_t(i) - int64_t(n), ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  checked_numel(out, op);  // [2^32, 1] with [1, 2^32] broadcasts past int64
  return out;
}

Shape broadcast_strides(const TensorImpl& t, const Shape& shape) {
  const size_t n = shape.size(), m = t.shape.size();
  Shape s(n, 0);
  for (size_t i = 0; i < m; ++i) {
    const size_t j = n - m + i;
    s[j] = t.shape[i] == 1 && shape[j] != 1 ? 0 : t.strides[i];
  }
  return s;
}

namespace {
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<From, bfloat16> && !std::is_same_v<To, bfloat16>)
    return convert<To>(float(v));  // exact widening first
  else if constexpr (std::is_same_v<To, bool>)
    return v != From(0);
  else if constexpr (std::is_same_v<To, bfloat16> && !std::is_same_v<From, bfloat16>)
    return bfloat16(static_cast<float>(v));  // through float, as c10::BFloat16 converts
  else
    return static_cast<To>(v);
}
}  // namespace

void copy_into(TensorImpl& dst, const TensorImpl& src) {
  const Shape sst = broadcast_strides(src, dst.shape);
  dispatch_all(dst.dtype, [&](auto d0) {
    using D = decltype(d0);
    dispatch_all(src.dtype, [&](auto s0) {
      using S = decltype(s0);
      D* dp = reinterpret_cast<D*>(dst.bytes());
      const S* sp = reinterpret_cast<const S*>(src.bytes());
      for_each_run<2>(dst.shape, {&dst.strides, &sst}, {0, 0},
                      [&](std::array<int64_t, 2> o, int64_t n, std::array<int64_t, 2> st) {
                        D* d = dp + o[0];
                        const S* s = sp + o[1];
                        if constexpr (std::is_same_v<D, S>) {
                          if (st[0] == 1 && st[1] == 1) {
                            std::memcpy(d, s, size_t(n) * sizeof(D));
                            return;
                          }
                        }
                        for (int64_t i = 0; i < n; ++i) d[i * st[0]] = convert<D>(s[i * st[1]]);
                      });
    });
  });
}

std::shared_ptr<TensorImpl> materialize(const TensorImpl& t, DType to) {
  auto out = new_impl(t.shape, to);
  copy_into(*out, t);
  return out;
}

void check_inplace(const char* op, const Tensor& t) {
  check_defined(op, t);
  if (grad_enabled() && t.requires_grad() && t.is_leaf())
    fail(op, "a leaf tensor that requires grad (shape ", shape_str(t.shape()),
         ") cannot be modified in place while grad mode is on; use NoGradGuard");
  if (grad_enabled() && t.requires_grad() && t.impl()->is_view)
    fail(op, "in-place modification of a view (shape ", shape_str(t.shape()),
         ") of a tensor that requires grad is not supported; apply it to a copy (clone())");
}

}  // namespace tg::detail
