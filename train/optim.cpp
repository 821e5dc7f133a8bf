// AdamW, gradient clipping and the warmup + cosine schedule (see optim.h).
#include "train/optim.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "core/autograd.h"
#include "core/threadpool.h"

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

namespace {

// _single_tensor_adamw's per-element arithmetic. Python computes the scalars in double; the
// tensor ops round them to float. Written without std::fma (a libm call unless the build enables
// FMA) so the loop vectorizes; ATen's AVX2 add_ fuses `m*b1 + w1*g`, so exp_avg may differ from
// PyTorch's by an ulp.
struct AdamScalars {
  float decay, b1, w1, b2, w2, bc2_sqrt, eps, neg_step;
};

void adamw_span(int64_t n, float* __restrict p, const float* __restrict g, float* __restrict m,
                float* __restrict v, const AdamScalars& s) {
  const AdamScalars c = s;  // locals, so the compiler knows they do not alias the arrays
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float pi = p[i] * c.decay;                // param.mul_(1 - lr * weight_decay)
    const float mi = m[i] * c.b1 + c.w1 * gi;       // exp_avg.mul_(b1).add_(grad, 1-b1)
    const float vi = v[i] * c.b2 + c.w2 * gi * gi;  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;  // (sqrt / bc2_sqrt).add_(eps)
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + c.neg_step * (mi / denom);  // addcdiv_(exp_avg, denom, -step_size)
  }
}

}  // namespace

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_count;
  const double bc1 = 1 - std::pow(beta1, double(step_count));
  const double bc2 = 1 - std::pow(beta2, double(step_count));
  AdamScalars s;
  s.decay = float(1 - lr * weight_decay);
  s.b1 = float(beta1);
  s.w1 = float(1 - beta1);
  s.b2 = float(beta2);
  s.w2 = float(1 - beta2);
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.eps = float(eps);
  s.neg_step = float(-(lr / bc1));
  const std::vector<Tensor> params = model_.parameters();
  if (params.size() != exp_avg.size())
    throw std::logic_error("AdamW: the model's parameter list changed");
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (p.dtype() != DType::Float32 || !p.is_contiguous())
      throw std::invalid_argument("AdamW: parameters must be contiguous float32");
    const Tensor gc = g.contiguous();
    float* pp = p.data<float>();
    const float* gp = gc.data<float>();
    float* mp = exp_avg[k].data<float>();
    float* vp = exp_avg_sq[k].data<float>();
    const int64_t n = p.numel();
    // Elementwise, so splitting into chunks changes nothing in the result.
    constexpr int64_t kChunk = 1 << 16;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    if (chunks <= 1) {
      adamw_span(n, pp, gp, mp, vp, s);
    } else {
      parallel_for(chunks, [&](int64_t c) {
        const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
        adamw_span(e - b, pp + b, gp + b, mp + b, vp + b, s);
      });
    }
  }
}

double clip_grad_norm(nn::Module& model, double max_norm) {
  NoGradGuard no_grad;
  double total = 0;
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor gc = g.contiguous();
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
