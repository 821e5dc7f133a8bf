// MT19937's tempering of one state word (std::mt19937's output function): the one definition that
// Generator::random() (rng.h) and the bulk temper kernels (core/kernels) share.
#pragma once
#include <cstdint>

namespace tg {

constexpr uint32_t mt19937_temper_word(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9D2C5680u;
  y ^= (y << 15) & 0xEFC60000u;
  return y ^ (y >> 18);
}

}  // namespace tg
