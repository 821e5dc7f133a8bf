// The training tokenizer's name, as `tapegrad train --tokenizer` takes it and a checkpoint keeps
// it: "gpt2", or "bpe:N", a BPE of N tokens (the 256 bytes included) trained on the text.
#pragma once
#include <charconv>
#include <optional>
#include <string>

namespace tg::data {

inline constexpr int kMinBpeVocab = 256, kMaxBpeVocab = 100000;

// N of "bpe:N" when N is a whole number from kMinBpeVocab to kMaxBpeVocab; nullopt otherwise.
inline std::optional<int> bpe_vocab_size(const std::string& spec) {
  if (spec.rfind("bpe:", 0) != 0) return std::nullopt;
  const char *first = spec.data() + 4, *last = spec.data() + spec.size();
  int n = 0;
  const auto [end, ec] = std::from_chars(first, last, n);
  if (first == last || ec != std::errc() || end != last || n < kMinBpeVocab || n > kMaxBpeVocab)
    return std::nullopt;
  return n;
}

// "256 <= N <= 100000", for the messages that refuse a spec.
inline std::string bpe_vocab_range() {
  return std::to_string(kMinBpeVocab) + " <= N <= " + std::to_string(kMaxBpeVocab);
}

}  // namespace tg::data
