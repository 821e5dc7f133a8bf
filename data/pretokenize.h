// §2.5 (byte pair encoding): GPT-2's pre-tokenizer, the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written as a hand scanner with the same leftmost-first semantics as tiktoken's fancy-regex.
// Python reference: tiktoken_ext/openai_public.py (gpt2 pat_str); minbpe/regex.py.
//
// Not here: other patterns (cl100k, o200k), case-insensitive contractions, special tokens
// (bpe_tokenizer.h splits those out first), normalisation.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/text.h"  // utf8_decode: an invalid byte is class kOther

namespace tg::data {

// Character classes of the pattern. Bytes that are not valid UTF-8 count as kOther, one byte each,
// so every byte string splits (tiktoken only ever sees valid UTF-8).
enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// Class of code point cp (Unicode version in unicode_tables.inc).
CharClass char_class(uint32_t cp);
const char* unicode_version();

// Calls f(chunk) for each match, in order; the chunks exactly tile `text`.
template <class F>
void pretokenize_gpt2(std::string_view text, F&& f);

// Convenience: all chunks.
std::vector<std::string_view> pretokenize_gpt2(std::string_view text);

// Length of the match starting at text[pos] (pos < text.size()).
size_t gpt2_match_length(std::string_view text, size_t pos);

template <class F>
void pretokenize_gpt2(std::string_view text, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = gpt2_match_length(text, pos);
    f(text.substr(pos, n));
    pos += n;
  }
}

}  // namespace tg::data
