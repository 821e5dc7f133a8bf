// AdamW as torch.optim.AdamW (PyTorch 1.13, single-tensor path, amsgrad off), gradient clipping
// as torch.nn.utils.clip_grad_norm_, and the book's appendix-D learning-rate schedule
// (linear warmup, then cosine decay).
//
// The book builds its optimizer as AdamW(model.parameters(), lr, weight_decay): one parameter
// group, so the decoupled weight decay applies to every parameter (embeddings, LayerNorm scales
// and biases included). We do the same.
//
// Not here: parameter groups, amsgrad, maximize, foreach/fused kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/module.h"

namespace tg::train {

class AdamW {
 public:
  AdamW(nn::Module& model, double lr, double weight_decay = 0.01, double beta1 = 0.9,
        double beta2 = 0.999, double eps = 1e-8);

  // One update from each parameter's .grad() (parameters without a gradient are skipped, as
  // PyTorch skips p.grad is None). The step counter is shared: every parameter has a gradient
  // on every step of a GPT.
  void step();
  void zero_grad() { model_.zero_grad(); }
  // The moments in `dtype`, as the parameters after model.to(dtype) (torch creates them with
  // zeros_like(param)): float32 or bfloat16.
  void to(DType dtype);

  double lr, weight_decay, beta1, beta2, eps;
  int64_t step_count = 0;  // state['step'] after the last step
  // Moments, one per parameter in named_parameters() order (zeros until the first step).
  std::vector<Tensor> exp_avg, exp_avg_sq;

 private:
  nn::Module& model_;
};

// Scales every gradient by max_norm / (total_norm + 1e-6) when that is below 1, as
// clip_grad_norm_(parameters, max_norm) does; returns the total 2-norm before clipping.
double clip_grad_norm(nn::Module& model, double max_norm);

// Appendix D's schedule for step `global_step` (0-based) of `total_steps`: linear from
// initial_lr to peak_lr over warmup_steps, then cosine from peak_lr down to min_lr.
double warmup_cosine_lr(int64_t global_step, int64_t total_steps, int64_t warmup_steps,
                        double initial_lr, double peak_lr, double min_lr);

}  // namespace tg::train
