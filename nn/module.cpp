#include "nn/module.h"

#include <map>
#include <stdexcept>

#include "core/autograd.h"

namespace tg::nn {

Tensor Module::forward(const Tensor&) {
  throw std::logic_error(type_name_ +
                         ": has no forward(x) (a container such as ModuleList is "
                         "not callable, as in PyTorch)");
}

Tensor& Module::register_parameter(const std::string& name, Tensor* slot, Tensor value) {
  if (!value.defined() || !is_floating(value.dtype()))
    throw std::invalid_argument(type_name_ + ": parameter '" + name +
                                "' must be a defined floating-point tensor");
  *slot = value.detach();
  slot->requires_grad_(true);
  params_.emplace_back(name, slot);
  return *slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor* slot, Tensor value) {
  *slot = value.detach();
  buffers_.emplace_back(name, slot);
  return *slot;
}

void Module::add_child(const std::string& name, Module* child) {
  if (!child) throw std::invalid_argument(type_name_ + ": child '" + name + "' is null");
  children_.emplace_back(name, child);
}

void Module::collect(const std::string& prefix, bool params, bool buffers,
                     NamedTensors& out) const {
  // PyTorch's _save_to_state_dict order: own parameters, own buffers, then the children.
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, *t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, *t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, buffers, out);
}

void Module::collect_slots(const std::string& prefix, bool params, bool buffers,
                           std::vector<std::pair<std::string, Tensor*>>& out) {
  if (params)
    for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->collect_slots(prefix + n + ".", params, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, true, out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const { return children_; }

void Module::load_state_dict(const NamedTensors& sd) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_slots("", true, true, slots);
  std::map<std::string, Tensor*> by_name(slots.begin(), slots.end());
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : sd) {
    if (!by_name.count(n))
      throw std::invalid_argument(type_name_ + ".load_state_dict: unexpected key '" + n + "'");
    given[n] = &t;
  }
  for (const auto& [n, slot] : slots) {
    auto it = given.find(n);
    if (it == given.end())
      throw std::invalid_argument(type_name_ + ".load_state_dict: missing key '" + n + "'");
    if (it->second->shape() != slot->shape())
      throw std::invalid_argument(type_name_ + ".load_state_dict: '" + n + "' has shape " +
                                  shape_str(it->second->shape()) + ", the module expects " +
                                  shape_str(slot->shape()));
  }
  NoGradGuard no_grad;  // copying into leaves that require grad, as torch does under no_grad
  for (const auto& [n, slot] : slots) slot->copy_(*given[n]);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
  return *this;
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

Module& Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw std::invalid_argument(type_name_ + ".to: expected a floating-point dtype, got " +
                                dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [n, t] : params_) {
    *t = t->to(dtype).detach();
    t->requires_grad_(true);
  }
  // Buffers keep non-float dtypes (torch's Module.to converts floating buffers only).
  for (auto& [n, t] : buffers_)
    if (is_floating(t->dtype())) *t = t->to(dtype).detach();
  for (auto& [n, c] : children_) c->to(dtype);
  return *this;
}

}  // namespace tg::nn
