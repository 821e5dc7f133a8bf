// nn::Module: the C++ counterpart of torch.nn.Module, as far as the book's chapters use it.
//
// A module owns its parameters and buffers as ordinary members (Tensor W_query, ...) and
// registers their addresses, so that the registry and the member never disagree, even after
// to(DType) or load_state_dict() replace a tensor. Children are shared_ptr members registered the
// same way. Names follow PyTorch's state_dict: "W_query.weight", "heads.0.mask", in PyTorch's
// order (a module's own parameters, then its own buffers, then each child in registration order).
//
// Python reference: torch/nn/modules/module.py (register_parameter, register_buffer,
// add_module, named_parameters, state_dict, train/eval, zero_grad).
//
// Not here: hooks, non-persistent buffers, strict=False loading, devices, copying modules
// (registered addresses pin a module in place, so Module is neither copyable nor movable).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The book calls every module on one tensor: self.W_query(x), self.dropout(attn_weights).
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_name_; }

  // Dotted names, PyTorch's order. named_parameters() holds parameters only; state_dict() holds
  // parameters and buffers.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  NamedTensors state_dict() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // Copies every tensor of `sd` into the matching parameter or buffer (no grad, shapes must
  // match). Throws std::invalid_argument naming missing, unexpected or mis-shaped keys.
  void load_state_dict(const NamedTensors& sd);

  // sum(p.numel() for p in parameters())
  int64_t num_parameters() const;

  // Training mode reaches every descendant, as Module.train(mode) does.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  // Converts every parameter and floating buffer to `dtype` in place (float32, float64 or
  // bfloat16), names kept; parameters stay leaves that require grad. For float64 gradient checks,
  // and model.to(torch.bfloat16) (generate --precision bf16).
  Module& to(DType dtype);

 protected:
  // A leaf that requires grad, registered as `name`. Returns *slot.
  Tensor& register_parameter(const std::string& name, Tensor* slot, Tensor value);
  // Off the tape; saved in state_dict, converted by to(), never trained.
  Tensor& register_buffer(const std::string& name, Tensor* slot, Tensor value);
  template <class M>
  std::shared_ptr<M>& register_module(const std::string& name, std::shared_ptr<M>* slot,
                                      std::shared_ptr<M> child) {
    *slot = std::move(child);
    add_child(name, slot->get());
    return *slot;
  }
  void add_child(const std::string& name, Module* child);

 private:
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;
  void collect_slots(const std::string& prefix, bool params, bool buffers,
                     std::vector<std::pair<std::string, Tensor*>>& out);

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace tg::nn
