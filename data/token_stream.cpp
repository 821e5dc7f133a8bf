// See token_stream.h.
#include "data/token_stream.h"

#include <algorithm>

#include "core/text.h"
#include "data/pretokenize.h"

namespace tg::data {

namespace {

// s.size(), or the start of an incomplete UTF-8 sequence at its end.
size_t before_partial_utf8(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    return back < len ? s.size() - back : s.size();
  }
  return s.size();
}

// A run of whitespace (the pattern's \s+ alternatives): the other chunks end in a letter, digit
// or other character.
bool is_space_chunk(std::string_view chunk) {
  size_t i = chunk.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(chunk[i]) & 0xC0) == 0x80) --i;
  uint32_t cp = 0;
  utf8_decode(chunk, i, cp);
  return cp != kInvalidUtf8 && char_class(cp) == CharClass::kSpace;
}

}  // namespace

TokenStream::TokenStream(const Tokenizer& tok, bool ordinary,
                         std::function<void(const std::vector<int>&)> emit)
    : tok_(tok), ordinary_(ordinary), emit_(std::move(emit)) {}

void TokenStream::encode(std::string_view text) {
  if (text.empty()) return;
  emit_(ordinary_ ? tok_.encode_ordinary(text) : tok_.encode(text, SpecialSet::All()));
}

size_t TokenStream::safe_cut() const {
  std::string_view s(pending_);
  s = s.substr(0, before_partial_utf8(s));
  // A tail that begins a special token may be one once the next block arrives.
  if (!ordinary_) {
    size_t hold = 0;
    for (const auto& [name, id] : tok_.specials())
      for (size_t k = std::min(name.size() - 1, s.size()); k > hold; --k)
        if (s.substr(s.size() - k) == std::string_view(name).substr(0, k)) {
          hold = k;
          break;
        }
    s.remove_suffix(hold);
  }
  // After the last whole special token (found as encode finds them: earliest, then longest).
  size_t after_special = 0;
  while (!ordinary_) {
    size_t best_at = std::string_view::npos, best_len = 0;
    for (const auto& [name, id] : tok_.specials()) {
      const size_t at = s.find(name, after_special);
      if (at < best_at || (at == best_at && at != std::string_view::npos && name.size() > best_len))
        best_at = at, best_len = name.size();
    }
    if (best_at == std::string_view::npos) break;
    after_special = best_at + best_len;
  }
  // The last chunk may grow; so may one that starts in the last 3 bytes: "'" then "r" are two
  // chunks until an "e" makes them the contraction "'re". And the part before the cut, encoded
  // on its own, must not end in whitespace: "\n\n." is the chunks "\n" "\n" ".", but "\n\n"
  // alone is one chunk (\s+(?!\S) splits a run only before a non-space).
  size_t cut = s.size(), space_run = s.size();
  bool late = false;
  pretokenize_gpt2(s.substr(after_special), [&](std::string_view chunk) {
    const size_t at = static_cast<size_t>(chunk.data() - s.data());
    if (!late) cut = at < space_run ? at : space_run;
    late = late || at + 3 >= s.size();
    if (!is_space_chunk(chunk))
      space_run = s.size();
    else if (space_run == s.size())
      space_run = at;
  });
  return cut;
}

void TokenStream::feed(std::string_view block) {
  pending_.append(block);
  // Held text that had no cut is looked at again once it has doubled: a chunk of n bytes costs
  // O(n) scanning in all, not O(n) per block.
  if (pending_.size() < rescan_at_) return;
  scanned_ += pending_.size();
  const size_t cut = safe_cut();
  if (cut > 0) encode(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  rescan_at_ = 2 * pending_.size();
}

void TokenStream::finish() {
  encode(pending_);
  pending_.clear();
}

}  // namespace tg::data
