// DType names and sizes, and shapes as text (see dtype.h).
#include "core/dtype.h"

namespace tg {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::Float32:
      return "torch.float32";
    case DType::Float64:
      return "torch.float64";
    case DType::Int64:
      return "torch.int64";
    case DType::Bool:
      return "torch.bool";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 1;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace tg
