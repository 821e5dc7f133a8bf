// Bytes and UTF-8 (RFC 3629): decoding one scalar, encoding one, and showing bytes in a one-line
// error message. Shared by the JSON reader (core/json.h) and the tokenizer (data/).
//
// Not here: normalisation, grapheme clusters, UTF-16 (a JSON \u pair is joined by the reader).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tg {

// The code point utf8_decode reports for an invalid or truncated sequence.
inline constexpr uint32_t kInvalidUtf8 = 0xFFFFFFFF;

// Decodes one UTF-8 scalar at s[i] (i < s.size()). Returns its length (1..4) and sets cp; for an
// invalid or truncated sequence (overlong, surrogate, past U+10FFFF) returns 1 and sets cp to
// kInvalidUtf8. Inline: the pre-tokenizer calls it once per non-ASCII character.
inline int utf8_decode(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  cp = kInvalidUtf8;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  int len;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 1;
  }
  if (i + len > s.size()) return 1;
  for (int k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 1;
    v = (v << 6) | (b(k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 1;
  cp = v;
  return len;
}

// How many bytes at the end of s begin a UTF-8 sequence that more bytes could complete: a lead
// byte followed by fewer continuation bytes than it announces (0 to 3). Text streamed in pieces
// cut before such a tail decodes, piece by piece, as the whole text does.
size_t utf8_incomplete_tail(std::string_view s);

// Appends code point cp (at most U+10FFFF) as 1 to 4 UTF-8 bytes.
void append_utf8(std::string& out, uint32_t cp);

// Bytes as they may appear in a one-line message: the first `max`, C escapes (\xNN) for control
// and non-ASCII bytes (a NUL too, which would end the message) and for the backslash, "..." when
// cut.
std::string show_bytes(std::string_view bytes, size_t max = 40);
// A name from a file (a tensor's, a metadata key) in a message: show_bytes up to 200 bytes.
inline std::string show_name(std::string_view name) { return show_bytes(name, 200); }

}  // namespace tg
