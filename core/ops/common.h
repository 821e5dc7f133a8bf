// Helpers shared by the op files: the tensor layer's (core/tensor_detail.h: errors naming the op,
// dim wrapping, dtype dispatch, broadcasting, the strided loop, conversion copies) and type
// promotion.
#pragma once
#include "core/tensor_detail.h"

namespace tg::detail {

// PyTorch's promotion for two tensors: float64 > float32 > int64 > bool.
DType promote(DType a, DType b);

// bfloat16 in an op without a bfloat16 kernel: the forward computes in float32 and rounds its
// result once, as PyTorch's CPU kernels compute bf16. widen() is the exact float32 of a bfloat16
// tensor, off the tape (the op records its own backward on the bfloat16 inputs), and any other
// tensor itself; narrow() rounds a forward's float32 result back.
Tensor widen(const Tensor& t);
Tensor narrow_bf16(const Tensor& t);
// Under autocast (ops.h), a float32 operand of a bfloat16 op as bfloat16 (on the tape);
// otherwise t itself.
Tensor autocast_bf16(const Tensor& t);
// Autocast's cast of a float32 weight, detached: for a parameter (a leaf that requires grad, over
// its whole storage), the bf16 copy kept beside it (impl.h: Storage::bf16_copy) while both are as
// they were, and a request for one otherwise; for any other tensor, the cast. The same bits either
// way, as PyTorch's autocast casts a leaf once per region.
Tensor autocast_weight_bf16(const Tensor& w);

}  // namespace tg::detail
