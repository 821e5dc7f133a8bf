#include "nn/containers.h"

#include <string>

namespace tg::nn {

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) : Module("ModuleList") {
  for (auto& m : modules) append(std::move(m));
}

void ModuleList::append(std::shared_ptr<Module> m) {
  items_.push_back(std::move(m));
  add_child(std::to_string(items_.size() - 1), items_.back().get());
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : ModuleList("Sequential") {
  for (auto& m : modules) append(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = m->forward(h);
  return h;
}

}  // namespace tg::nn
