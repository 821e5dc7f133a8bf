// bfloat16: float32's sign and 8-bit exponent with 7 mantissa bits (torch.bfloat16), stored as
// the top 16 bits of the float32. Widening is exact; narrowing rounds as PyTorch's c10::BFloat16
// does: to nearest, ties to even, any NaN to the quiet NaN 0x7FC0. A double is narrowed through
// float first, as PyTorch's conversion does (so it may round twice, like PyTorch).
//
// Arithmetic on this type goes through float: `a + b` is the float sum, rounded only when it is
// stored back into a bfloat16, as PyTorch's CPU kernels compute bf16 ops.
#pragma once
#include <bit>
#include <cstdint>

namespace tg {

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  bfloat16(float f) : bits(round_bits(f)) {}  // NOLINT: implicit, as c10::BFloat16(float)
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }

  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
  // Round to nearest even on the 16 bits that are dropped: adding 0x7FFF plus the kept part's
  // lowest bit carries into the kept bits exactly when the dropped part is above half, or is half
  // and the kept part is odd. Infinities and the largest finite values round as IEEE says (to
  // infinity past the last finite bfloat16).
  static constexpr uint16_t round_bits(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
};
static_assert(sizeof(bfloat16) == 2);

}  // namespace tg
