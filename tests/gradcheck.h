// gradcheck: the analytic gradient against central finite differences, in float64.
//
// The output is reduced to a scalar with fixed pseudo-random weights, L = Σ w ⊙ f(x), not a plain
// sum: softmax rows always sum to one, so a plain sum would see a gradient that is identically 0.
// Each input element x_i is moved by ±eps and dL/dx_i ≈ (L(x+eps) − L(x−eps)) / 2eps is compared
// with the tape's gradient: |analytic − numeric| ≤ atol + rtol·|numeric| (PyTorch's gradcheck).
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/impl.h"
#include "core/ops.h"

namespace tg::testing {

struct GradcheckResult {
  bool ok = true;
  std::string report;  // the first mismatches, "input i, element j: analytic a vs numeric n"
};

// Deterministic weights in [-1, 1), different for every element.
inline Tensor reduction_weights(const Shape& shape, uint64_t seed = 12345) {
  Tensor w = empty(shape, DType::Float64);
  double* p = w.data<double>();
  uint64_t s = seed;
  for (int64_t i = 0; i < w.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = double(s >> 11) / double(1ULL << 53) * 2.0 - 1.0;
  }
  return w;
}

// inputs: float64 leaves (contiguous); f may view, transpose or slice them itself.
// max_elements > 0 checks only that many elements of each input, evenly spread (first and last
// included): for inputs whose full check would take minutes.
inline GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                 std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-6,
                                 double rtol = 1e-5, int64_t max_elements = 0) {
  GradcheckResult res;
  for (Tensor& x : inputs) {
    if (x.dtype() == DType::Float64) {
      x.zero_grad();
      x.requires_grad_(true);
    }
  }
  Tensor out = f(inputs);
  const Tensor w = reduction_weights(out.shape());
  auto loss_of = [&](const Tensor& y) { return (y.to(DType::Float64) * w).sum(); };
  loss_of(out).backward();

  std::ostringstream os;
  int shown = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (x.dtype() != DType::Float64) continue;
    const Tensor g = x.grad();
    const std::vector<double> analytic =
        g.defined() ? g.to_vector<double>() : std::vector<double>(size_t(x.numel()), 0.0);
    double* p = x.data<double>();
    const int64_t count = max_elements > 0 ? std::min(max_elements, x.numel()) : x.numel();
    for (int64_t c = 0; c < count; ++c) {
      const int64_t i = count > 1 ? c * (x.numel() - 1) / (count - 1) : 0;
      const double orig = p[i];
      double lp, lm;
      {
        NoGradGuard ng;
        p[i] = orig + eps;
        lp = loss_of(f(inputs)).item<double>();
        p[i] = orig - eps;
        lm = loss_of(f(inputs)).item<double>();
        p[i] = orig;
      }
      const double numeric = (lp - lm) / (2 * eps);
      const double a = analytic[size_t(i)];
      const bool close = std::isfinite(numeric)
                             ? std::abs(a - numeric) <= atol + rtol * std::abs(numeric)
                             : a == numeric;
      if (!close) {
        res.ok = false;
        if (shown++ < 5)
          os << "input " << k << " " << shape_str(x.shape()) << ", element " << i << ": analytic "
             << a << " vs numeric " << numeric << "\n";
      }
    }
  }
  res.report = os.str();
  return res;
}

// A float64 tensor of the given shape with values spread over [lo, hi).
inline Tensor rand64(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = reduction_weights(shape, seed);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (p[i] + 1) / 2 * (hi - lo);
  return t;
}

}  // namespace tg::testing
