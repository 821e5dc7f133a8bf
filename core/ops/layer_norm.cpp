// layer_norm over the last dim, as the book's LayerNorm module computes it (§4.2: biased variance,
// eps inside the square root) and as llm.c's layernorm_forward / layernorm_backward do: one pass
// forward that keeps each row's mean and 1/std, one pass backward that reads them.
//
// Shape legend: x (..., C) is read as (rows, C); weight and bias are (C); mean and rstd are (rows).
#include <algorithm>

#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

namespace {

void check_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_floating("layer_norm", x);
  detail::check_defined("layer_norm", weight);
  detail::check_defined("layer_norm", bias);
  const Shape c = {x.dim() ? x.size(-1) : -1};
  if (x.dim() == 0 || weight.shape() != c || bias.shape() != c)
    detail::fail("layer_norm", "expected weight and bias of shape [C] for input (..., C), got ",
                 shape_str(weight.shape()), " and ", shape_str(bias.shape()), " for input ",
                 shape_str(x.shape()));
}

}  // namespace

// --- layer_norm: y = (x - mean) * rstd ⊙ weight + bias,  rstd = 1 / sqrt(var + eps), per row ---
//   backward, with xhat = (x - mean) * rstd and dnorm = dy ⊙ weight (one row):
//     dbias   = Σ_rows dy
//     dweight = Σ_rows dy ⊙ xhat
//     dx      = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm ⊙ xhat))
//   Derivation (llm.c's layernorm_backward): mean and rstd depend on the whole row, with
//     d mean / d x_i = 1/C  and  d rstd / d x_i = -rstd³ (x_i - mean) / C = -rstd² xhat_i / C, so
//     d xhat_j / d x_i = rstd (δ_ij - 1/C) - xhat_j · rstd xhat_i / C, and summing dnorm_j times
//     that over j gives dx_i above. The backward reads x, weight, mean and rstd (not y).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm(x, weight, bias);
  const DType dt = detail::promote(x.dtype(), detail::promote(weight.dtype(), bias.dtype()));
  if (weight.dtype() != dt || bias.dtype() != dt || x.dtype() != dt)  // as the book's ops promote
    return layer_norm(x.to(dt), weight.to(dt), bias.to(dt), eps);
  if (dt == DType::BFloat16)  // statistics in float32, the result rounded once
    return layer_norm(x.to(DType::Float32), weight.to(DType::Float32), bias.to(DType::Float32), eps)
        .to(DType::BFloat16);
  const Tensor xc = x.detach().contiguous(), w = weight.detach().contiguous(),
               b = bias.detach().contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  Tensor out = empty(x.shape(), dt), mean = empty({rows}, dt), rstd = empty({rows}, dt);
  detail::dispatch_float("layer_norm", dt, [&](auto z) {
    using T = decltype(z);
    kernels::layernorm_forward(rows, C, xc.data<T>(), w.data<T>(), b.data<T>(), T(eps),
                               out.data<T>(), mean.data<T>(), rstd.data<T>());
  });
  if (any_requires_grad({&x, &weight, &bias}))
    record("NativeLayerNormBackward0", {x, weight, bias}, {xc, w, mean, rstd},
           [rows, C](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor& xs = n.saved_tensor(0);
             const Tensor gc = g.contiguous();
             Tensor dx = zeros(xs.shape(), xs.dtype()), dw = zeros({C}, xs.dtype()),
                    db = zeros({C}, xs.dtype());
             detail::dispatch_float("layer_norm", xs.dtype(), [&](auto z) {
               using T = decltype(z);
               kernels::layernorm_backward(  // accumulates into dx, dw, db
                   rows, C, gc.data<T>(), xs.data<T>(), n.saved_tensor(1).data<T>(),
                   n.saved_tensor(2).data<T>(), n.saved_tensor(3).data<T>(), dx.data<T>(),
                   dw.data<T>(), db.data<T>());
             });
             return {n.needs(0) ? dx : Tensor(), n.needs(1) ? dw : Tensor(),
                     n.needs(2) ? db : Tensor()};
           },
           {&out});
  return out;
}

}  // namespace tg
