// The tensor layer's internals, shared by tensor.cpp, autograd.cpp and the ops (core/ops/): errors
// that name the op and the shapes, dim wrapping, dtype dispatch, broadcasting, a strided loop over
// N operands that share one (broadcast) shape, conversion copies (materialize, copy_into) and the
// in-place checks. Internal to core/.
#pragma once
#include <array>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/bfloat16.h"
#include "core/impl.h"
#include "core/tensor.h"

namespace tg::detail {

template <class... Args>
[[noreturn]] void fail(const char* op, const Args&... parts) {
  std::ostringstream os;
  os << op << ": ";
  (os << ... << parts);
  throw std::invalid_argument(os.str());
}

// Wraps a possibly negative dim into [0, ndim); `ndim` 0 accepts -1 and 0 like PyTorch.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

void check_defined(const char* op, const Tensor& t);
void check_floating(const char* op, const Tensor& t);

// Calls f(T{}) with T the C++ type of dtype, for the four types every op computes in. A
// bfloat16 tensor reaching it is a bug of the op (it must widen first, or use dispatch_all).
template <class F>
decltype(auto) dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Bool:
      return f(bool{});
    case DType::BFloat16:
      break;
  }
  throw std::logic_error(std::string("dispatch: no computation in ") + dtype_name(dt));
}
// The same over every stored type, bfloat16 included: for code that moves or converts elements
// (creation, copies, gathers), never for arithmetic.
template <class F>
decltype(auto) dispatch_all(DType dt, F&& f) {
  if (dt == DType::BFloat16) return f(bfloat16{});
  return dispatch(dt, std::forward<F>(f));
}
template <class F>
decltype(auto) dispatch_float(const char* op, DType dt, F&& f) {
  if (dt == DType::Float32) return f(float{});
  if (dt == DType::Float64) return f(double{});
  fail(op, "expected a floating-point tensor, got ", dtype_name(dt));
}

bool broadcastable(const Shape& a, const Shape& b);
// The broadcast shape, refused (naming op) when a and b do not broadcast or it overflows int64.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// The strides that read `t` as if it had `shape` (0 on broadcast dims); t must broadcast to it.
Shape broadcast_strides(const TensorImpl& t, const Shape& shape);

// Walks every index of `shape` in row-major order. For each run along the last dim it calls
//   f(std::array<int64_t, N> offsets, int64_t n, std::array<int64_t, N> inner_strides)
// where offsets are element offsets of the run's first element in each operand.
template <size_t N, class F>
void for_each_run(const Shape& shape, const std::array<const Shape*, N>& strides,
                  const std::array<int64_t, N>& base, F&& f) {
  const int64_t nd = int64_t(shape.size());
  for (int64_t d = 0; d < nd; ++d)
    if (shape[d] == 0) return;
  if (nd == 0) {
    f(base, int64_t(1), std::array<int64_t, N>{});
    return;
  }
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = (*strides[k])[nd - 1];
  const int64_t n = shape[nd - 1];
  Shape idx(nd - 1, 0);
  std::array<int64_t, N> off = base;
  while (true) {
    f(off, n, inner);
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += (*strides[k])[d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= (*strides[k])[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Contiguous copy of `t` converted to dtype `to` (a plain copy when dtypes match).
std::shared_ptr<TensorImpl> materialize(const TensorImpl& t, DType to);

// Writes `src` (broadcast to dst's shape, any dtype) into the strided view `dst`.
void copy_into(TensorImpl& dst, const TensorImpl& src);

inline Tensor wrap(std::shared_ptr<TensorImpl> impl) { return Tensor(std::move(impl)); }

// An op's fresh (uninitialised) output: a shape that overflows or memory that cannot be had is
// refused naming the op, where tg::empty would say "empty".
inline Tensor empty_for(const char* op, const Shape& shape, DType dtype) {
  return wrap(new_impl(shape, dtype, op));
}

// Bumps the version of t's storage: call after every in-place write.
inline void bump_version(const Tensor& t) { ++t.impl()->storage->version; }

// Refuses in-place writes that would corrupt the tape (PyTorch's leaf / view checks).
void check_inplace(const char* op, const Tensor& t);

}  // namespace tg::detail
