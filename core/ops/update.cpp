// In-place parameter updates, off the tape: what an optimizer in train/ needs from the kernels,
// with the checks that make the raw buffers safe to hand over.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/autograd.h"
#include "core/bfloat16.h"
#include "core/impl.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/ops.h"
#include "core/ops/common.h"

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
  Storage& ps = *p.impl()->storage;
  const bool copy =
      ps.wants_bf16_copy && p.impl()->offset == 0 && size_t(p.numel()) * 4 == ps.nbytes;
  if (!copy) {
    adamw_span(p.numel(), p.data<float>(), gc.data<float>(), exp_avg.data<float>(),
               exp_avg_sq.data<float>(), s);
  } else {
    // Autocast reads this parameter as bf16 (common.cpp: autocast_weight_bf16): its copy is
    // rounded in this pass. A copy that a graph still holds is left to it for a new one.
    if (ps.bf16_copy == nullptr || ps.bf16_copy.use_count() > 1)
      ps.bf16_copy = new_impl(p.shape(), DType::BFloat16, "adamw_")->storage;
    kernels::adamw_to_bf16(p.numel(), p.data<float>(), gc.data<float>(), exp_avg.data<float>(),
                           exp_avg_sq.data<float>(), float(s.lr), float(s.beta1), float(s.beta2),
                           float(s.eps), float(s.weight_decay), s.step,
                           static_cast<uint16_t*>(ps.bf16_copy->data));
    ++ps.bf16_copy->version;
  }
  for (const Tensor* t : {&std::as_const(p), &std::as_const(exp_avg), &std::as_const(exp_avg_sq)})
    detail::bump_version(*t);
  if (copy) ps.bf16_copy_of_version = ps.version, ps.bf16_copy_version = ps.bf16_copy->version;
}

void adamw_span(int64_t n, float* p, const float* g, float* exp_avg, float* exp_avg_sq,
                const AdamWStep& s) {
  kernels::adamw(n, p, g, exp_avg, exp_avg_sq, float(s.lr), float(s.beta1), float(s.beta2),
                 float(s.eps), float(s.weight_decay), s.step);
}

// torch/optim/adamw.py's _single_tensor_adamw on bf16 tensors (kernels::adamw_bf16 in the
// vector_kernels.def): the scalars as Python computes them in double, handed to ATen as float32.
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
  const kernels::AdamWBf16 k{float(1 - s.lr * s.weight_decay),
                             float(1 - s.beta1),
                             float(s.beta2),
                             float(1 - s.beta2),
                             float(std::sqrt(bc2)),
                             float(s.eps),
                             float(-(s.lr / bc1))};
  const auto bits = [](const Tensor& t) { return reinterpret_cast<uint16_t*>(t.data<bfloat16>()); };
  kernels::adamw_bf16(p.numel(), bits(p), bits(g), bits(exp_avg), bits(exp_avg_sq), k);
  for (const Tensor* t : {&std::as_const(p), &std::as_const(exp_avg), &std::as_const(exp_avg_sq)})
    detail::bump_version(*t);
}

std::string kernel_path() { return kernels::active_isa(); }

std::string gemm_blocking() {
  const kernels::GemmBlocking b = kernels::gemm_blocking_for(kernels::active_table());
  return std::to_string(b.mc) + "," + std::to_string(b.kc) + "," + std::to_string(b.nc);
}

}  // namespace tg
