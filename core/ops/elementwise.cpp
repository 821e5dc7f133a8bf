// Elementwise ops with PyTorch broadcasting and type promotion, each with its backward.
// A broadcast operand's gradient is summed back to its own shape (sum_to).
#include <cmath>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::dispatch;
using detail::fail;
using detail::wrap;

namespace {

// Converts t to dtype d unless it already is.
Tensor as_dtype(const Tensor& t, DType d) {
  return t.dtype() == d ? t : wrap(detail::materialize(*t.impl(), d));
}

// out[i] = f(a[i], b[i]) over the broadcast shape, computing in T and storing as Out.
template <class T, class Out, class F>
Tensor binary_map(const char* op, const Tensor& a, const Tensor& b, DType out_dtype, F f) {
  const Shape shape = detail::broadcast_shapes(op, a.shape(), b.shape());
  auto out = new_impl(shape, out_dtype, op);
  const Shape sa = detail::broadcast_strides(*a.impl(), shape);
  const Shape sb = detail::broadcast_strides(*b.impl(), shape);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  Out* po = reinterpret_cast<Out*>(out->bytes());
  if (sa == out->strides && sb == out->strides) {  // both contiguous, same shape
    const int64_t n = numel_of(shape);
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return wrap(out);
  }
  detail::for_each_run<3>(shape, {&out->strides, &sa, &sb}, {0, 0, 0},
                          [&](std::array<int64_t, 3> o, int64_t n, std::array<int64_t, 3> s) {
                            Out* y = po + o[0];
                            const T* x0 = pa + o[1];
                            const T* x1 = pb + o[2];
                            for (int64_t i = 0; i < n; ++i) y[i] = f(x0[i * s[1]], x1[i * s[2]]);
                          });
  return wrap(out);
}

// out[i] = f(a[i]) for a floating tensor (integers are first converted to float32).
template <class F>
Tensor unary_map(const char* op, const Tensor& a, F f) {
  detail::check_defined(op, a);
  if (a.dtype() == DType::BFloat16) return detail::narrow_bf16(unary_map(op, detail::widen(a), f));
  const Tensor x = is_floating(a.dtype()) ? a : as_dtype(a, DType::Float32);
  auto out = new_impl(x.shape(), x.dtype(), op);
  dispatch(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<T>) {
      const T* px = x.data<T>();
      T* po = reinterpret_cast<T*>(out->bytes());
      if (x.is_contiguous()) {
        const int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) po[i] = T(f(px[i]));
        return;
      }
      detail::for_each_run<2>(x.shape(), {&out->strides, &x.strides()}, {0, 0},
                              [&](std::array<int64_t, 2> o, int64_t n, std::array<int64_t, 2> s) {
                                for (int64_t i = 0; i < n; ++i)
                                  po[o[0] + i] = T(f(px[o[1] + i * s[1]]));
                              });
    }
  });
  return wrap(out);
}

// y = kernel(x) for a contiguous floating tensor: k(n, const T* x, T* y).
template <class K>
Tensor unary_kernel(const Tensor& x, K k) {
  if (x.dtype() == DType::BFloat16) return detail::narrow_bf16(unary_kernel(detail::widen(x), k));
  Tensor out = empty(x.shape(), x.dtype());
  detail::dispatch_float("unary", x.dtype(), [&](auto z) {
    using T = decltype(z);
    k(x.numel(), x.data<T>(), out.data<T>());
  });
  return out;
}

// A Python scalar next to a tensor keeps the tensor's dtype (int tensors become float32 when the
// scalar is fractional), as in PyTorch.
Tensor scalar_like(const Tensor& a, double s) {
  DType d = a.dtype();
  if (!is_floating(d) && s != std::floor(s)) d = DType::Float32;
  if (d == DType::Bool) d = DType::Int64;
  return scalar_tensor(s, d);
}

enum class Arith { Add, Sub, Mul, Div };

// The vector kernels take the layouts that dominate training: same-shape contiguous operands, a
// row vector broadcast over a contiguous tensor (bias adds, LayerNorm's scale), and a scalar.
// Elementwise IEEE arithmetic rounds the same in any lane, so these give the loop's exact results.
// Returns an undefined tensor for any other layout.
template <class T>
Tensor arith_kernel(Arith kind, const Tensor& x, const Tensor& y, const Shape& shape, DType dt) {
  const bool commutes = kind == Arith::Add || kind == Arith::Mul;
  const bool x_full = x.shape() == shape && x.is_contiguous();
  const bool y_full = y.shape() == shape && y.is_contiguous();
  if (!x_full) return commutes && y_full ? arith_kernel<T>(kind, y, x, shape, dt) : Tensor();
  const kernels::BinOp op = kind == Arith::Add   ? kernels::BinOp::add
                            : kind == Arith::Sub ? kernels::BinOp::sub
                            : kind == Arith::Mul ? kernels::BinOp::mul
                                                 : kernels::BinOp::div;
  const int64_t n = numel_of(shape);
  Tensor out = empty(shape, dt);
  if (y_full) {
    kernels::binary(op, n, x.data<T>(), y.data<T>(), out.data<T>());
    return out;
  }
  if (y.numel() == 1) {
    kernels::binary_scalar(op, n, x.data<T>(), *y.data<T>(), out.data<T>());
    return out;
  }
  const Shape sy = detail::broadcast_strides(*y.impl(), shape);
  const int64_t cols = shape.empty() ? 1 : shape.back();
  bool row = !shape.empty() && sy.back() == 1 && cols > 0;
  for (size_t d = 0; row && d + 1 < sy.size(); ++d) row = sy[d] == 0;
  if (!row) return Tensor();
  kernels::binary_rowbcast(op, n / cols, cols, x.data<T>(), y.data<T>(), out.data<T>());
  return out;
}

Tensor arith_forward(const char* op, Arith kind, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  DType dt = detail::promote(a.dtype(), b.dtype());
  if (kind == Arith::Div && !is_floating(dt)) dt = DType::Float32;  // true division
  if (dt == DType::Bool) dt = DType::Int64;
  if (dt == DType::BFloat16)
    return detail::narrow_bf16(arith_forward(op, kind, detail::widen(a), detail::widen(b)));
  const Tensor x = as_dtype(a, dt), y = as_dtype(b, dt);
  return dispatch(dt, [&](auto z) -> Tensor {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, bool>) {
      fail(op, "bool arithmetic is not supported");
    } else {
      if constexpr (std::is_floating_point_v<T>) {
        Tensor fast =
            arith_kernel<T>(kind, x, y, detail::broadcast_shapes(op, x.shape(), y.shape()), dt);
        if (fast.defined()) return fast;
      }
      switch (kind) {
        case Arith::Add:
          return binary_map<T, T>(op, x, y, dt, [](T p, T q) { return T(p + q); });
        case Arith::Sub:
          return binary_map<T, T>(op, x, y, dt, [](T p, T q) { return T(p - q); });
        case Arith::Mul:
          return binary_map<T, T>(op, x, y, dt, [](T p, T q) { return T(p * q); });
        case Arith::Div:
          return binary_map<T, T>(op, x, y, dt, [](T p, T q) { return T(p / q); });
      }
      return Tensor();
    }
  });
}

// sum_to(g op y, shape): the gradient of one input of a mul or div. When the node passes g to this
// input alone (`only`), the shapes agree and the engine allows it (gradient_reusable), it is
// written into g's own buffer instead, with the kernels' float32 op: the same IEEE operation per
// element, so the same bits. y is float32 of g's shape or a single value broadcast to it.
Tensor grad_op(kernels::BinOp op, const Tensor& g, const Tensor& y, const Shape& shape, bool only) {
  if (only && g.shape() == shape && gradient_reusable(g) && y.dtype() == DType::Float32) {
    float* pg = g.data<float>();
    if (y.shape() == g.shape() && y.is_contiguous()) {
      kernels::binary(op, g.numel(), pg, y.data<float>(), pg);
      return g;
    }
    if (y.numel() == 1) {  // g is the broadcast result, so it has at least y's dims
      kernels::binary_scalar(op, g.numel(), pg, *y.data<float>(), pg);
      return g;
    }
  }
  return sum_to(op == kernels::BinOp::mul ? g * y : g / y, shape);
}

}  // namespace

// --- add / sub: the gradient passes through, summed back over broadcast dims ---
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = arith_forward("add", Arith::Add, a, b);
  if (any_requires_grad({&a, &b}))
    record("AddBackward0", {a, b}, {},
           [sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             return {n.needs(0) ? sum_to(g, sa) : Tensor(), n.needs(1) ? sum_to(g, sb) : Tensor()};
           },
           {&out});
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = arith_forward("sub", Arith::Sub, a, b);
  if (any_requires_grad({&a, &b}))
    record("SubBackward0", {a, b}, {},
           [sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             return {n.needs(0) ? sum_to(g, sa) : Tensor(),
                     n.needs(1) ? neg(sum_to(g, sb)) : Tensor()};
           },
           {&out});
  return out;
}

// --- mul: d(a*b) = g*b da + g*a db ---
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = arith_forward("mul", Arith::Mul, a, b);
  if (any_requires_grad({&a, &b}))
    record(
        "MulBackward0", {a, b}, {save_for(b, a), save_for(a, b)},
        [sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
          // ga = g ⊙ b, gb = g ⊙ a, each summed back over its broadcast dims
          const bool only = n.needs(0) != n.needs(1);  // e.g. dropout: the mask needs none
          return {
              n.needs(0) ? grad_op(kernels::BinOp::mul, g, n.saved_tensor(1), sa, only) : Tensor(),
              n.needs(1) ? grad_op(kernels::BinOp::mul, g, n.saved_tensor(0), sb, only) : Tensor()};
        },
        {&out});
  return out;
}

// --- div: d(a/b) = g/b da - g*a/b² db ---
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = arith_forward("div", Arith::Div, a, b);
  if (any_requires_grad({&a, &b}))
    record("DivBackward0", {a, b}, {save_for(b, a), b},
           [sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             // ga = g / b, gb = -g ⊙ a / b², each summed back over its broadcast dims
             const Tensor &x = n.saved_tensor(0), &y = n.saved_tensor(1);
             return {n.needs(0) ? grad_op(kernels::BinOp::div, g, y, sa, !n.needs(1)) : Tensor(),
                     n.needs(1) ? sum_to(neg(g * x) / (y * y), sb) : Tensor()};
           },
           {&out});
  return out;
}

Tensor add(const Tensor& a, double s) { return add(a, scalar_like(a, s)); }
Tensor sub(const Tensor& a, double s) { return sub(a, scalar_like(a, s)); }
Tensor mul(const Tensor& a, double s) { return mul(a, scalar_like(a, s)); }
Tensor div(const Tensor& a, double s) { return div(a, scalar_like(a, s)); }
Tensor rsub(double s, const Tensor& a) { return sub(scalar_like(a, s), a); }
Tensor rdiv(double s, const Tensor& a) { return div(scalar_like(a, s), a); }

Tensor neg(const Tensor& a) {
  detail::check_defined("neg", a);
  Tensor out = arith_forward("neg", Arith::Sub, scalar_like(a, 0), a);
  if (any_requires_grad({&a}))
    record("NegBackward0", {a}, {},
           [](Node&, const Tensor& g) -> std::vector<Tensor> { return {neg(g)}; }, {&out});
  return out;
}

// --- pow with a scalar exponent: d(a^e) = e*a^(e-1) ---
Tensor pow(const Tensor& a, double e) {
  Tensor out = unary_map("pow", a, [e](auto x) { return std::pow(x, decltype(x)(e)); });
  if (any_requires_grad({&a}))
    record("PowBackward0", {a}, {a},
           [e](Node& n, const Tensor& g) -> std::vector<Tensor> {
             if (e == 0) return {zeros_like(g)};
             return {g * (pow(n.saved_tensor(0), e - 1) * e)};
           },
           {&out});
  return out;
}

// --- exp: d(e^a) = y, the output itself ---
Tensor exp(const Tensor& a) {
  // A strided view is copied, and integers converted to float32 as PyTorch does, so that exp
  // gives the same bits whatever the layout or input dtype.
  const Tensor x = is_floating(a.dtype()) ? a.detach().contiguous() : a.to(DType::Float32);
  Tensor out = unary_kernel(x, [](int64_t n, const auto* v, auto* y) { kernels::exp(n, v, y); });
  if (any_requires_grad({&a}))
    record("ExpBackward0", {a}, {out},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> { return {g * n.saved_tensor(0)}; },
           {&out});
  return out;
}

// --- log: d(log a) = 1/a ---
Tensor log(const Tensor& a) {
  Tensor out = unary_map("log", a, [](auto x) { return std::log(x); });
  if (any_requires_grad({&a}))
    record("LogBackward0", {a}, {a},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> { return {g / n.saved_tensor(0)}; },
           {&out});
  return out;
}

// --- sqrt: d(sqrt a) = 1/(2y) ---
Tensor sqrt(const Tensor& a) {
  Tensor out = unary_map("sqrt", a, [](auto x) { return std::sqrt(x); });
  if (any_requires_grad({&a}))
    record("SqrtBackward0", {a}, {out},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             return {g / (n.saved_tensor(0) * 2.0)};
           },
           {&out});
  return out;
}

// --- tanh: d(tanh a) = 1 - y² ---
Tensor tanh(const Tensor& a) {
  Tensor out = unary_map("tanh", a, [](auto x) { return std::tanh(x); });
  if (any_requires_grad({&a}))
    record("TanhBackward0", {a}, {out},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& y = n.saved_tensor(0);
             return {g * rsub(1.0, y * y)};
           },
           {&out});
  return out;
}

// --- GELU, tanh form (the book's GELU, §4.3):
//   y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x³)
//   dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) sqrt(2/pi) (1 + 3·0.044715 x²)
Tensor gelu(const Tensor& a) {
  detail::check_floating("gelu", a);
  if (a.dtype() == DType::BFloat16) return gelu(a.to(DType::Float32)).to(DType::BFloat16);
  const Tensor x = a.detach().contiguous();
  Tensor out =
      unary_kernel(x, [](int64_t n, const auto* v, auto* y) { kernels::gelu_forward(n, v, y); });
  if (any_requires_grad({&a}))
    record("GeluBackward0", {a}, {x},
           [](Node& n, const Tensor& g) -> std::vector<Tensor> {
             // dx = dout ⊙ gelu'(x), over dout's own buffer when it is free
             const Tensor& xs = n.saved_tensor(0);
             Tensor dx = gradient_buffer(g, xs.dtype());
             const Tensor gc = g.contiguous();
             detail::dispatch_float("gelu", xs.dtype(), [&](auto z) {
               using T = decltype(z);
               kernels::gelu_backward(xs.numel(), xs.data<T>(), gc.data<T>(), dx.data<T>());
             });
             return {dx};
           },
           {&out});
  return out;
}

// --- comparisons: bool masks, off the tape ---
namespace {
enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };
Tensor compare(const char* op, Cmp c, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  const DType dt = detail::promote(a.dtype(), b.dtype());
  if (dt == DType::BFloat16) return compare(op, c, detail::widen(a), detail::widen(b));
  const Tensor x = as_dtype(a, dt), y = as_dtype(b, dt);
  return dispatch(dt, [&](auto z) -> Tensor {
    using T = decltype(z);
    return binary_map<T, bool>(op, x, y, DType::Bool, [c](T p, T q) {
      switch (c) {
        case Cmp::Eq:
          return p == q;
        case Cmp::Ne:
          return p != q;
        case Cmp::Lt:
          return p < q;
        case Cmp::Le:
          return p <= q;
        case Cmp::Gt:
          return p > q;
        case Cmp::Ge:
          return p >= q;
      }
      return false;
    });
  });
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", Cmp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", Cmp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", Cmp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", Cmp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", Cmp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", Cmp::Ge, a, b); }
Tensor eq(const Tensor& a, double s) { return eq(a, scalar_like(a, s)); }
Tensor lt(const Tensor& a, double s) { return lt(a, scalar_like(a, s)); }
Tensor gt(const Tensor& a, double s) { return gt(a, scalar_like(a, s)); }

// --- where(cond, a, b): the gradient goes to a where cond holds, to b elsewhere ---
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined("where", cond);
  if (cond.dtype() != DType::Bool)
    fail("where", "the condition must be a bool tensor, got ", dtype_name(cond.dtype()));
  const Shape ab = detail::broadcast_shapes("where", a.shape(), b.shape());
  const Shape shape = detail::broadcast_shapes("where", cond.shape(), ab);
  const DType dt = detail::promote(a.dtype(), b.dtype());
  const Tensor x = as_dtype(a, dt).expand(shape).contiguous();
  const Tensor y = as_dtype(b, dt).expand(shape).contiguous();
  const Tensor c = cond.expand(shape).contiguous();
  Tensor out = empty(shape, dt);
  detail::dispatch_all(dt, [&](auto z) {  // a choice between values: no arithmetic
    using T = decltype(z);
    const bool* pc = c.data<bool>();
    const T *px = x.data<T>(), *py = y.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
  });
  if (any_requires_grad({&a, &b}))
    record("WhereBackward0", {a, b}, {c},
           [sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& m = n.saved_tensor(0);
             const Tensor zero = zeros({}, g.dtype());
             return {n.needs(0) ? sum_to(where(m, g, zero), sa) : Tensor(),
                     n.needs(1) ? sum_to(where(m, zero, g), sb) : Tensor()};
           },
           {&out});
  return out;
}

// --- operators ---
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return div(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(double s, const Tensor& a) { return rsub(s, a); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(s, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace tg
