// nn::Sequential and nn::ModuleList: torch.nn.Sequential / ModuleList. Children are named "0",
// "1", ... so state_dict keys read "heads.0.W_query.weight", as in PyTorch.
//
// Modules are built before they are appended, so construction (and thus random draw) order is
// the order of the caller's expressions, as in Python's nn.Sequential(A(), B()) (docs/torch_rng.md
// §8).
//
// Not here: slicing, insert/extend/pop, ModuleDict.
#pragma once
#include <memory>
#include <vector>

#include "nn/module.h"

namespace tg::nn {

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  void append(std::shared_ptr<Module> m);
  Module& operator[](size_t i) const { return *items_.at(i); }
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 protected:
  explicit ModuleList(const char* type_name) : Module(type_name) {}
  std::vector<std::shared_ptr<Module>> items_;
};

class Sequential : public ModuleList {
 public:
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  // Each child's forward in turn.
  Tensor forward(const Tensor& x) override;
};

}  // namespace tg::nn
