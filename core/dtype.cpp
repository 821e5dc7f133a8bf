// DType names and sizes, and shapes as text (see dtype.h).
#include "core/dtype.h"

namespace tg {

// Indexed by DType: Float32, Float64, Int64, Bool.
constexpr const char* kNames[] = {"torch.float32", "torch.float64", "torch.int64", "torch.bool"};
constexpr size_t kSizes[] = {4, 8, 8, 1};

const char* dtype_name(DType d) { return kNames[static_cast<int>(d)]; }
size_t dtype_size(DType d) { return kSizes[static_cast<int>(d)]; }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace tg
