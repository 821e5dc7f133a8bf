// The data behind a Tensor handle: storage shared by views, and the view's geometry.
// Internal to core/: nn/ and the rest use Tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace tg {

// One 64-byte-aligned buffer (2 MiB-aligned with TAPEGRAD_HUGE_PAGES=1 from 32 MiB). `version`
// counts in-place writes, so that a tensor saved for backward and modified afterwards is detected
// (PyTorch's version counter).
struct Storage {
  explicit Storage(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  size_t align = 64, capacity = 0;  // of the block underneath (core/block_cache.h)
  uint64_t version = 0;
  // A form of these bytes derived for a kernel and kept while they stay as they were (version):
  // the packed panels of a bf16 weight that generation reads one row at a time (ops/matmul.cpp).
  std::shared_ptr<Storage> derived;
  uint64_t derived_version = 0;
  // Autocast's bf16 copy of a float32 parameter (ops/common.cpp: autocast_weight_bf16): wanted
  // once autocast has cast the parameter, then written by AdamW in the pass that updates it
  // (ops/update.cpp) and read by the next casts while neither has changed since (both versions).
  bool wants_bf16_copy = false;
  std::shared_ptr<Storage> bf16_copy;
  uint64_t bf16_copy_of_version = 0, bf16_copy_version = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  DType dtype = DType::Float32;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;

  // autograd
  bool requires_grad = false;
  bool is_view = false;  // made by a view op: in-place on it would have to rewrite its base
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::shared_ptr<TensorImpl> grad;

  char* bytes() const {
    return static_cast<char*>(storage->data) + offset * int64_t(dtype_size(dtype));
  }
};

int64_t numel_of(const Shape& s);  // unchecked: for shapes that passed checked_numel
Shape contiguous_strides(const Shape& s);

// A fresh contiguous tensor (uninitialised) of this shape and dtype. A shape that overflows
// (checked_nbytes) or memory that cannot be had is an exception naming `op` and the shape.
std::shared_ptr<TensorImpl> new_impl(const Shape& shape, DType dtype, const char* op = "tensor");
// Same storage, new geometry; grad fields are left empty.
std::shared_ptr<TensorImpl> alias_impl(const TensorImpl& src, const Shape& shape,
                                       const Shape& strides, int64_t offset);

}  // namespace tg
