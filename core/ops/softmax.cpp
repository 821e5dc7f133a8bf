// softmax, log_softmax and cross_entropy. Each normalises along one dim of a contiguous
// (outer, L, inner) layout: element (o, l, i) sits at (o*L + l)*inner + i, so dim = -1 is the
// plain row case (inner = 1) and no op copies to move the dim last.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::fail;

namespace {

struct Layout {
  int64_t outer = 1, len = 1, inner = 1;
};

Layout layout_of(const Shape& s, int64_t dim) {
  Layout l;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < dim)
      l.outer *= s[i];
    else if (i == dim)
      l.len = s[i];
    else
      l.inner *= s[i];
  }
  return l;
}

// y = softmax(x) (or log_softmax when `log`) along the middle axis of the layout. Stable form:
// subtract the max first; a row that is all -inf gives NaN, as in PyTorch.
template <class T>
void softmax_rows(const T* x, T* y, Layout l, bool log) {
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const T* xr = x + o * l.len * l.inner + i;
      T* yr = y + o * l.len * l.inner + i;
      const int64_t s = l.inner;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < l.len; ++k) m = std::max(m, xr[k * s]);
      if (std::isnan(m)) m = T(0);  // NaNs still propagate through the sum
      double sum = 0;
      for (int64_t k = 0; k < l.len; ++k) {
        const T e = std::exp(xr[k * s] - m);
        if (!log) yr[k * s] = e;
        sum += double(e);
      }
      if (log) {
        const T lse = m + T(std::log(sum));
        for (int64_t k = 0; k < l.len; ++k) yr[k * s] = xr[k * s] - lse;
      } else {
        const T inv = T(1.0 / sum);
        for (int64_t k = 0; k < l.len; ++k) yr[k * s] *= inv;
      }
    }
}

Tensor softmax_forward(const char* op, const Tensor& a, int64_t dim, bool log) {
  detail::check_floating(op, a);
  const int64_t d = detail::wrap_dim(op, dim, a.dim());
  const Tensor x = a.detach().contiguous();
  Tensor y = empty(a.shape(), a.dtype());
  const Layout l = a.dim() == 0 ? Layout{} : layout_of(a.shape(), d);
  detail::dispatch_float(op, a.dtype(), [&](auto z) {
    using T = decltype(z);
    if (!log && l.inner == 1)  // the usual case, dim = -1: the fused row kernel
      kernels::softmax_rows(l.outer, l.len, x.data<T>(), y.data<T>());
    else
      softmax_rows<T>(x.data<T>(), y.data<T>(), l, log);
  });
  return y;
}

}  // namespace

// --- softmax ---
//   forward:  y = exp(x - max) / Σ exp(x - max)
//   backward: dx = y ⊙ (dy − ⟨y, dy⟩), the inner product taken along dim; reads only the output
Tensor softmax(const Tensor& a, int64_t dim) {
  if (a.dtype() == DType::BFloat16)  // in float32, rounded once (PyTorch's bf16 softmax)
    return softmax(a.to(DType::Float32), dim).to(DType::BFloat16);
  Tensor y = softmax_forward("softmax", a, dim, false);
  if (any_requires_grad({&a}))
    record("SoftmaxBackward0", {a}, {y},
           [dim](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& y = n.saved_tensor(0);
             if (detail::wrap_dim("softmax", dim, y.dim()) == y.dim() - 1 && y.dim() > 0) {
               Tensor dx = gradient_buffer(g, y.dtype());  // may be dy's own buffer
               const Tensor gc = g.contiguous();
               const int64_t cols = y.shape().back(), rows = cols ? y.numel() / cols : 0;
               detail::dispatch_float("softmax", y.dtype(), [&](auto z) {
                 using T = decltype(z);
                 kernels::softmax_rows_backward(rows, cols, y.data<T>(), gc.data<T>(),
                                                dx.data<T>());
               });
               return {dx};
             }
             return {y * (g - sum(g * y, dim, /*keepdim=*/true))};
           },
           {&y});
  return y;
}

// --- log_softmax ---
//   forward:  y = x − max − log Σ exp(x − max)
//   backward: dx = dy − exp(y) Σ dy
Tensor log_softmax(const Tensor& a, int64_t dim) {
  if (a.dtype() == DType::BFloat16)
    return log_softmax(a.to(DType::Float32), dim).to(DType::BFloat16);
  Tensor y = softmax_forward("log_softmax", a, dim, true);
  if (any_requires_grad({&a}))
    record("LogSoftmaxBackward0", {a}, {y},
           [dim](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& y = n.saved_tensor(0);
             return {g - exp(y) * sum(g, dim, /*keepdim=*/true)};
           },
           {&y});
  return y;
}

// --- cross_entropy: mean over rows of −log softmax(logits)[row, target] ---
//   forward:  per row the max m and s = Σ exp(x − m) (softmax's first two passes, nothing
//             stored); loss = −Σ (x[t] − m − log s) / N, in double.
//   backward: dlogits = (exp(x − m) · (g/N)/s − onehot(target) · g/N), recomputed from the saved
//             logits in one pass, written over them when nothing else holds them (the GPT's
//             training step: then no second buffer of that size is allocated and first touched).
// Targets equal to -100 are ignored (PyTorch's default ignore_index) and not counted in N.
// The GPT's logits (N × 50257) are its largest activation: keeping them instead of the
// probabilities saves writing and re-reading a second buffer of that size. The price: editing the
// logits in place before backward() raises the saved-tensor version error, where PyTorch (which
// saves log_softmax's output) would not.
// num_classes < the row length: the classes are each row's first num_classes columns, the rest a
// padded vocabulary's (llm.c's padded_vocab_size, train --pad-vocab). The rows are read in place
// with their full stride, the sums run over the classes only (the bits of the sliced copy's), and
// the padding's gradient is 0.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t num_classes) {
  if (autocast_enabled() && logits.dtype() == DType::BFloat16)  // on autocast's float32 list
    return cross_entropy(logits.to(DType::Float32), targets, num_classes);
  if (logits.dtype() == DType::BFloat16)
    return cross_entropy(logits.to(DType::Float32), targets, num_classes).to(DType::BFloat16);
  detail::check_floating("cross_entropy", logits);
  detail::check_defined("cross_entropy", targets);
  if (targets.dtype() != DType::Int64)
    fail("cross_entropy", "targets must be int64 class indices, got ", dtype_name(targets.dtype()));
  if (logits.dim() != 2 || targets.dim() != 1 || targets.shape()[0] != logits.shape()[0])
    fail("cross_entropy", "expected logits (N, C) and targets (N), got ", shape_str(logits.shape()),
         " and ", shape_str(targets.shape()));
  constexpr int64_t kIgnore = -100;
  const int64_t N = logits.shape()[0], ld = logits.shape()[1];
  const int64_t C = num_classes < 0 ? ld : num_classes;
  if (C > ld)
    fail("cross_entropy", "num_classes ", C, " is more than the logits' ", ld, " columns (logits ",
         shape_str(logits.shape()), ")");
  const Tensor t = targets.contiguous();
  const int64_t* tp = t.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (tp[i] == kIgnore) continue;
    if (tp[i] < 0 || tp[i] >= C)
      throw std::out_of_range("cross_entropy: target " + std::to_string(tp[i]) + " at row " +
                              std::to_string(i) + " is out of bounds for " + std::to_string(C) +
                              " classes (logits " + shape_str(logits.shape()) + ")");
    ++count;
  }
  const Tensor x = logits.detach().contiguous();
  Tensor mx = empty({N}, logits.dtype()), sums = empty({N}, logits.dtype());
  Tensor loss = empty({}, logits.dtype());
  detail::dispatch_float("cross_entropy", logits.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T *pm = mx.data<T>(), *ps = sums.data<T>();
    kernels::softmax_stats_rows(N, C, ld, px, mx.data<T>(), sums.data<T>());
    double total = 0;
    for (int64_t i = 0; i < N; ++i)
      if (tp[i] != kIgnore)
        total -= double(px[i * ld + tp[i]]) - double(pm[i]) - std::log(double(ps[i]));
    *loss.data<T>() = T(total / double(count));  // no valid target: 0/0 = nan, as in PyTorch
  });
  if (any_requires_grad({&logits}))
    record("NllLossBackward0", {logits}, {x, mx, sums, t},
           [N, C, ld, count](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& xs = n.saved_tensor(0);
             const int64_t* tt = n.saved_tensor(3).data<int64_t>();
             Tensor d = reusable_saved(n, 0);
             if (!d.defined()) d = empty({N, ld}, xs.dtype());
             detail::dispatch_float("cross_entropy", d.dtype(), [&](auto z) {
               using T = decltype(z);
               const T scale = T(g.item<double>() / double(count));
               const T* ps = n.saved_tensor(2).data<T>();
               std::vector<T> row_scale(size_t(N), T(0));  // ignored rows: 0
               for (int64_t i = 0; i < N; ++i)
                 if (tt[i] != kIgnore) row_scale[size_t(i)] = scale / ps[i];
               kernels::exp_rows_scaled(N, C, ld, xs.data<T>(), n.saved_tensor(1).data<T>(),
                                        row_scale.data(), d.data<T>());
               for (int64_t i = 0; i < N; ++i) {
                 T* row = d.data<T>() + i * ld;
                 // An ignored row, and the padding's columns of every row: no gradient.
                 std::fill(row + (tt[i] == kIgnore ? 0 : C), row + ld, T(0));
                 if (tt[i] != kIgnore) row[tt[i]] -= scale;
               }
             });
             return {d};
           },
           {&loss});
  return loss;
}

}  // namespace tg
