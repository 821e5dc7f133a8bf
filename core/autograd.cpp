// The tape: recording nodes, and replaying them in reverse execution order.
#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>

#include "core/impl.h"
#include "core/tensor_detail.h"
#include "core/threadpool.h"

namespace tg {

namespace {
thread_local bool g_grad_enabled = true;
thread_local LeafGradHook g_leaf_grad_hook;
std::atomic<uint64_t> g_next_seq{0};
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
void set_leaf_grad_hook(LeafGradHook hook) { g_leaf_grad_hook = std::move(hook); }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

const Tensor& Node::saved_tensor(size_t i) const {
  if (released)
    throw std::runtime_error(
        name +
        ": trying to backward through the graph a second time (its saved tensors were "
        "freed by the first backward); pass retain_graph=true to the first backward");
  const SavedTensor& s = saved.at(i);
  if (s.value.defined() && s.value.impl()->storage->version != s.version)
    throw std::runtime_error(name + ": a tensor of shape " + shape_str(s.value.shape()) +
                             " needed for gradient computation was modified by an in-place "
                             "operation (version " +
                             std::to_string(s.value.impl()->storage->version) + ", saved at " +
                             std::to_string(s.version) + ")");
  return s.value;
}

void Node::release() {
  saved.clear();
  saved.shrink_to_fit();
  backward = nullptr;
  released = true;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> record(const char* name, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& save, Node::BackwardFn backward,
                             std::initializer_list<Tensor*> outputs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->seq = g_next_seq.fetch_add(1);
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined() && in.requires_grad()) {
      if (in.impl()->grad_fn)
        e.fn = in.impl()->grad_fn;
      else
        e.leaf = in.impl_ptr();
      e.shape = in.shape();
      e.dtype = in.dtype();
    }
    node->next.push_back(std::move(e));
  }
  node->saved.reserve(save.size());
  for (const Tensor& s : save)
    node->saved.push_back(
        {s.defined() ? s.detach() : Tensor(), s.defined() ? s.impl()->storage->version : 0});
  node->backward = std::move(backward);
  for (Tensor* out : outputs) {
    out->impl()->grad_fn = node;
    out->impl()->requires_grad = true;
  }
  return node;
}

namespace {

// True when nothing but `t` can see its buffer: then it may be overwritten in place.
bool sole_owner(const Tensor& t) {
  const std::shared_ptr<TensorImpl>& i = t.impl_ptr();
  return i.use_count() == 1 && i->storage.use_count() == 1 && !i->grad_fn;
}

// Adds g into a leaf's .grad: the first gradient is copied (it may alias a tensor the caller
// still uses) unless nothing else holds it, later ones accumulate in place.
void accumulate(TensorImpl& leaf, const Tensor& g) {
  if (g.shape() != leaf.shape)
    throw std::logic_error("backward: gradient of shape " + shape_str(g.shape()) +
                           " for a leaf of shape " + shape_str(leaf.shape));
  if (!leaf.grad) {
    // A fresh gradient that nothing else references (a backward's own output, the usual case)
    // is adopted as is: copying it would cost a full pass over e.g. the embedding's gradient.
    const std::shared_ptr<TensorImpl>& gi = g.impl_ptr();
    const bool sole = sole_owner(g) && g.dtype() == leaf.dtype && g.is_contiguous() &&
                      gi->offset == 0 &&
                      gi->storage->nbytes == size_t(g.numel()) * dtype_size(g.dtype());
    leaf.grad = sole ? gi : detail::materialize(*g.impl(), leaf.dtype);
  } else {
    Tensor acc(leaf.grad);
    acc.add_(g.dtype() == leaf.dtype ? g : g.to(leaf.dtype));
  }
  if (g_leaf_grad_hook) g_leaf_grad_hook(leaf);
}

// out[i] = a[i] + b[i] over n floats (out may alias a or b), split over the pool for large n.
// One IEEE addition per element, so the bits are the add kernel's whatever the split.
void add_floats(int64_t n, const float* a, const float* b, float* out) {
  const int64_t parts = std::min<int64_t>(num_threads(), n >> 15);  // >= 32K floats a piece
  auto piece = [&](int64_t p) {
    const int64_t lo = parts <= 1 ? 0 : n * p / parts / 64 * 64;
    const int64_t hi = parts <= 1 || p == parts - 1 ? n : n * (p + 1) / parts / 64 * 64;
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  };
  if (parts <= 1)
    piece(0);
  else
    parallel_for(parts, piece);
}

// acc += g for two gradients reaching the same node (residual branches). Adds into whichever
// operand nobody else holds, saving a fresh buffer and its first-touch; otherwise a new sum.
// IEEE addition commutes, so the operand order cannot change a bit.
void add_gradient(Tensor& acc, Tensor g) {
  if (acc.dtype() == DType::Float32 && g.dtype() == DType::Float32 && acc.shape() == g.shape() &&
      acc.is_contiguous() && g.is_contiguous()) {
    Tensor* dst = sole_owner(acc) ? &acc : sole_owner(g) ? &g : nullptr;
    if (dst) {
      float* d = dst->data<float>();
      const float* other = (dst == &acc ? g : acc).data<float>();
      add_floats(acc.numel(), d, other, d);
      if (dst != &acc) acc = std::move(g);
      return;
    }
    Tensor sum = empty(acc.shape());  // both held elsewhere (an add passes one g to both inputs)
    add_floats(acc.numel(), acc.data<float>(), g.data<float>(), sum.data<float>());
    acc = std::move(sum);
    return;
  }
  Tensor sum = detail::wrap(detail::materialize(*acc.impl(), acc.dtype()));  // float64, views
  sum.add_(g);
  acc = std::move(sum);
}

struct BySeq {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->seq < b->seq;  // max-heap: latest op first
  }
};

}  // namespace

namespace {

// backward(grad)'s own checks; returns the gradient to start from, in the root's dtype.
Tensor root_gradient(const Tensor& root, const Tensor& grad) {
  detail::check_defined("backward", root);
  if (!root.requires_grad())
    throw std::logic_error("backward: the tensor (shape " + shape_str(root.shape()) +
                           ") does not require grad and has no grad_fn");
  if (!grad.defined()) {
    if (root.numel() != 1)
      throw std::logic_error(
          "backward: grad can be implicitly created only for a tensor with one "
          "element; got shape " +
          shape_str(root.shape()) + ", pass a gradient of that shape");
    return ones_like(root);
  }
  if (grad.shape() != root.shape())
    throw std::invalid_argument("backward: gradient of shape " + shape_str(grad.shape()) +
                                " for a tensor of shape " + shape_str(root.shape()));
  if (!is_floating(grad.dtype()))
    throw std::invalid_argument(std::string("backward: the gradient must be floating point, got ") +
                                dtype_name(grad.dtype()));
  // As PyTorch: the gradient takes the root's dtype, so every backward sees its own dtype.
  return grad.dtype() != root.dtype() ? grad.to(root.dtype()) : grad;
}

using ReadyQueue =
    std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, BySeq>;

// Hands a node's input gradients on: a leaf accumulates its own, a node sums what its consumers
// send and becomes ready with the first.
void pass_on(const Node& node, std::vector<Tensor>& grads,
             std::unordered_map<Node*, Tensor>& pending, ReadyQueue& ready) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Edge& e = node.next[i];
    if (!e.active() || !grads[i].defined()) continue;
    if (grads[i].shape() != e.shape)
      throw std::logic_error(node.name + ": backward returned a gradient of shape " +
                             shape_str(grads[i].shape()) + " for input " + std::to_string(i) +
                             " of shape " + shape_str(e.shape));
    if (grads[i].dtype() != e.dtype) grads[i] = grads[i].to(e.dtype);
    if (e.leaf) {
      accumulate(*e.leaf, grads[i]);
    } else if (auto p = pending.find(e.fn.get()); p != pending.end()) {
      add_gradient(p->second, std::move(grads[i]));
    } else {
      pending.emplace(e.fn.get(), std::move(grads[i]));
      ready.push(e.fn);
    }
  }
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  const Tensor g = root_gradient(root, grad);
  NoGradGuard no_grad;
  if (root.is_leaf()) {
    accumulate(*root.impl(), g);
    return;
  }
  // Latest node first: each runs once, after every consumer of its output has added its share.
  std::unordered_map<Node*, Tensor> pending;
  ReadyQueue ready;
  pending[root.grad_fn().get()] = g;
  ready.push(root.grad_fn());
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    auto it = pending.find(node.get());
    Tensor gout = std::move(it->second);
    pending.erase(it);
    if (node->released) node->saved_tensor(0);  // throws the "second time" error
    node->last_use = !retain_graph;
    std::vector<Tensor> grads = node->backward(*node, gout);
    if (grads.size() != node->next.size())
      throw std::logic_error(node->name + ": backward returned " + std::to_string(grads.size()) +
                             " gradients for " + std::to_string(node->next.size()) + " inputs");
    // Drop what the node no longer needs before handing its gradients on: a gradient written into
    // gout's or a saved tensor's buffer is then held by nobody else, and a leaf adopts it as is.
    gout = Tensor();
    if (!retain_graph) node->release();
    pass_on(*node, grads, pending, ready);
  }
}

bool gradient_reusable(const Tensor& g) {
  return g.defined() && g.dtype() == DType::Float32 && g.is_contiguous() && sole_owner(g);
}

Tensor gradient_buffer(const Tensor& g, DType dtype) {
  if (gradient_reusable(g) && g.dtype() == dtype) return g;
  return empty(g.shape(), dtype);
}

Tensor reusable_saved(const Node& node, size_t i) {
  if (!node.last_use) return Tensor();
  const Tensor& t = node.saved_tensor(i);  // the version check
  if (!t.defined() || !t.is_contiguous() || !sole_owner(t)) return Tensor();
  return t;
}

}  // namespace tg
