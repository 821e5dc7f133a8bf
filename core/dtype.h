// The element types and shapes every part of core/ speaks: DType (PyTorch's names) and Shape.
// Kept apart from Tensor so that printing (print.h) can use them without the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

using Shape = std::vector<int64_t>;

enum class DType { Float32, Float64, Int64, Bool };

const char* dtype_name(DType d);  // "torch.float32", as PyTorch spells it
size_t dtype_size(DType d);
inline bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64; }
std::string shape_str(const Shape& s);  // "[2, 3]"

}  // namespace tg
