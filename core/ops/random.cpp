// Tensor-level random numbers: torch.rand / randn / *_like, the in-place uniform_ / normal_ that
// nn initialisation uses, and F.dropout. The draws themselves are core/rng.{h,cpp}'s raw-buffer
// functions (bit-exact with PyTorch 1.13, docs/torch_rng.md); this file only allocates, picks the
// generator and handles the cases where PyTorch makes no draw at all.
//
// Not here: non-contiguous in-place fills (torch would take the scalar normal path there; every
// caller here fills a fresh contiguous tensor), integer dtypes (see rng.h's randint/randperm).
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/rng.h"

namespace tg {

namespace {

Generator& pick(Generator* gen) { return gen ? *gen : default_generator(); }

void check_fillable(const char* op, const Tensor& t) {
  detail::check_defined(op, t);
  detail::check_floating(op, t);
  if (!t.is_contiguous())
    detail::fail(op, "expected a contiguous tensor, got shape ", shape_str(t.shape()),
                 " with strides ", shape_str(t.strides()));
  // nn.init fills parameters under no_grad; doing it with grad mode on would silently bypass
  // the tape, as PyTorch's "a leaf Variable that requires grad" error guards against.
  if (t.requires_grad() && grad_enabled())
    detail::fail(op,
                 "refused on a tensor that requires grad while grad mode is on (use "
                 "NoGradGuard, as torch.nn.init does)");
}

}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* gen) {
  check_fillable("uniform_", t);
  if (t.dtype() == DType::Float32)
    uniform(t.data<float>(), t.numel(), from, to, pick(gen));
  else
    uniform(t.data<double>(), t.numel(), from, to, pick(gen));
  detail::bump_version(t);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_fillable("normal_", t);
  if (t.dtype() == DType::Float32)
    normal(t.data<float>(), t.numel(), mean, std, pick(gen));
  else
    normal(t.data<double>(), t.numel(), mean, std, pick(gen));
  detail::bump_version(t);
  return t;
}

Tensor rand(const Shape& shape, Generator* gen, DType dtype) {
  if (!is_floating(dtype))
    detail::fail("rand", "expected a floating-point dtype, got ", dtype_name(dtype));
  Tensor t = detail::empty_for("rand", shape, dtype);
  return uniform_(t, 0, 1, gen);
}

Tensor randn(const Shape& shape, Generator* gen, DType dtype) {
  if (!is_floating(dtype))
    detail::fail("randn", "expected a floating-point dtype, got ", dtype_name(dtype));
  Tensor t = detail::empty_for("randn", shape, dtype);
  return normal_(t, 0, 1, gen);
}

Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.shape(), gen, t.dtype()); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.shape(), gen, t.dtype()); }

// F.dropout(a, p, training): the cases below make no draws, exactly as torch's CPU path
// (docs/torch_rng.md §4): eval mode, p == 0 and empty inputs return the input itself; p == 1
// returns a * 0 (so NaN stays NaN and the result is still on the tape).
Tensor dropout(const Tensor& a, double p, bool training, Generator* gen) {
  detail::check_defined("dropout", a);
  if (!(p >= 0 && p <= 1))
    detail::fail("dropout", "probability has to be between 0 and 1, but got ", std::to_string(p));
  detail::check_floating("dropout", a);
  if (!training || p == 0 || a.numel() == 0) return a;
  if (p == 1) return a * 0.0;
  // bfloat16: float32's mask and draws, the product rounded once. (Whether torch's bf16 dropout
  // draws the same words is not checked here yet.)
  if (a.dtype() == DType::BFloat16)
    return dropout(a.to(DType::Float32), p, training, gen).to(DType::BFloat16);
  Tensor mask = empty(a.shape(), a.dtype());
  if (a.dtype() == DType::Float32) {
    dropout_mask(mask.data<float>(), a.numel(), p, pick(gen));
  } else {
    // torch draws bernoulli_(1-p) in the input's dtype (the same W64 per element for float64)
    // and divides by 1-p in that dtype.
    Tensor keep = empty(a.shape(), DType::Float32);
    bernoulli(keep.data<float>(), a.numel(), 1 - p, pick(gen));
    const float* k = keep.data<float>();
    double* m = mask.data<double>();
    const double scale = 1.0 / (1 - p);
    for (int64_t i = 0; i < a.numel(); ++i) m[i] = k[i] != 0 ? scale : 0.0;
  }
  return dropout_with_mask(a, mask);
}

}  // namespace tg
