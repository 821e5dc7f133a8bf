// PyTorch-compatible CPU random generator, bit-exact with PyTorch 1.13.1 (AVX2 x86-64 kernels,
// a build without MKL). The spec is docs/torch_rng.md (from the project root); section numbers
// (§n) refer to it. Every function fills a raw contiguous buffer in storage order, drawing from a
// Generator (the process-wide default one unless one is passed).
//
// Not here: the baseline (non-AVX2, no-FMA) kernels, MKL's bernoulli/dropout path, half and
// bfloat16, tensors of probabilities for bernoulli, 2.x behaviour (randperm's large-n shuffle,
// multinomial k=1 with replacement, log1p exponential), and locking: a Generator is not
// thread-safe (torch takes a mutex; callers here must not share one across threads).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/mt19937.h"

namespace tg {

class Generator {
 public:
  // A fresh torch.Generator() has this seed (§1).
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;
  // Size of get_state()'s blob: sizeof(at::CPUGeneratorImplState) on x86-64.
  static constexpr std::size_t kStateBytes = 5056;

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  // Seeds equal mod 2^32 give the same stream; initial_seed() keeps all 64 bits. Clears the
  // normal caches, as torch does.
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  // W(): the next tempered MT19937 word; the same stream as std::mt19937(seed mod 2^32).
  uint32_t random() {
    // Like at::mt19937: `left_` counts down to the next twist, so a fresh seed twists on its
    // first draw and get_state() can report the exact position.
    if (--left_ == 0) twist();
    return mt19937_temper_word(state_[next_++]);
  }
  uint64_t random64() {  // W64(): the first word is the high half
    const uint64_t hi = random();
    return (hi << 32) | random();
  }
  // The next n words of random(), in order, into out: the same stream and the same position
  // afterwards as n calls, without the per-word branch, so bulk draws vectorize.
  void random_block(uint32_t* out, int64_t n);
  // Skips the next n words: the position n calls of random() reach, without tempering them.
  // Data-parallel training starts rank r's dropout where micro-batch r's starts.
  void discard(uint64_t n);
  // Words drawn since construction (counting on across manual_seed and set_state, so only the
  // difference between two readings means something): how far a forward moved the stream.
  uint64_t words_drawn() const { return twists_ * kN - uint64_t(left_ - 1); }

  // torch.randperm(n): n-1 words, Fisher-Yates from the front with modulo bias (§5).
  std::vector<int64_t> randperm(int64_t n);

  // The generator state as torch.get_rng_state() lays it out (5056 bytes, little-endian
  // at::CPUGeneratorImplState): seed, MT position (left/next), the 624 words, and both normal
  // caches. This is what a checkpoint stores; torch's own blob loads here and vice versa.
  std::vector<uint8_t> get_state() const;
  // Restores a get_state() blob exactly. Throws std::invalid_argument on a wrong size or an
  // inconsistent MT position.
  void set_state(const std::vector<uint8_t>& blob);

  // The scalar Box-Muller cache (§3c): normal_scalar_path() reads and refills it, and it
  // outlives the call. Only that path touches it.
  bool has_next_double_normal() const { return has_next_double_normal_; }
  double take_next_double_normal() {
    has_next_double_normal_ = false;
    return next_double_normal_;
  }
  void set_next_double_normal(double v) {
    next_double_normal_ = v;
    has_next_double_normal_ = true;
  }

 private:
  static constexpr int kN = 624;
  void twist();

  uint64_t seed_ = kDefaultSeed;
  int32_t left_ = 1;     // draws until the next twist (+1); 1 right after seeding
  uint32_t next_ = 0;    // index of the next word in state_
  uint64_t twists_ = 0;  // twist() calls so far, for words_drawn()
  std::array<uint32_t, kN> state_{};
  double next_double_normal_ = 0;
  bool has_next_double_normal_ = false;
  // torch keeps a float cache too; no CPU kernel of 1.13 uses it, but the state blob carries it.
  float next_float_normal_ = 0;
  bool has_next_float_normal_ = false;
};

// The process-wide generator behind torch.manual_seed / torch.rand.
Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

// ---- uniform (§2): rand = uniform(out, n, 0, 1) ----
// float32: one W() per element, fmaf(U24(w), float(to)-float(from), float(from)).
// float64: one W64() per element, fma(U53(r), to-from, from).
// Throws if n < 0, from > to, or a bound is not finite.
void uniform(float* out, int64_t n, double from, double to, Generator& gen = default_generator());
void uniform(double* out, int64_t n, double from, double to, Generator& gen = default_generator());

// ---- normal (§3): randn = normal(out, n, 0, 1) ----
// For a contiguous buffer: n >= 16 takes the blocked path ((a) float32 Cephes log/sincos, (b)
// float64 glibc) and draws n + (n % 16 ? 16 : 0) uniforms; n < 16 takes the scalar path (c).
// Throws if n < 0 or std < 0.
void normal(float* out, int64_t n, double mean, double std, Generator& gen = default_generator());
void normal(double* out, int64_t n, double mean, double std, Generator& gen = default_generator());
// Path (c) for any n: what torch runs on non-contiguous tensors (fill `out` in storage order).
// Uses and refills the generator's Box-Muller cache.
void normal_scalar_path(float* out, int64_t n, double mean, double std,
                        Generator& gen = default_generator());
void normal_scalar_path(double* out, int64_t n, double mean, double std,
                        Generator& gen = default_generator());

// ---- bernoulli and dropout (§4) ----
// x.bernoulli_(p) with a Python-float p: one W64() per element, 1 if U53 < p else 0.
// Throws if n < 0 or p is outside [0, 1].
void bernoulli(float* out, int64_t n, double p, Generator& gen = default_generator());
// F.dropout(x, p, training=True)'s mask, so that out = x * mask elementwise in float32:
// each element is 0 or 1.0f / float(1-p), from bernoulli(1-p). No draws when p == 0 (mask all
// 1, so x*mask == x as torch returns x), p == 1 (mask all 0: torch returns x*0) or n == 0.
// Throws if n < 0 or p is outside [0, 1].
void dropout_mask(float* mask, int64_t n, double p, Generator& gen = default_generator());

// The same decisions as bits, for kernels that keep the mask packed (the fused attention's
// dropout): bit i (word i / 64, from the least significant bit) is set when element i is kept.
// The draws are dropout_mask's, so both leave the generator in the same state. Throws if n < 0 or
// p is outside (0, 1): at 0 and 1 torch draws nothing, and the caller needs no bits.
void dropout_keep_bits(uint64_t* bits, int64_t n, double p, Generator& gen = default_generator());

// ---- exponential (1.13 form) ----
// x.exponential_(lambd): one W64() per element, (-1/lambd) * log(1 - U53), glibc log in double,
// then rounded to the buffer's type. Throws if n < 0 or lambd <= 0.
void exponential(float* out, int64_t n, double lambd = 1.0, Generator& gen = default_generator());
void exponential(double* out, int64_t n, double lambd = 1.0, Generator& gen = default_generator());

// ---- integers (§5) ----
// int64 x.random_() with no bounds: W64() mod 2^63.
void random_(int64_t* out, int64_t n, Generator& gen = default_generator());
// torch.randint(low, high, (n,)) / x.random_(low, high) on int64: v % (high-low) + low, with
// v = W64() if high-low >= 2^32 else W(). Throws if n < 0 or high <= low.
void randint(int64_t* out, int64_t n, int64_t low, int64_t high,
             Generator& gen = default_generator());
// torch.randperm(n) on the default generator. Throws if n < 0.
inline std::vector<int64_t> randperm(int64_t n) { return default_generator().randperm(n); }

// ---- multinomial (§7) ----
// torch.multinomial(probs, k, replacement) for float32 probs of shape (rows, categories),
// row-major; out is (rows, k) int64 indices.
// replacement=false: one W64() per probability (whole input first), key = p / Exp(1) in float,
//   each row's result is argmax (k = 1) or topk(k) of the keys, descending. Equal keys (zero
//   probabilities, when k exceeds the nonzero count) follow torch's topk order, reproduced by
//   running the same libstdc++ algorithms ATen uses.
// replacement=true: per row a normalised float cumulative table, one W64() per sample and a
//   binary search; rows one after another.
// Throws if rows < 0, categories < 1, k < 1, a probability is negative or not finite, a row sums
// to 0, or k > categories without replacement. All checks run before any draw.
void multinomial(int64_t* out, const float* probs, int64_t rows, int64_t categories, int64_t k,
                 bool replacement, Generator& gen = default_generator());

// ---- DataLoader(shuffle=True) epoch order (§6) ----
// One epoch of `for batch in DataLoader(ds, batch_size, shuffle=True)` (map-style dataset,
// num_workers=0, no generator=): two W64() from `global` (the iterator's _base_seed, then
// RandomSampler's seed at the first batch), and randperm(n) on a fresh Generator seeded with the
// second. Batches are consecutive slices of the returned order. Throws if n < 1 (RandomSampler
// rejects an empty dataset).
std::vector<int64_t> random_sampler_epoch_order(Generator& global, int64_t n);
// The second half of it: RandomSampler's seed (one W64 from `global`, mod 2^63) and randperm(n),
// for a loader that has already drawn its _base_seed.
std::vector<int64_t> random_sampler_order(Generator& global, int64_t n);
// The DataLoader(..., generator=g) variant: _base_seed is one W64() from g, the order is
// randperm(n) drawn directly from g, and the sampler then runs one more randperm(n, g) whose
// result torch discards (n-1 more words from g). The global generator is not touched.
std::vector<int64_t> random_sampler_epoch_order_with_generator(Generator& g, int64_t n);

// ---- nn.Linear initialisation bounds (§8) ----
// kaiming_uniform_(a=sqrt(5)) bound in Python's double order: gain = sqrt(2/(1 + a**2)),
// bound = sqrt(3) * (gain / sqrt(in)); the weight is uniform(w, out*in, -bound, bound), row-major
// (out, in). May sit 1-2 ulp below 1/sqrt(in). Returns 0 for in == 0; throws if in < 0.
double linear_init_bound(int64_t in_features);
// The bias then draws uniform(b, out, -bound, bound) with this bound, 1/sqrt(in) (0 if in == 0).
double linear_bias_bound(int64_t in_features);

}  // namespace tg
