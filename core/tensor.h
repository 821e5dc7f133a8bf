// Tensor: a strided view over shared storage, plus the autograd record that made it.
//
// Like torch.Tensor: dtypes float32 (the default), float64, int64 (token ids) and bool (masks);
// views (view, transpose, select, narrow, ...) share storage and differ only in shape, strides and
// offset. Every differentiable op lives in core/ops/*.cpp with its backward next to it; the tape
// that replays them is core/autograd.{h,cpp}.
//
// Not here: devices other than the CPU, complex and half types, sparse layouts, double backward.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/dtype.h"

namespace tg {

class Generator;
struct Node;
struct TensorImpl;

// A nested initializer list, so the chapter's inputs read as in the book:
//   tensor({{0.43, 0.15, 0.89}, {0.55, 0.87, 0.66}})
// Integers only (no decimal point anywhere) give an int64 tensor, as torch.tensor does.
struct Nested {
  Nested(double v) : value(v), is_scalar(true) {}
  Nested(float v) : value(v), is_scalar(true) {}
  Nested(int v) : value(v), is_scalar(true), is_integer(true) {}
  Nested(long v) : value(double(v)), is_scalar(true), is_integer(true) {}
  Nested(long long v) : value(double(v)), is_scalar(true), is_integer(true) {}
  Nested(std::initializer_list<Nested> l) : items(l) {}
  double value = 0;
  bool is_scalar = false;
  bool is_integer = false;
  std::vector<Nested> items;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata ---
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  bool is_contiguous() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // Typed access to the first element of this view; throws if T does not match dtype().
  template <class T>
  T* data() const;
  // The value of a one-element tensor, converted to T (like .item()).
  template <class T = double>
  T item() const;
  // All elements in row-major order (like .tolist() flattened), converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // --- autograd ---
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;               // undefined until a backward reaches this leaf
  void zero_grad() const;            // drops the gradient, as PyTorch's set_to_none=True does
  std::string grad_fn_name() const;  // "" when not on the tape
  const std::shared_ptr<Node>& grad_fn() const;
  // Backpropagate from this tensor. Without `grad` this must hold one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, off the tape

  // --- conversion and copies ---
  Tensor to(DType d) const;   // differentiable between float types
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;

  // --- views (core/ops/view.cpp) ---
  Tensor view(const Shape& shape) const;     // one dim may be -1; strides must allow it
  Tensor reshape(const Shape& shape) const;  // a view when possible, a copy otherwise
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;
  Tensor squeeze() const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor slice(int64_t d, int64_t start, int64_t end) const;  // x[..., start:end] along d
  Tensor select(int64_t d, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor T() const;  // 2-D transpose
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor expand(const Shape& shape) const;

  // --- ops as methods, for the book's x.sum(dim=-1) style (see core/ops.h) ---
  Tensor sum(int64_t d, bool keepdim = false) const;
  Tensor sum() const;
  Tensor mean(int64_t d, bool keepdim = false) const;
  Tensor mean() const;
  std::pair<Tensor, Tensor> max(int64_t d, bool keepdim = false) const;  // values, indices
  Tensor max() const;
  Tensor var(int64_t d, bool unbiased = true, bool keepdim = false) const;
  Tensor argmax(int64_t d, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor softmax(int64_t d) const;
  Tensor matmul(const Tensor& o) const;
  Tensor pow(double e) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // --- in-place, off the tape (optimizers, initialisation); refused on tensors that need grad
  // while grad mode is on, as PyTorch refuses them on leaves ---
  Tensor& fill_(double v);
  Tensor& zero_() { return fill_(0); }
  Tensor& copy_(const Tensor& src);  // src broadcasts to this
  Tensor& add_(const Tensor& o, double alpha = 1);
  Tensor& mul_(double s);

  // PyTorch's repr: tensor([[0.4421, 0.5931], ...], grad_fn=<MmBackward0>)
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- creation (core/tensor.cpp) ---
Tensor empty(const Shape& shape, DType dtype = DType::Float32);
Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
Tensor ones(const Shape& shape, DType dtype = DType::Float32);
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::Float32);  // 0-d
Tensor arange(int64_t end, DType dtype = DType::Int64);
Tensor arange(double start, double end, double step = 1, DType dtype = DType::Float32);
Tensor tensor(const Nested& values);  // dtype inferred as torch.tensor does
Tensor tensor(const Nested& values, DType dtype);
Tensor from_vector(const std::vector<float>& v, const Shape& shape);
Tensor from_vector(const std::vector<double>& v, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& v, const Shape& shape);

// Whether tensors of 32 MiB and more ask Linux for transparent huge pages (core/tensor.cpp):
// TAPEGRAD_HUGE_PAGES=1 is on; unset, empty or 0 off (the default); anything else
// std::invalid_argument.
bool huge_pages_enabled();
bool parse_huge_pages(const char* text);  // the same rule for one value (null: unset)

// Freed tensor buffers of 1 MiB and more are kept for reuse (core/block_cache.cpp), at most
// TAPEGRAD_BLOCK_CACHE_MB of them idle: unset or empty 2048, 0 none, a whole number of MiB up to
// 16777216; anything else std::invalid_argument. block_cache_limit_mb() reads the variable (once);
// block_cache_mb_from applies the rule to one value (null: unset).
size_t block_cache_limit_mb();
size_t block_cache_mb_from(const char* text);
// Gives the idle blocks back to the OS, as torch.cuda.empty_cache() does for device memory.
void empty_cache();

}  // namespace tg
