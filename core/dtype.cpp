// DType names and sizes, shapes as text, and the one overflow check on shapes (see dtype.h).
#include "core/dtype.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace tg {

// Indexed by DType: Float32, Float64, Int64, Bool, BFloat16.
constexpr const char* kNames[] = {"torch.float32", "torch.float64", "torch.int64", "torch.bool",
                                  "torch.bfloat16"};
constexpr size_t kSizes[] = {4, 8, 8, 1, 2};

const char* dtype_name(DType d) { return kNames[static_cast<int>(d)]; }
size_t dtype_size(DType d) { return kSizes[static_cast<int>(d)]; }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The exact product of non-negative factors in decimal, for the messages about products that
// overflow: base-10^9 limbs, least significant first, multiplied schoolbook-style.
std::string exact_product(const std::vector<uint64_t>& factors) {
  constexpr uint64_t kBase = 1000000000;
  std::vector<uint64_t> acc = {1};
  for (uint64_t f : factors) {
    std::vector<uint64_t> fl;
    for (; f > 0; f /= kBase) fl.push_back(f % kBase);
    std::vector<uint64_t> next(acc.size() + fl.size() + 1, 0);
    for (size_t i = 0; i < acc.size(); ++i)
      for (size_t j = 0; j < fl.size(); ++j) {
        uint64_t carry = acc[i] * fl[j];  // < 10^18, and next[] limbs stay below 10^9
        for (size_t k = i + j; carry > 0; ++k) {
          carry += next[k];
          next[k] = carry % kBase;
          carry /= kBase;
        }
      }
    while (next.size() > 1 && next.back() == 0) next.pop_back();
    acc = next;
  }
  std::string out = std::to_string(acc.back());
  for (size_t i = acc.size() - 1; i-- > 0;) {
    const std::string limb = std::to_string(acc[i]);
    out += std::string(9 - limb.size(), '0') + limb;
  }
  return out;
}

[[noreturn]] void refuse(const char* op, const Shape& shape, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": shape " + shape_str(shape) + " " + what +
                              ", more than " + std::to_string(kMax));
}

// a * b for a, b >= 0, or -1 when it does not fit in int64.
int64_t mul_or_minus1(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

}  // namespace

int64_t checked_numel(const Shape& shape, const char* op) {
  for (int64_t d : shape)
    if (d < 0)
      throw std::invalid_argument(std::string(op) + ": negative dimension in shape " +
                                  shape_str(shape));
  // The largest row-major stride is the product of every dim but the first (zeros count as 1,
  // as contiguous_strides has them); with no zero dim it is bounded by the element count.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t numel = 1, stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (numel >= 0) numel = mul_or_minus1(numel, shape[i]);
    if (i > 0 && stride >= 0) stride = mul_or_minus1(stride, std::max<int64_t>(shape[i], 1));
  }
  std::vector<uint64_t> factors(shape.begin(), shape.end());
  if (!empty && numel < 0) refuse(op, shape, "has " + exact_product(factors) + " elements");
  if (stride < 0) {
    for (uint64_t& f : factors) f = std::max<uint64_t>(f, 1);
    factors.erase(factors.begin());
    refuse(op, shape, "has 0 elements but a row-major stride of " + exact_product(factors));
  }
  return empty ? 0 : numel;
}

int64_t checked_nbytes(const Shape& shape, DType dtype, const char* op) {
  const int64_t numel = checked_numel(shape, op), size = int64_t(dtype_size(dtype));
  const int64_t nbytes = mul_or_minus1(numel, size);
  if (nbytes < 0)
    refuse(op, shape,
           std::string("of ") + dtype_name(dtype) + " needs " +
               exact_product({uint64_t(numel), uint64_t(size)}) + " bytes");
  return nbytes;
}

}  // namespace tg
