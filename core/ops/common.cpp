// Type promotion for the op files (common.h).
#include "core/ops/common.h"

namespace tg::detail {

DType promote(DType a, DType b) {
  auto rank = [](DType d) {
    switch (d) {
      case DType::Bool:
        return 0;
      case DType::Int64:
        return 1;
      case DType::Float32:
        return 2;
      case DType::Float64:
        return 3;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace tg::detail
