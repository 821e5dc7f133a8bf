// Type promotion for the op files (common.h).
#include "core/ops/common.h"

#include "core/impl.h"
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

Tensor autocast_weight_bf16(const Tensor& w) {
  const TensorImpl& i = *w.impl();
  Storage& s = *i.storage;
  const bool param = w.is_leaf() && w.requires_grad() && w.dtype() == DType::Float32 &&
                     w.is_contiguous() && i.offset == 0 &&
                     size_t(w.numel()) * sizeof(float) == s.nbytes;
  if (!param) return w.detach().to(DType::BFloat16);
  s.wants_bf16_copy = true;  // from now on AdamW writes one in its pass (ops/update.cpp)
  if (s.bf16_copy == nullptr || s.bf16_copy_of_version != s.version ||
      s.bf16_copy->version != s.bf16_copy_version)
    return w.detach().to(DType::BFloat16);
  auto t = std::make_shared<TensorImpl>();
  t->storage = s.bf16_copy;
  t->dtype = DType::BFloat16;
  t->shape = i.shape;
  t->strides = contiguous_strides(i.shape);
  return wrap(std::move(t));
}

}  // namespace tg::detail

namespace tg {

AutocastGuard::AutocastGuard(bool enabled) : prev_(detail::t_autocast) {
  detail::t_autocast = enabled;
}
AutocastGuard::~AutocastGuard() { detail::t_autocast = prev_; }
bool autocast_enabled() { return detail::t_autocast; }

}  // namespace tg
