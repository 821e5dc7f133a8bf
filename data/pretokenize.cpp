// GPT-2 pre-tokenizer as a hand scanner; see pretokenize.h.
#include "data/pretokenize.h"

#include <algorithm>
#include <array>

namespace tg::data {
namespace {

struct CodeRange {
  uint32_t lo, hi;  // inclusive
};
#include "data/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&r)[N], uint32_t cp) {
  // First range whose hi >= cp; cp is inside iff lo <= cp.
  const CodeRange* it =
      std::lower_bound(r, r + N, cp, [](const CodeRange& a, uint32_t v) { return a.hi < v; });
  return it != r + N && it->lo <= cp;
}

CharClass classify_slow(uint32_t cp) {
  if (in_ranges(kLetter, cp)) return CharClass::kLetter;
  if (in_ranges(kNumber, cp)) return CharClass::kNumber;
  if (in_ranges(kWhiteSpace, cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

// Direct table for the first two planes (all scripts in ordinary text); binary search above.
constexpr uint32_t kTableSize = 0x20000;
const std::array<CharClass, kTableSize>& class_table() {
  static const auto* table = [] {
    auto* t = new std::array<CharClass, kTableSize>;
    for (uint32_t cp = 0; cp < kTableSize; ++cp) (*t)[cp] = classify_slow(cp);
    return t;
  }();
  return *table;
}

}  // namespace

const char* unicode_version() { return TG_UNICODE_VERSION; }

CharClass char_class(uint32_t cp) {
  if (cp < kTableSize) return class_table()[cp];
  if (cp > 0x10FFFF) return CharClass::kOther;
  return classify_slow(cp);
}

namespace {

// ASCII classes without the table lookup (the common case in English and code).
CharClass class_at(std::string_view s, size_t i, int& len) {
  const auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) {
    len = 1;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  uint32_t cp;
  len = utf8_decode(s, i, cp);
  return cp == 0xFFFFFFFF ? CharClass::kOther : char_class(cp);
}

// End of the run of class `cls` that starts at pos.
size_t run_end(std::string_view s, size_t pos, CharClass cls) {
  while (pos < s.size()) {
    int len;
    if (class_at(s, pos, len) != cls) break;
    pos += len;
  }
  return pos;
}

}  // namespace

size_t gpt2_match_length(std::string_view s, size_t pos) {
  const size_t n = s.size();
  // 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive in GPT-2's pattern)
  if (s[pos] == '\'' && pos + 1 < n) {
    const char a = s[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < n) {
      const char b = s[pos + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  int len;
  const CharClass cls = class_at(s, pos, len);
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a single ASCII space joins the run after it.
  if (s[pos] == ' ' && pos + 1 < n) {
    int len2;
    const CharClass next = class_at(s, pos + 1, len2);
    if (next != CharClass::kSpace) return run_end(s, pos + 1, next) - pos;
  }
  if (cls != CharClass::kSpace) return run_end(s, pos, cls) - pos;
  // '\s+(?!\S)': the whitespace run, minus its last character when a non-space follows, so that
  // character can lead the next word. '\s+' catches the single-character case.
  size_t end = pos, last = pos;
  while (end < n) {
    int l;
    if (class_at(s, end, l) != CharClass::kSpace) break;
    last = end;
    end += l;
  }
  if (end == n || last == pos) return end - pos;
  return last - pos;
}

std::vector<std::string_view> pretokenize_gpt2(std::string_view text) {
  std::vector<std::string_view> out;
  pretokenize_gpt2(text, [&](std::string_view c) { out.push_back(c); });
  return out;
}

}  // namespace tg::data
