// PyTorch 1.13 CPU distributions, bit-exact (docs/torch_rng.md; §n refers to its sections).
// Rounding matters everywhere: the build passes -ffp-contract=off, so a*b+c rounds twice unless
// written as std::fma/std::fmaf, which appear exactly where torch's AVX2 kernels fuse.
// Not here: see rng.h (baseline kernels, MKL paths, half types, thread safety).
#include "core/rng.h"

// The bulk draws run on three integer kernels (mt19937_twist, mt19937_temper, bernoulli_words),
// vectorized per ISA; kernels/ is the layer below, knowing nothing of the generator.
#include "core/kernels/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tg {

namespace {

// %g-style text for error messages; std::to_string(double) hides small values as 0.000000.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void check_n(const char* fn, int64_t n) {
  if (n < 0) {
    throw std::invalid_argument(std::string(fn) + ": n must be >= 0, got " + std::to_string(n));
  }
}

// U24(w) = (w & 0xFFFFFF) * 2^-24, exact in float.
inline float u24(uint32_t w) { return static_cast<float>(w & 0xFFFFFFu) * 0x1p-24f; }
// U53(r) = (r & (2^53-1)) * 2^-53, exact in double.
inline double u53(uint64_t r) {
  return static_cast<double>(r & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
}

constexpr double kTwoPi = 6.283185307179586;  // 2*pi as a double (§3b, §3c)

}  // namespace

// ---------------------------------------------------------------------------------------------
// Generator: at::mt19937 (MT19937RNGEngine.h) with torch's position bookkeeping (§1)
// ---------------------------------------------------------------------------------------------

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  state_[0] = static_cast<uint32_t>(seed);
  for (int i = 1; i < kN; ++i) {
    const uint32_t prev = state_[i - 1];
    state_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
  }
  left_ = 1;  // the first draw twists the whole block
  next_ = 0;
  has_next_double_normal_ = false;
  has_next_float_normal_ = false;
}

void Generator::twist() {
  kernels::mt19937_twist(state_.data());  // the vector paths vectorize the 624-word update
  left_ = kN;
  next_ = 0;
  ++twists_;
}

// random_block's walk without the tempering.
void Generator::discard(uint64_t n) {
  while (n > 0) {
    if (left_ == 1) {
      twist();
      left_ = kN + 1;
    }
    const uint64_t take = std::min<uint64_t>(n, uint64_t(left_ - 1));
    next_ += static_cast<uint32_t>(take);
    left_ -= static_cast<int32_t>(take);
    n -= take;
  }
}

void Generator::random_block(uint32_t* out, int64_t n) {
  while (n > 0) {
    // random() twists when --left_ reaches 0 and leaves left_ = kN after the first word, so
    // left_ - 1 words remain from next_; right after a twist all kN do (left_ = kN + 1, which
    // the take below brings back into 1..kN).
    if (left_ == 1) {
      twist();
      left_ = kN + 1;
    }
    const int64_t take = std::min<int64_t>(n, left_ - 1);
    kernels::mt19937_temper(take, state_.data() + next_, out);
    next_ += static_cast<uint32_t>(take);
    left_ -= static_cast<int32_t>(take);
    out += take;
    n -= take;
  }
}

std::vector<int64_t> Generator::randperm(int64_t n) {
  check_n("randperm", n);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(random() % static_cast<uint64_t>(n - i));
    std::swap(perm[i], perm[i + z]);
  }
  return perm;
}

// Blob layout (x86-64 at::CPUGeneratorImplState, little-endian, padding zero):
//   0 int64 the_initial_seed | 8 int32 left | 12 int32 seeded | 16 uint64 next
//   24 uint64 state[624] | 5016 double normal_x (0) | 5024 double normal_y (the cached value)
//   5032 double normal_rho (0) | 5040 int32 normal_is_valid | 5048 float next_float_normal
//   5052 bool next_float_normal_valid
namespace {
constexpr size_t kOffLeft = 8, kOffSeeded = 12, kOffNext = 16, kOffState = 24;
constexpr size_t kOffNormalY = 5024, kOffNormalValid = 5040, kOffFloat = 5048,
                 kOffFloatValid = 5052;

void put_le(std::vector<uint8_t>& b, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const std::vector<uint8_t>& b, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b[off + i]) << (8 * i);
  return v;
}
}  // namespace

std::vector<uint8_t> Generator::get_state() const {
  std::vector<uint8_t> b(kStateBytes, 0);
  put_le(b, 0, seed_, 8);
  put_le(b, kOffLeft, static_cast<uint32_t>(left_), 4);
  put_le(b, kOffSeeded, 1, 4);
  put_le(b, kOffNext, next_, 8);
  for (int i = 0; i < kN; ++i) put_le(b, kOffState + 8 * i, state_[i], 8);
  if (has_next_double_normal_) {
    put_le(b, kOffNormalY, std::bit_cast<uint64_t>(next_double_normal_), 8);
    put_le(b, kOffNormalValid, 1, 4);
  }
  if (has_next_float_normal_) {
    put_le(b, kOffFloat, std::bit_cast<uint32_t>(next_float_normal_), 4);
    b[kOffFloatValid] = 1;
  }
  return b;
}

void Generator::set_state(const std::vector<uint8_t>& b) {
  if (b.size() != kStateBytes) {
    throw std::invalid_argument("Generator::set_state: expected a " + std::to_string(kStateBytes) +
                                "-byte state (get_state / torch.get_rng_state), got " +
                                std::to_string(b.size()) + " bytes");
  }
  const auto left = static_cast<int32_t>(get_le(b, kOffLeft, 4));
  const uint64_t next = get_le(b, kOffNext, 8);
  const uint64_t seeded = get_le(b, kOffSeeded, 4);
  // torch checks seeded, 1 <= left <= 624 and next <= 624; left + next <= 625 also keeps every
  // later read inside the 624 words (draws move both by one until the next twist resets them).
  if (seeded != 1 || left < 1 || left > kN || next > static_cast<uint64_t>(kN) ||
      static_cast<uint64_t>(left) + next > static_cast<uint64_t>(kN) + 1) {
    throw std::invalid_argument(
        "Generator::set_state: invalid mt19937 position (seeded=" + std::to_string(seeded) +
        ", left=" + std::to_string(left) + ", next=" + std::to_string(next) + ")");
  }
  std::array<uint32_t, kN> words;
  for (int i = 0; i < kN; ++i) {
    const uint64_t w = get_le(b, kOffState + 8 * i, 8);
    if (w > 0xFFFFFFFFu) {
      throw std::invalid_argument("Generator::set_state: state word " + std::to_string(i) +
                                  " does not fit in 32 bits: " + std::to_string(w));
    }
    words[i] = static_cast<uint32_t>(w);
  }
  seed_ = get_le(b, 0, 8);
  left_ = left;
  next_ = static_cast<uint32_t>(next);
  state_ = words;
  has_next_double_normal_ = get_le(b, kOffNormalValid, 4) != 0;
  next_double_normal_ =
      has_next_double_normal_ ? std::bit_cast<double>(get_le(b, kOffNormalY, 8)) : 0.0;
  has_next_float_normal_ = b[kOffFloatValid] != 0;
  next_float_normal_ = has_next_float_normal_
                           ? std::bit_cast<float>(static_cast<uint32_t>(get_le(b, kOffFloat, 4)))
                           : 0.0f;
}

Generator& default_generator() {
  // PyTorch seeds its default generator non-deterministically; a fixed seed keeps runs
  // reproducible even when a program forgets manual_seed.
  static Generator gen(Generator::kDefaultSeed);
  return gen;
}

// ---------------------------------------------------------------------------------------------
// Uniform (§2)
// ---------------------------------------------------------------------------------------------

namespace {
void check_uniform(int64_t n, double from, double to) {
  check_n("uniform", n);
  if (!std::isfinite(from) || !std::isfinite(to) || from > to) {
    throw std::invalid_argument("uniform: expects finite from <= to, got from=" + num(from) +
                                ", to=" + num(to));
  }
}
}  // namespace

void uniform(float* out, int64_t n, double from, double to, Generator& gen) {
  check_uniform(n, from, to);
  const float lo = static_cast<float>(from);
  const float span = static_cast<float>(to) - lo;  // a float subtraction, as torch does
  for (int64_t i = 0; i < n; ++i) out[i] = std::fmaf(u24(gen.random()), span, lo);
}

void uniform(double* out, int64_t n, double from, double to, Generator& gen) {
  check_uniform(n, from, to);
  const double span = to - from;
  for (int64_t i = 0; i < n; ++i) out[i] = std::fma(u53(gen.random64()), span, from);
}

// ---------------------------------------------------------------------------------------------
// Normal (§3)
// ---------------------------------------------------------------------------------------------

namespace {

void check_normal(const char* fn, int64_t n, double std) {
  check_n(fn, n);
  if (!(std >= 0.0))
    throw std::invalid_argument(std::string(fn) + ": std must be >= 0, got " + num(std));
}

// (c): one double from the cache or from a fresh Box-Muller pair. u1 gives the angle and u2
// the radius here (the blocked paths do the opposite).
double scalar_normal_sample(Generator& gen) {
  if (gen.has_next_double_normal()) return gen.take_next_double_normal();
  const double u1 = u53(gen.random64());
  const double u2 = u53(gen.random64());
  const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
  const double theta = kTwoPi * u1;
  gen.set_next_double_normal(r * std::sin(theta));
  return r * std::cos(theta);
}

// ---- (a) the float32 Cephes routines of ATen's avx_mathfun.h, as GCC compiled them ----
float f32_from_bits(uint32_t b) { return std::bit_cast<float>(b); }

const float kLogP[9] = {
    f32_from_bits(0x3D9021BB), f32_from_bits(0xBDEBD1B8), f32_from_bits(0x3DEF251A),
    f32_from_bits(0xBDFE5D4F), f32_from_bits(0x3E11E9BF), f32_from_bits(0xBE2AAE50),
    f32_from_bits(0x3E4CCEAC), f32_from_bits(0xBE7FFFFC), f32_from_bits(0x3EAAAAAA)};
const float kLogQ1 = f32_from_bits(0xB95E8083), kLogQ2 = f32_from_bits(0x3F318000);
const float kSqrtHalf = f32_from_bits(0x3F3504F3);
const float kFourOverPi = f32_from_bits(0x3FA2F983);
const float kMinusDP1 = f32_from_bits(0xBF490000), kMinusDP2 = f32_from_bits(0xB97DA000),
            kMinusDP3 = f32_from_bits(0xB3222169);
const float kCosC0 = f32_from_bits(0x37CCF5CE), kCosC1 = f32_from_bits(0xBAB6061A),
            kCosC2 = f32_from_bits(0x3D2AAAA5);
const float kSinS0 = f32_from_bits(0xB94CA1F9), kSinS1 = f32_from_bits(0x3C08839E),
            kSinS2 = f32_from_bits(0xBE2AAAA3);
const float kTwoPiF = f32_from_bits(0x40C90FDB);

// log(v) for v > 0: exponent/mantissa split, then a degree-8 polynomial in x = m - 1.
float cephes_logf(float v) {
  v = std::fmax(v, f32_from_bits(0x00800000));  // clamp to FLT_MIN: no denormals
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 127) + 1.0f;
  const float m = f32_from_bits((bits & 0x807FFFFFu) | 0x3F000000u);  // in [0.5, 1)
  // Below sqrt(1/2) the kernel uses 2m - 1 (and one less exponent): m + (m - 1), two roundings.
  const bool small = m < kSqrtHalf;
  float x = m - 1.0f;
  if (small) {
    e = e - 1.0f;
    x = m + x;
  }
  const float z = x * x;
  float y = kLogP[0];
  for (int i = 1; i < 9; ++i) y = std::fmaf(y, x, kLogP[i]);
  y = y * x;
  y = std::fmaf(y, z, e * kLogQ1);
  y = std::fmaf(-z, 0.5f, y);
  x = x + y;
  return std::fmaf(e, kLogQ2, x);
}

// sin and cos of a >= 0 (our angles are 2*pi*u): octant reduction with the three-part pi/4.
void cephes_sincosf(float a, float* s_out, float* c_out) {
  int32_t j = static_cast<int32_t>(a * kFourOverPi);  // truncation
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  float x = std::fmaf(y, kMinusDP1, a);
  x = std::fmaf(y, kMinusDP2, x);
  x = std::fmaf(y, kMinusDP3, x);
  const float z = x * x;

  float c = std::fmaf(kCosC0, z, kCosC1);
  c = std::fmaf(c, z, kCosC2);
  c = c * z;
  c = std::fmaf(c, z, -(z * 0.5f));
  c = c + 1.0f;

  float s = std::fmaf(kSinS0, z, kSinS1);
  s = std::fmaf(s, z, kSinS2);
  s = s * z;
  s = std::fmaf(s, x, x);

  // The kernel blends with masks (sin = sel1 + sel2, cos = (c - sel1) + (s - sel2)); reproduce
  // that arithmetic rather than a plain swap so signed zeros come out the same.
  const bool poly_is_sin = (j & 2) == 0;
  const float sel1 = poly_is_sin ? 0.0f : c;
  const float sel2 = poly_is_sin ? s : 0.0f;
  float sin_v = sel1 + sel2;
  float cos_v = (c - sel1) + (s - sel2);
  if ((j & 4) != 0) sin_v = -sin_v;
  if (((j - 2) & 4) == 0) cos_v = -cos_v;
  *s_out = sin_v;
  *c_out = cos_v;
}

// Transforms d[0..16) (uniforms) into 16 normals: lanes 0-7 give the radius, 8-15 the angle.
void normal_block16(float* d, float mean, float std) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[8 + j];
    const float radius = std::sqrt(cephes_logf(u1) * -2.0f);
    float s, c;
    cephes_sincosf(kTwoPiF * u2, &s, &c);
    d[j] = std::fmaf(radius * c, std, mean);
    d[8 + j] = std::fmaf(radius * s, std, mean);
  }
}

void normal_block16(double* d, double mean, double std) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1.0 - d[j];
    const double u2 = d[8 + j];
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double theta = kTwoPi * u2;
    d[j] = std::fma(radius * std::cos(theta), std, mean);
    d[8 + j] = std::fma(radius * std::sin(theta), std, mean);
  }
}

void fill_uniform01(float* d, int64_t n, Generator& gen) {
  for (int64_t i = 0; i < n; ++i) d[i] = u24(gen.random());
}
void fill_uniform01(double* d, int64_t n, Generator& gen) {
  for (int64_t i = 0; i < n; ++i) d[i] = u53(gen.random64());
}

// Paths (a)/(b), n >= 16: uniforms in place, full blocks of 16, then a tail block that
// redraws the last 16 positions (overwriting outputs of the last full block).
template <typename T>
void normal_blocked(T* out, int64_t n, T mean, T std, Generator& gen) {
  fill_uniform01(out, n, gen);
  for (int64_t k = 0; k + 16 <= n; k += 16) normal_block16(out + k, mean, std);
  if (n % 16 != 0) {
    fill_uniform01(out + (n - 16), 16, gen);
    normal_block16(out + (n - 16), mean, std);
  }
}

}  // namespace

void normal_scalar_path(float* out, int64_t n, double mean, double std, Generator& gen) {
  check_normal("normal_scalar_path", n, std);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(std::fma(scalar_normal_sample(gen), std, mean));
  }
}

void normal_scalar_path(double* out, int64_t n, double mean, double std, Generator& gen) {
  check_normal("normal_scalar_path", n, std);
  for (int64_t i = 0; i < n; ++i) out[i] = std::fma(scalar_normal_sample(gen), std, mean);
}

void normal(float* out, int64_t n, double mean, double std, Generator& gen) {
  check_normal("normal", n, std);
  if (n < 16) return normal_scalar_path(out, n, mean, std, gen);
  normal_blocked(out, n, static_cast<float>(mean), static_cast<float>(std), gen);
}

void normal(double* out, int64_t n, double mean, double std, Generator& gen) {
  check_normal("normal", n, std);
  if (n < 16) return normal_scalar_path(out, n, mean, std, gen);
  normal_blocked(out, n, mean, std, gen);
}

// ---------------------------------------------------------------------------------------------
// Bernoulli and dropout (§4)
// ---------------------------------------------------------------------------------------------

namespace {
void check_probability(const char* fn, int64_t n, double p) {
  check_n(fn, n);
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(std::string(fn) + ": p must be in [0, 1], got " + num(p));
  }
}
}  // namespace

namespace {
// out[i] = (U53(W64()) < p ? 1 : 0) * scale for n elements, drawn in blocks of words.
// U53 = r * 2^-53 is exact, so U53 < p  <=>  r < p * 2^53  <=>  r < ceil(p * 2^53): one integer
// compare per element on the words' 21 + 32 low bits.
void bernoulli_scaled(float* out, int64_t n, double p, float scale, Generator& gen) {
  const uint64_t limit = static_cast<uint64_t>(std::ceil(p * 0x1p53));  // <= 2^53
  const float kept = 1.0f * scale, dropped = 0.0f * scale;  // as a separate multiply would round
  constexpr int64_t kBlock = 2048;                          // 16 KiB of words: stays in L1
  uint32_t w[2 * kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    gen.random_block(w, 2 * m);
    kernels::bernoulli_words(m, w, limit, kept, dropped, out + i0);
  }
}
}  // namespace

void bernoulli(float* out, int64_t n, double p, Generator& gen) {
  check_probability("bernoulli", n, p);
  bernoulli_scaled(out, n, p, 1.0f, gen);
}

void dropout_mask(float* mask, int64_t n, double p, Generator& gen) {
  check_probability("dropout_mask", n, p);
  if (p == 0.0 || p == 1.0) {  // torch returns x or x*0 without drawing
    std::fill(mask, mask + n, p == 0.0 ? 1.0f : 0.0f);
    return;
  }
  const double keep = 1.0 - p;  // in double, as Python computes 1-p
  // bernoulli(keep), then noise.div_(1-p) on a float tensor (the scalar becomes a float first),
  // fused into one pass.
  bernoulli_scaled(mask, n, keep, 1.0f / static_cast<float>(keep), gen);
}

void dropout_keep_bits(uint64_t* bits, int64_t n, double p, Generator& gen) {
  check_probability("dropout_keep_bits", n, p);
  if (p == 0.0 || p == 1.0)
    throw std::invalid_argument("dropout_keep_bits: p must be in (0, 1), got " + num(p));
  std::fill(bits, bits + (n + 63) / 64, uint64_t{0});
  constexpr int64_t kBlock = 2048;  // bernoulli_scaled's block: the same words, in the same order
  float keep[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    bernoulli_scaled(keep, m, 1.0 - p, 1.0f, gen);
    for (int64_t i = 0; i < m; ++i)
      bits[(i0 + i) >> 6] |= uint64_t(keep[i] != 0.0f) << ((i0 + i) & 63);
  }
}

// ---------------------------------------------------------------------------------------------
// Exponential (1.13: -1/lambd * log(1-u), not 2.x's log1p)
// ---------------------------------------------------------------------------------------------

namespace {
void check_exponential(int64_t n, double lambd) {
  check_n("exponential", n);
  if (!(lambd > 0.0)) {
    throw std::invalid_argument("exponential: lambd must be > 0, got " + num(lambd));
  }
}
inline double exponential_sample(Generator& gen, double lambd) {
  return (-1.0 / lambd) * std::log(1.0 - u53(gen.random64()));
}
}  // namespace

void exponential(float* out, int64_t n, double lambd, Generator& gen) {
  check_exponential(n, lambd);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(exponential_sample(gen, lambd));
}

void exponential(double* out, int64_t n, double lambd, Generator& gen) {
  check_exponential(n, lambd);
  for (int64_t i = 0; i < n; ++i) out[i] = exponential_sample(gen, lambd);
}

// ---------------------------------------------------------------------------------------------
// Integers (§5)
// ---------------------------------------------------------------------------------------------

void random_(int64_t* out, int64_t n, Generator& gen) {
  check_n("random_", n);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<int64_t>(gen.random64() & ((uint64_t{1} << 63) - 1));
  }
}

void randint(int64_t* out, int64_t n, int64_t low, int64_t high, Generator& gen) {
  check_n("randint", n);
  if (high <= low) {
    throw std::invalid_argument("randint: expects low < high, got low=" + std::to_string(low) +
                                ", high=" + std::to_string(high));
  }
  // Unsigned arithmetic as in torch: the range may exceed INT64_MAX and the sum wraps.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const bool wide = range >= (uint64_t{1} << 32);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t v = wide ? gen.random64() : gen.random();
    out[i] = static_cast<int64_t>(v % range + static_cast<uint64_t>(low));
  }
}

// ---------------------------------------------------------------------------------------------
// Multinomial (§7)
// ---------------------------------------------------------------------------------------------

namespace {

// torch.argmax over one row: the first maximum, NaN counting as the largest value. (A NaN key
// needs 0/0, i.e. a zero probability with a uniform of exactly 0.)
int64_t argmax_first(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (std::isnan(v[best])) break;
    if (std::isnan(v[i]) || v[i] > v[best]) best = i;
  }
  return best;
}

// torch.topk(v, k, largest=True, sorted=True) on CPU, as ATen's topk_impl_loop does it
// (native/TopKImpl.h): (value, index) pairs in double with the same comparator and the same
// standard algorithms, so equal keys (zero probabilities) come out in torch's order. That order
// is whatever libstdc++'s partial_sort / nth_element + sort produce; with another standard
// library only the order among equal keys could differ.
void topk_like_torch(const float* v, int64_t n, int64_t k, int64_t* out) {
  using Elem = std::pair<double, int64_t>;
  std::vector<Elem> queue(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) queue[j] = {static_cast<double>(v[j]), j};
  auto larger = [](const Elem& x, const Elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k * 64 <= n) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), larger);
  } else {
    std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), larger);
    std::sort(queue.begin(), queue.begin() + (k - 1), larger);
  }
  for (int64_t j = 0; j < k; ++j) out[j] = queue[j].second;
}

}  // namespace

void multinomial(int64_t* out, const float* probs, int64_t rows, int64_t categories, int64_t k,
                 bool replacement, Generator& gen) {
  if (rows < 0 || categories < 1) {
    throw std::invalid_argument(
        "multinomial: expects rows >= 0 and categories >= 1, got rows=" + std::to_string(rows) +
        ", categories=" + std::to_string(categories));
  }
  if (k < 1) throw std::invalid_argument("multinomial: k must be >= 1, got " + std::to_string(k));
  if (!replacement && k > categories) {
    throw std::invalid_argument("multinomial: cannot draw k=" + std::to_string(k) +
                                " samples without replacement from " + std::to_string(categories) +
                                " categories");
  }
  for (int64_t r = 0; r < rows; ++r) {
    bool any_positive = false;
    for (int64_t c = 0; c < categories; ++c) {
      const float p = probs[r * categories + c];
      if (!std::isfinite(p) || p < 0.0f) {
        throw std::invalid_argument("multinomial: probability [" + std::to_string(r) + ", " +
                                    std::to_string(c) + "] must be finite and >= 0, got " + num(p));
      }
      any_positive = any_positive || p > 0.0f;
    }
    if (!any_positive) {
      throw std::invalid_argument("multinomial: row " + std::to_string(r) +
                                  " sums to 0 (invalid distribution)");
    }
  }

  if (!replacement) {
    // Exponential race: q ~ Exp(1) for every element first (float32, like the input), then
    // key = p / q; the k largest keys win
    // (argmax for k = 1, else topk). Zero probabilities get key 0.
    const int64_t total = rows * categories;
    std::vector<float> key(static_cast<size_t>(total));
    exponential(key.data(), total, 1.0, gen);
    for (int64_t i = 0; i < total; ++i) key[i] = probs[i] / key[i];
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = key.data() + r * categories;
      if (k == 1) {
        out[r] = argmax_first(row, categories);
      } else {
        topk_like_torch(row, categories, k, out + r * k);
      }
    }
    return;
  }

  // Cumulative table in float, normalised, last entry forced to 1; the search compares the
  // float entries against a double uniform.
  std::vector<float> cum(static_cast<size_t>(categories));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = probs + r * categories;
    float sum = 0.0f;
    for (int64_t c = 0; c < categories; ++c) {
      sum = sum + row[c];
      cum[c] = sum;
    }
    for (int64_t c = 0; c < categories; ++c) cum[c] = cum[c] / sum;
    cum[categories - 1] = 1.0f;
    for (int64_t s = 0; s < k; ++s) {
      const double u = u53(gen.random64());
      int64_t lo = 0, hi = categories;  // first c with !(cum[c] < u)
      while (hi > lo) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (static_cast<double>(cum[mid]) < u) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      out[r * k + s] = lo;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// DataLoader(shuffle=True) epoch order (§6)
// ---------------------------------------------------------------------------------------------

std::vector<int64_t> random_sampler_epoch_order(Generator& global, int64_t n) {
  if (n < 1) {
    throw std::invalid_argument(
        "random_sampler_epoch_order: n must be >= 1 (RandomSampler rejects an empty dataset), "
        "got " +
        std::to_string(n));
  }
  global.random64();  // _BaseDataLoaderIter._base_seed, drawn at iter()
  return random_sampler_order(global, n);
}

std::vector<int64_t> random_sampler_order(Generator& global, int64_t n) {
  // RandomSampler.__iter__: int64 random_() (W64 mod 2^63) seeds a private torch.Generator.
  const uint64_t seed = global.random64() & ((uint64_t{1} << 63) - 1);
  Generator sampler(seed);
  return sampler.randperm(n);
}

std::vector<int64_t> random_sampler_epoch_order_with_generator(Generator& g, int64_t n) {
  if (n < 1) {
    throw std::invalid_argument("random_sampler_epoch_order_with_generator: n must be >= 1, got " +
                                std::to_string(n));
  }
  g.random64();  // _base_seed
  std::vector<int64_t> order = g.randperm(n);
  // RandomSampler yields randperm(n)[:num_samples % n] after the full passes: an empty slice,
  // but the permutation is still drawn from g.
  g.randperm(n);
  return order;
}

// ---------------------------------------------------------------------------------------------
// nn.Linear bounds (§8)
// ---------------------------------------------------------------------------------------------

double linear_init_bound(int64_t in_features) {
  if (in_features < 0) {
    throw std::invalid_argument("linear_init_bound: in_features must be >= 0, got " +
                                std::to_string(in_features));
  }
  if (in_features == 0) return 0.0;  // torch skips init of a zero-element weight
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + std::pow(a, 2.0)));  // a**2 = 5.000000000000001
  const double std_dev = gain / std::sqrt(static_cast<double>(in_features));
  return std::sqrt(3.0) * std_dev;
}

double linear_bias_bound(int64_t in_features) {
  if (in_features < 0) {
    throw std::invalid_argument("linear_bias_bound: in_features must be >= 0, got " +
                                std::to_string(in_features));
  }
  return in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
}

}  // namespace tg
