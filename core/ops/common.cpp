// Type promotion for the op files (common.h).
#include "core/ops/common.h"

#include "core/ops.h"

namespace tg::detail {

DType promote(DType a, DType b) {
  auto rank = [](DType d) {
    switch (d) {
      case DType::Bool:
        return 0;
      case DType::Int64:
        return 1;
      case DType::BFloat16:  // bf16 + float32 is float32, as in PyTorch
        return 2;
      case DType::Float32:
        return 3;
      case DType::Float64:
        return 4;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

Tensor widen(const Tensor& t) {
  return t.dtype() == DType::BFloat16 ? t.detach().to(DType::Float32) : t;
}

Tensor narrow_bf16(const Tensor& t) { return t.detach().to(DType::BFloat16); }

namespace {
thread_local bool t_autocast = false;
}  // namespace

Tensor autocast_bf16(const Tensor& t) {
  return t_autocast && t.defined() && t.dtype() == DType::Float32 ? t.to(DType::BFloat16) : t;
}

}  // namespace tg::detail

namespace tg {

AutocastGuard::AutocastGuard(bool enabled) : prev_(detail::t_autocast) {
  detail::t_autocast = enabled;
}
AutocastGuard::~AutocastGuard() { detail::t_autocast = prev_; }
bool autocast_enabled() { return detail::t_autocast; }

}  // namespace tg
