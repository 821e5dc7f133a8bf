// The element types and shapes every part of core/ speaks: DType (PyTorch's names) and Shape.
// Kept apart from Tensor so that printing (print.h) can use them without the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

using Shape = std::vector<int64_t>;

// BFloat16 (core/bfloat16.h) is stored natively; ops that have no bfloat16 kernel compute it in
// float32 and round the result, as PyTorch's CPU ops do.
enum class DType { Float32, Float64, Int64, Bool, BFloat16 };

const char* dtype_name(DType d);  // "torch.float32", as PyTorch spells it
size_t dtype_size(DType d);
inline bool is_floating(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::BFloat16;
}
std::string shape_str(const Shape& s);  // "[2, 3]"

// The element count of `shape`, or std::invalid_argument naming `op` and the shape when a
// dimension is negative or the count (or, for an empty shape, a row-major stride) does not fit
// in int64. Every shape a tensor is given passes through here, so numel() never overflows.
int64_t checked_numel(const Shape& shape, const char* op);
// checked_numel(shape, op) * dtype_size(dtype), refused likewise when it does not fit in int64.
int64_t checked_nbytes(const Shape& shape, DType dtype, const char* op);

}  // namespace tg
