// Inverted dropout, composed as PyTorch's F.dropout is: out = x * mask, where the mask holds 0 or
// 1/(1-p). Its gradient is the product rule's (MulBackward0), so it needs no backward of its own;
// the mask rides on the node, so finite-difference checks see the same mask every time.
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

Tensor dropout_with_mask(const Tensor& a, const Tensor& mask) {
  detail::check_floating("dropout", a);
  detail::check_defined("dropout", mask);
  if (detail::broadcast_shapes("dropout", a.shape(), mask.shape()) != a.shape())
    detail::fail("dropout", "mask of shape ", shape_str(mask.shape()),
                 " does not broadcast to the input's shape ", shape_str(a.shape()));
  return mul(a, mask.detach().to(a.dtype()));
}

}  // namespace tg
