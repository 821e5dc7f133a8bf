// The autograd tape.
//
// Every differentiable op that runs while grad mode is on appends a Node: its name (PyTorch's
// grad_fn name, e.g. "MmBackward0"), a sequence number in execution order, edges to the nodes (or
// leaf tensors) its inputs came from, the tensors its backward reads, and the backward itself.
// backward() replays the part of the tape reachable from the output in reverse execution order,
// so each node runs once, after every consumer of its output has added its share of the gradient.
//
// Not here: double backward (backward runs with grad mode off), per-tensor hooks, retain_grad on
// non-leaves.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg {

// Called after a backward on this thread added a gradient into a leaf's .grad, with the leaf (as
// PyTorch's post-accumulate-grad hooks): data-parallel training starts sending a parameter's
// gradient from here while backward goes on. One per thread; an empty function removes it.
using LeafGradHook = std::function<void(const TensorImpl& leaf)>;
void set_leaf_grad_hook(LeafGradHook hook);

// Grad mode is per thread, as in PyTorch. NoGradGuard is torch.no_grad().
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Where an input's gradient goes: the node that produced it, or the leaf that accumulates it.
struct Edge {
  std::shared_ptr<Node> fn;
  std::shared_ptr<TensorImpl> leaf;
  Shape shape;  // the input's shape and dtype: its gradient must match them
  DType dtype = DType::Float32;
  bool active() const { return fn || leaf; }
};

// A tensor kept for backward: a detached alias (so that saving an op's own output makes no cycle)
// plus the storage version at the time, checked when backward reads it.
struct SavedTensor {
  Tensor value;
  uint64_t version = 0;
};

struct Node {
  // Returns one gradient per input (an undefined Tensor where the input needs none).
  using BackwardFn = std::function<std::vector<Tensor>(Node& self, const Tensor& grad_output)>;

  std::string name;
  uint64_t seq = 0;
  std::vector<Edge> next;  // one per input, in the op's argument order
  std::vector<SavedTensor> saved;
  BackwardFn backward;
  bool released = false;
  bool last_use = false;  // set by the engine: this backward runs without retain_graph

  // Does input i need a gradient? Lets a backward skip work nobody will read.
  bool needs(size_t i) const { return i < next.size() && next[i].active(); }
  // The i-th saved tensor; throws if it was modified in place or released by an earlier backward.
  const Tensor& saved_tensor(size_t i) const;
  void release();  // drop saved tensors and the backward closure
};

// True when grad mode is on and some input requires grad: the op must record a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// What an op saves when its backward reads `t` only for the gradient of `input`: t when input
// will get a gradient (it requires grad), else nothing (flashlight's withoutData). A product with
// a dropout mask then keeps the mask, not a second handle on the activations.
inline Tensor save_for(const Tensor& input, const Tensor& t) {
  return input.defined() && input.requires_grad() ? t : Tensor();
}

// Appends a node for `inputs` (in argument order) and makes it the grad_fn of `outputs`.
// Call only when any_requires_grad() is true. Saved tensors are given as `save`.
std::shared_ptr<Node> record(const char* name, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& save, Node::BackwardFn backward,
                             std::initializer_list<Tensor*> outputs);

// The engine behind Tensor::backward.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// True when a backward may write its result into `grad_output`'s own buffer: a contiguous
// float32 tensor that nothing else holds (no other handle, view or saved tensor), as the engine
// passes a gradient that only this node receives. Saves a fresh buffer per elementwise backward.
bool gradient_reusable(const Tensor& grad_output);

// Where a backward writes a gradient of g's shape and `dtype`: g's own buffer when
// gradient_reusable(g) and the dtypes agree (the kernel then reads and writes the same buffer),
// else a fresh one. Call it before taking other handles to g (they would make g look shared).
Tensor gradient_buffer(const Tensor& grad_output, DType dtype);

// The i-th saved tensor if the backward may overwrite its buffer: the node's last backward (no
// retain_graph) and a contiguous tensor whose storage nothing else holds (e.g. the GPT's logits,
// which only cross_entropy keeps once the model's output goes out of scope). Else undefined.
Tensor reusable_saved(const Node& node, size_t i);

}  // namespace tg
