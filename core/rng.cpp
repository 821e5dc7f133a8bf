// PyTorch-compatible generator: the distributions of TORCH_RNG.md.
#include "core/rng.h"

namespace tg {

std::vector<int64_t> Generator::randperm(int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n < 0 ? 0 : n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(random() % static_cast<uint64_t>(n - i));
    std::swap(perm[i], perm[i + z]);
  }
  return perm;
}

Generator& default_generator() {
  // PyTorch seeds its default generator non-deterministically; a fixed seed keeps runs
  // reproducible even when a program forgets manual_seed.
  static Generator gen(Generator::kDefaultSeed);
  return gen;
}

}  // namespace tg
