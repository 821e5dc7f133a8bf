// A golden case of an nn::Module (tests/golden/gen_ch03.py's `case`) checked against the C++
// module that `make` builds for the case's name after manual_seed(seed): its state_dict (same
// keys in PyTorch's order, same numbers bit for bit), its output, and the gradients of the input
// and of every parameter for loss = sum(output * loss_weights).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/module.h"
#include "tests/golden_cases.h"

namespace tg::testing {

using ModuleFactory = std::function<std::unique_ptr<nn::Module>(const std::string& case_name)>;

inline void check_module_goldens(const std::vector<GoldenCase>& cases, const ModuleFactory& make) {
  for (const GoldenCase& c : cases) {
    CAPTURE(c.name);
    manual_seed(c.seed);
    auto m = make(c.name);
    REQUIRE_MESSAGE(m, "no C++ constructor for golden case " << c.name);

    // The same keys in PyTorch's state_dict order, and the same numbers bit for bit.
    std::vector<std::string> golden_keys;
    for (const auto& [k, t] : c.tensors)
      if (k.rfind("init.", 0) == 0) golden_keys.push_back(k.substr(5));
    std::vector<std::string> our_keys;
    for (const auto& [k, t] : m->state_dict()) {
      our_keys.push_back(k);
      check_tensor(c.name + " init." + k, t, c.at("init." + k), 0, 0);
    }
    CHECK(our_keys == golden_keys);

    Tensor x = c.at("input").clone();
    x.requires_grad_(true);
    const Tensor y = (*m)(x);  // dropout cases draw their masks here, after construction
    check_tensor(c.name + " output", y, c.at("output"), 1e-6, 1e-5);
    (y * c.at("loss_weights")).sum().backward();
    check_tensor(c.name + " grad.input", x.grad(), c.at("grad.input"), 1e-6, 1e-5);
    for (const auto& [k, p] : m->named_parameters())
      check_tensor(c.name + " grad." + k, p.grad(), c.at("grad." + k), 1e-6, 1e-5);
  }
}

}  // namespace tg::testing
