// AdamW, gradient clipping and the warmup + cosine schedule (see optim.h).
#include "train/optim.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "core/autograd.h"
#include "core/ops.h"

namespace tg::train {

AdamW::AdamW(nn::Module& model, double lr, double weight_decay, double beta1, double beta2,
             double eps)
    : lr(lr), weight_decay(weight_decay), beta1(beta1), beta2(beta2), eps(eps), model_(model) {
  if (!(lr >= 0)) throw std::invalid_argument("AdamW: invalid learning rate " + std::to_string(lr));
  if (!(weight_decay >= 0))
    throw std::invalid_argument("AdamW: invalid weight_decay " + std::to_string(weight_decay));
  for (const Tensor& p : model.parameters()) {
    exp_avg.push_back(zeros(p.shape()));
    exp_avg_sq.push_back(zeros(p.shape()));
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_count;
  const std::vector<Tensor> params = model_.parameters();
  if (params.size() != exp_avg.size())
    throw std::logic_error("AdamW: the model's parameter list changed");
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k];  // a handle on the parameter, updated in place
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const AdamWStep s{lr, beta1, beta2, eps, weight_decay, step_count};
    if (p.dtype() == DType::BFloat16) {  // model.to(torch.bfloat16): every op of the update in bf16
      adamw_bf16_(p, g.contiguous(), exp_avg[k], exp_avg_sq[k], s);
      continue;
    }
    if (p.dtype() != DType::Float32 || !p.is_contiguous())
      throw std::invalid_argument("AdamW: parameters must be contiguous float32 or bfloat16");
    // torch/optim/adamw.py's _single_tensor_adamw per element, vectorized and split over the
    // pool by the kernels (elementwise, so the split changes nothing): p *= 1 - lr*wd;
    // m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
    // The kernel updates m in 2.x's lerp form, which can differ from 1.13's mul/add by an ulp.
    adamw_(p, g, exp_avg[k], exp_avg_sq[k], s);
  }
}

void AdamW::to(DType dtype) {
  for (std::vector<Tensor>* moments : {&exp_avg, &exp_avg_sq})
    for (Tensor& m : *moments) m = m.to(dtype);
}

double clip_grad_norm(nn::Module& model, double max_norm) {
  NoGradGuard no_grad;
  double total = 0;
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor gc = g.to(DType::Float32).contiguous();  // a bf16 gradient widened, exactly
    const float* d = gc.data<float>();
    double sq = 0;
    for (int64_t i = 0; i < gc.numel(); ++i) sq += double(d[i]) * d[i];
    total += sq;
    grads.push_back(g);
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

double warmup_cosine_lr(int64_t global_step, int64_t total_steps, int64_t warmup_steps,
                        double initial_lr, double peak_lr, double min_lr) {
  if (global_step < warmup_steps)
    return initial_lr + double(global_step) * ((peak_lr - initial_lr) / double(warmup_steps));
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, double(global_step - warmup_steps) / double(span));
  return min_lr + (peak_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace tg::train
