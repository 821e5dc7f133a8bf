// Tensor: storage, metadata, creation, element access, printing and the off-tape in-place ops.
#include "core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "core/autograd.h"
#include "core/block_cache.h"
#include "core/impl.h"
#include "core/ops.h"
#include "core/print.h"
#include "core/tensor_detail.h"
#include "core/threadpool.h"

namespace tg {

using detail::fail;

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    if (i > 0) acc *= std::max<int64_t>(s[i], 1);  // the first dim's extent is no stride
  }
  return st;
}

// --- storage ---
// With TAPEGRAD_HUGE_PAGES=1 (off by default, as PyTorch's THP_MEM_ALLOC_ENABLE=1 is), buffers of
// 32 MiB and more are 2 MiB-aligned and asked of Linux as transparent huge pages (madvise): a
// first touch then faults once per 2 MiB instead of once per 4 KiB. Measured on a Zen 5 VM, both
// ways: filling a fresh 384 MiB buffer took 1311 ms in 4 KiB pages and 56 ms in 2 MiB ones, and
// the bonus notebook's MHAPyTorchClass (fresh 384 MiB score tensors) ran 6x faster; but the
// gpt2-124m training step ran 12-25% slower (each huge page is zeroed whole, past the caches,
// before it is written). Where the kernel refuses, the advice is ignored and nothing else changes.
bool parse_huge_pages(const char* text) {
  if (text == nullptr || *text == '\0' || std::string(text) == "0") return false;
  if (std::string(text) == "1") return true;
  throw std::invalid_argument(std::string("TAPEGRAD_HUGE_PAGES='") + text +
                              "' is not a switch: use 0 (the default) or 1");
}

bool huge_pages_enabled() {
  static const bool on = parse_huge_pages(std::getenv("TAPEGRAD_HUGE_PAGES"));
  return on;
}

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
// glibc's malloc maps a block of 32 MiB or more afresh each time (its largest mmap threshold);
// smaller ones it reuses from its heap, already faulted in, where madvise would only split the
// heap's mapping (gpt2-124m's training step ran 2x slower when every block from 2 MiB had it).
constexpr size_t kHugeFrom = size_t(32) << 20;

size_t storage_alignment(size_t n) {
  return n >= kHugeFrom && huge_pages_enabled() ? kHugePage : 64;
}
}  // namespace

// Through the cache of big blocks (core/block_cache.cpp), with the nothrow form underneath: under
// AddressSanitizer the throwing operator new aborts instead of throwing.
Storage::Storage(size_t n) : nbytes(n), align(storage_alignment(n)) {
  data = detail::block_acquire(std::max<size_t>(n, 64), align, &capacity);
  if (data == nullptr) throw std::bad_alloc();
#ifdef __linux__
  if (align == kHugePage) madvise(data, capacity, MADV_HUGEPAGE);
#endif
}
Storage::~Storage() { detail::block_release(data, capacity, align); }

std::shared_ptr<TensorImpl> new_impl(const Shape& shape, DType dtype, const char* op) {
  const int64_t nbytes = checked_nbytes(shape, dtype, op);
  auto t = std::make_shared<TensorImpl>();
  try {
    t->storage = std::make_shared<Storage>(size_t(nbytes));
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(std::string(op) + ": cannot allocate " + std::to_string(nbytes) +
                             " bytes for shape " + shape_str(shape) + " of " + dtype_name(dtype) +
                             " (out of memory)");
  }
  t->dtype = dtype;
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  return t;
}

std::shared_ptr<TensorImpl> alias_impl(const TensorImpl& src, const Shape& shape,
                                       const Shape& strides, int64_t offset) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = src.storage;
  t->dtype = src.dtype;
  t->shape = shape;
  t->strides = strides;
  t->offset = offset;
  return t;
}

// --- metadata ---
#define TG_IMPL_OR_THROW(op) \
  if (!impl_) throw std::logic_error(std::string(op) + ": the tensor is undefined")

DType Tensor::dtype() const {
  TG_IMPL_OR_THROW("dtype");
  return impl_->dtype;
}
const Shape& Tensor::shape() const {
  TG_IMPL_OR_THROW("shape");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  TG_IMPL_OR_THROW("strides");
  return impl_->strides;
}
int64_t Tensor::offset() const {
  TG_IMPL_OR_THROW("offset");
  return impl_->offset;
}
int64_t Tensor::size(int64_t d) const { return shape()[detail::wrap_dim("size", d, dim())]; }
int64_t Tensor::numel() const { return numel_of(shape()); }

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  if (numel() == 0) return true;  // no element to address, as in PyTorch
  int64_t expect = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;  // a size-1 dim's stride is irrelevant, as in PyTorch
    if (impl_->strides[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

template <class T>
static DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::Float64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::Int64;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DType::BFloat16;
  else
    return DType::Bool;
}

template <class T>
T* Tensor::data() const {
  TG_IMPL_OR_THROW("data");
  if (impl_->dtype != dtype_of<T>())
    fail("data", "the tensor holds ", dtype_name(impl_->dtype), ", not ",
         dtype_name(dtype_of<T>()));
  return reinterpret_cast<T*>(impl_->bytes());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;
template bfloat16* Tensor::data<bfloat16>() const;

template <class T>
T Tensor::item() const {
  TG_IMPL_OR_THROW("item");
  if (numel() != 1)
    fail("item", "a tensor with ", numel(), " elements (shape ", shape_str(shape()),
         ") cannot be converted to a scalar");
  return detail::dispatch_all(impl_->dtype, [&](auto z) -> T {
    using S = decltype(z);
    const S v = *reinterpret_cast<const S*>(impl_->bytes());
    if constexpr (std::is_same_v<S, bfloat16>)
      return static_cast<T>(float(v));
    else
      return static_cast<T>(v);
  });
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

template <class T>
std::vector<T> Tensor::to_vector() const {
  TG_IMPL_OR_THROW("to_vector");
  auto c = detail::materialize(*impl_, dtype_of<T>());
  const T* p = reinterpret_cast<const T*>(c->bytes());
  return std::vector<T>(p, p + numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

// --- autograd accessors ---
bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
Tensor& Tensor::requires_grad_(bool on) {
  TG_IMPL_OR_THROW("requires_grad_");
  if (on && !is_floating(impl_->dtype))
    fail("requires_grad_", "only floating-point tensors can require gradients, got ",
         dtype_name(impl_->dtype));
  if (!on && impl_->grad_fn)
    fail("requires_grad_", "a non-leaf tensor (", impl_->grad_fn->name,
         ") cannot stop requiring grad; use detach()");
  impl_->requires_grad = on;
  return *this;
}
bool Tensor::is_leaf() const { return !impl_ || !impl_->grad_fn; }
Tensor Tensor::grad() const { return impl_ && impl_->grad ? Tensor(impl_->grad) : Tensor(); }
void Tensor::zero_grad() const {
  if (impl_) impl_->grad.reset();
}
std::string Tensor::grad_fn_name() const {
  return impl_ && impl_->grad_fn ? impl_->grad_fn->name : "";
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  TG_IMPL_OR_THROW("grad_fn");
  return impl_->grad_fn;
}
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}
Tensor Tensor::detach() const {
  TG_IMPL_OR_THROW("detach");
  return Tensor(alias_impl(*impl_, impl_->shape, impl_->strides, impl_->offset));
}

// --- printing ---
std::string Tensor::str() const {
  if (!impl_) return "tensor(undefined)";
  PrintInput in;
  in.shape = shape();
  in.dtype = dtype();
  if (is_floating(dtype()))
    in.f = to_vector<double>();
  else
    in.i = to_vector<int64_t>();
  in.grad_fn = grad_fn_name();
  in.requires_grad = requires_grad() && is_leaf();
  return format_tensor(in);
}
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// --- creation ---
namespace {
Tensor filled(const char* op, const Shape& shape, double value, DType dtype) {
  Tensor t(new_impl(shape, dtype, op));
  NoGradGuard ng;
  t.fill_(value);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype) { return Tensor(new_impl(shape, dtype, "empty")); }
Tensor zeros(const Shape& shape, DType dtype) {
  auto t = new_impl(shape, dtype, "zeros");
  // Large buffers (the embedding gradient: 25-150 MB) are cleared by the pool: one thread does
  // not saturate memory bandwidth. Pieces are disjoint, so the split cannot change anything.
  char* p = static_cast<char*>(t->storage->data);
  const size_t n = t->storage->nbytes;
  constexpr size_t kPiece = size_t(1) << 20;
  if (n < 2 * kPiece || num_threads() == 1) {
    std::memset(p, 0, n);
  } else {
    parallel_for(int64_t((n + kPiece - 1) / kPiece), [&](int64_t i) {
      const size_t lo = size_t(i) * kPiece;
      std::memset(p + lo, 0, std::min(kPiece, n - lo));
    });
  }
  return Tensor(t);
}
Tensor full(const Shape& shape, double value, DType dtype) {
  return filled("full", shape, value, dtype);
}
Tensor ones(const Shape& shape, DType dtype) { return filled("ones", shape, 1.0, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(int64_t end, DType dtype) { return arange(0.0, double(end), 1.0, dtype); }
Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end))
    fail("arange", "bad range start=", start, " end=", end, " step=", step);
  // 2^63 as a double: a count at or past it has no int64 (the cast would be undefined).
  const double count = std::ceil((end - start) / step);
  if (!(count < 9223372036854775808.0))
    fail("arange", "range start=", start, " end=", end, " step=", step, " has ", count,
         " elements, more than ", std::numeric_limits<int64_t>::max());
  const int64_t n = count > 0 ? int64_t(count) : 0;
  if (dtype == DType::BFloat16)  // computed in float, as PyTorch's accumulate type for bf16
    return arange(start, end, step, DType::Float32).to(DType::BFloat16);
  Tensor t(new_impl({n}, dtype, "arange"));
  detail::dispatch(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + double(i) * step);
  });
  return t;
}

namespace {
// The shape is read off the first element at each depth; validate() then requires every list at
// a depth to have that length and every leaf to sit at the bottom.
Shape nested_shape(const Nested& n) {
  Shape shape;
  const Nested* p = &n;
  while (!p->is_scalar) {
    shape.push_back(int64_t(p->items.size()));
    if (p->items.empty()) break;
    p = &p->items[0];
  }
  return shape;
}
void validate(const Nested& n, const Shape& shape, size_t depth, bool& any_float) {
  if (n.is_scalar) {
    if (depth != shape.size()) fail("tensor", "nested lists are ragged: a number at depth ", depth);
    if (!n.is_integer) any_float = true;
    return;
  }
  if (depth == shape.size() || shape[depth] != int64_t(n.items.size()))
    fail("tensor", "nested lists are ragged: a list of ", n.items.size(), " items at depth ", depth,
         " where shape ", shape_str(shape), " was expected");
  for (const Nested& c : n.items) validate(c, shape, depth + 1, any_float);
}
void nested_flatten(const Nested& n, std::vector<double>& out) {
  if (n.is_scalar) {
    out.push_back(n.value);
    return;
  }
  for (const Nested& c : n.items) nested_flatten(c, out);
}
}  // namespace

Tensor tensor(const Nested& values) {
  const Shape shape = nested_shape(values);
  bool any_float = false;
  validate(values, shape, 0, any_float);
  // torch.tensor([]) is float32; lists of integers only are int64.
  const bool integer = !any_float && numel_of(shape) > 0;
  return tensor(values, integer ? DType::Int64 : DType::Float32);
}

Tensor tensor(const Nested& values, DType dtype) {
  const Shape shape = nested_shape(values);
  bool any_float = false;
  validate(values, shape, 0, any_float);
  std::vector<double> flat;
  nested_flatten(values, flat);
  Tensor t(new_impl(shape, dtype, "tensor"));
  detail::dispatch_all(dtype, [&](auto z) {
    using T = decltype(z);
    T* d = t.data<T>();
    for (size_t i = 0; i < flat.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>)
        d[i] = flat[i] != 0;
      else if constexpr (std::is_same_v<T, bfloat16>)
        d[i] = bfloat16(static_cast<float>(flat[i]));
      else
        d[i] = static_cast<T>(flat[i]);
    }
  });
  return t;
}

template <class T>
static Tensor from_vec(const std::vector<T>& v, const Shape& shape) {
  if (int64_t(v.size()) != checked_numel(shape, "from_vector"))
    fail("from_vector", v.size(), " values do not fill shape ", shape_str(shape));
  Tensor t(new_impl(shape, dtype_of<T>(), "from_vector"));
  if (!v.empty()) std::memcpy(t.data<T>(), v.data(), v.size() * sizeof(T));
  return t;
}
Tensor from_vector(const std::vector<float>& v, const Shape& s) { return from_vec(v, s); }
Tensor from_vector(const std::vector<double>& v, const Shape& s) { return from_vec(v, s); }
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s) { return from_vec(v, s); }

// --- off-tape in-place ops ---
Tensor& Tensor::fill_(double v) {
  detail::check_inplace("fill_", *this);
  auto src = new_impl({}, DType::Float64);
  *reinterpret_cast<double*>(src->bytes()) = v;
  detail::copy_into(*impl_, *src);
  detail::bump_version(*this);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_inplace("copy_", *this);
  detail::check_defined("copy_", src);
  if (detail::broadcast_shapes("copy_", src.shape(), shape()) != shape())
    fail("copy_", "source of shape ", shape_str(src.shape()), " does not broadcast to ",
         shape_str(shape()));
  // A source that overlaps this storage is copied first, so the write cannot read itself.
  auto s = src.impl()->storage == impl_->storage ? detail::materialize(*src.impl(), src.dtype())
                                                 : src.impl_ptr();
  detail::copy_into(*impl_, *s);
  detail::bump_version(*this);
  return *this;
}

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  detail::check_inplace("add_", *this);
  NoGradGuard ng;
  Tensor sum = add(*this, alpha == 1 ? o : mul(o, alpha));
  if (sum.shape() != shape())
    fail("add_", "operand of shape ", shape_str(o.shape()), " does not broadcast to ",
         shape_str(shape()));
  detail::copy_into(*impl_, *sum.impl());
  detail::bump_version(*this);
  return *this;
}

Tensor& Tensor::mul_(double s) {
  detail::check_inplace("mul_", *this);
  NoGradGuard ng;
  Tensor prod = mul(*this, s);
  detail::copy_into(*impl_, *prod.impl());
  detail::bump_version(*this);
  return *this;
}

// --- method forms of the ops ---
Tensor Tensor::sum(int64_t d, bool keepdim) const { return tg::sum(*this, d, keepdim); }
Tensor Tensor::sum() const { return tg::sum(*this); }
Tensor Tensor::mean(int64_t d, bool keepdim) const { return tg::mean(*this, d, keepdim); }
Tensor Tensor::mean() const { return tg::mean(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t d, bool keepdim) const {
  return tg::max(*this, d, keepdim);
}
Tensor Tensor::max() const { return tg::max(*this); }
Tensor Tensor::var(int64_t d, bool unbiased, bool keepdim) const {
  return tg::var(*this, d, unbiased, keepdim);
}
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return tg::argmax(*this, d, keepdim); }
Tensor Tensor::argmax() const { return tg::argmax(*this); }
Tensor Tensor::softmax(int64_t d) const { return tg::softmax(*this, d); }
Tensor Tensor::matmul(const Tensor& o) const { return tg::matmul(*this, o); }
Tensor Tensor::pow(double e) const { return tg::pow(*this, e); }
Tensor Tensor::exp() const { return tg::exp(*this); }
Tensor Tensor::log() const { return tg::log(*this); }
Tensor Tensor::sqrt() const { return tg::sqrt(*this); }
Tensor Tensor::tanh() const { return tg::tanh(*this); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  return tg::masked_fill(*this, mask, value);
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return tg::masked_fill_(*this, mask, value);
}
Tensor Tensor::tril(int64_t diagonal) const { return tg::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return tg::triu(*this, diagonal); }

}  // namespace tg
