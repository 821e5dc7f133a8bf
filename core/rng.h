// PyTorch-compatible CPU random generator (PyTorch 1.13, see ../shared/TORCH_RNG.md).
// The engine is MT19937 seeded like torch.manual_seed; distributions fill buffers in storage order.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace tg {

class Generator {
 public:
  // A fresh torch.Generator() has this seed (TORCH_RNG.md §1).
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  // Seeds equal mod 2^32 give the same stream; initial_seed() keeps all 64 bits.
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    engine_.seed(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
    next_double_normal_.reset();
  }
  uint64_t initial_seed() const { return seed_; }

  uint32_t random() { return static_cast<uint32_t>(engine_()); }  // W()
  uint64_t random64() {                                           // W64(): first word is high
    const uint64_t hi = random();
    return (hi << 32) | random();
  }

  // torch.randperm(n): n-1 words, Fisher-Yates from the front with modulo bias (§5).
  std::vector<int64_t> randperm(int64_t n);

 private:
  struct OptionalDouble {
    bool set = false;
    double value = 0;
    void reset() { set = false; }
  };
  std::mt19937 engine_;
  uint64_t seed_ = kDefaultSeed;
  OptionalDouble next_double_normal_;  // the scalar Box-Muller cache (§3c)
};

// The process-wide generator behind torch.manual_seed / torch.rand.
Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tg
