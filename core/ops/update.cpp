// In-place parameter updates, off the tape: what an optimizer in train/ needs from the kernels,
// with the checks that make the raw buffers safe to hand over.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/autograd.h"
#include "core/bfloat16.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/threadpool.h"

namespace tg {

void adamw_(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s) {
  for (const Tensor* t : {&p, &exp_avg, &exp_avg_sq})
    if (t->dtype() != DType::Float32 || !t->is_contiguous() || t->shape() != p.shape())
      detail::fail("adamw_", "expected contiguous float32 tensors of one shape, got ",
                   dtype_name(t->dtype()), " ", shape_str(t->shape()), " beside the parameter's ",
                   shape_str(p.shape()));
  if (g.shape() != p.shape() || g.dtype() != DType::Float32)
    detail::fail("adamw_", "gradient ", dtype_name(g.dtype()), " ", shape_str(g.shape()),
                 " for a parameter of shape ", shape_str(p.shape()));
  NoGradGuard no_grad;
  const Tensor gc = g.contiguous();
  adamw_span(p.numel(), p.data<float>(), gc.data<float>(), exp_avg.data<float>(),
             exp_avg_sq.data<float>(), s);
}

void adamw_span(int64_t n, float* p, const float* g, float* exp_avg, float* exp_avg_sq,
                const AdamWStep& s) {
  kernels::adamw(n, p, g, exp_avg, exp_avg_sq, float(s.lr), float(s.beta1), float(s.beta2),
                 float(s.eps), float(s.weight_decay), s.step);
}

// torch/optim/adamw.py's _single_tensor_adamw, one bf16 rounding per op, each op as ATen's
// vectorized CPU kernel computes it for bf16 (in float32, scalars as float32):
//   p.mul_(1 - lr*wd);  m.lerp_(g, 1 - b1) = fma(1 - b1, g - m, m);  v.mul_(b2);
//   v.addcmul_(g, g, value=1 - b2) = v + (1 - b2)*g*g;  d = sqrt(v);  d = d / sqrt(bc2);
//   d = d + eps;  p.addcdiv_(m, d, value=-lr/bc1) = p + (-lr/bc1)*m / d.
// Scalar code: elementwise, so any split over the pool gives the same bits.
void adamw_bf16_(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamWStep& s) {
  for (const Tensor* t :
       {&std::as_const(p), &g, &std::as_const(exp_avg), &std::as_const(exp_avg_sq)})
    if (t->dtype() != DType::BFloat16 || !t->is_contiguous() || t->shape() != p.shape())
      detail::fail("adamw_bf16_", "expected contiguous bfloat16 tensors of one shape, got ",
                   dtype_name(t->dtype()), " ", shape_str(t->shape()), " beside the parameter's ",
                   shape_str(p.shape()));
  const double bc1 = 1 - std::pow(s.beta1, double(s.step));
  const double bc2 = 1 - std::pow(s.beta2, double(s.step));
  const float decay = float(1 - s.lr * s.weight_decay), w1 = float(1 - s.beta1);
  const float b2 = float(s.beta2), w2 = float(1 - s.beta2), eps = float(s.eps);
  const float bc2_sqrt = float(std::sqrt(bc2)), step_size = float(-(s.lr / bc1));
  bfloat16* pp = p.data<bfloat16>();
  const bfloat16* gp = g.data<bfloat16>();
  bfloat16* mp = exp_avg.data<bfloat16>();
  bfloat16* vp = exp_avg_sq.data<bfloat16>();
  constexpr int64_t kPiece = 1 << 14;
  const int64_t n = p.numel();
  parallel_for((n + kPiece - 1) / kPiece, [&](int64_t piece) {
    for (int64_t i = piece * kPiece; i < std::min(n, (piece + 1) * kPiece); ++i) {
      const float gi = gp[i];
      const bfloat16 pi = float(pp[i]) * decay;
      const bfloat16 mi = std::fma(w1, gi - float(mp[i]), float(mp[i]));
      const bfloat16 v1 = float(vp[i]) * b2;
      const bfloat16 vi = float(v1) + w2 * gi * gi;
      const bfloat16 root = std::sqrt(float(vi));
      const bfloat16 scaled = float(root) / bc2_sqrt;
      const bfloat16 denom = float(scaled) + eps;
      pp[i] = float(pi) + step_size * float(mi) / float(denom);
      mp[i] = mi;
      vp[i] = vi;
    }
  });
}

std::string kernel_path() { return kernels::active_isa(); }

std::string gemm_blocking() {
  const kernels::GemmBlocking b = kernels::gemm_blocking_for(kernels::active_table());
  return std::to_string(b.mc) + "," + std::to_string(b.kc) + "," + std::to_string(b.nc);
}

}  // namespace tg
