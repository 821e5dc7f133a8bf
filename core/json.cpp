// The strict JSON reader and the writers (see json.h). A recursive descent over the RFC 8259
// grammar, one function per rule; positions are tracked as the reader goes (only whitespace can
// hold a newline, since strings refuse raw control characters).
#include "core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "core/text.h"

namespace tg::json {

Error::Error(Pos at, const std::string& why)
    : std::runtime_error(std::to_string(at.line) + ":" + std::to_string(at.col) + ": " + why),
      where(at),
      reason(why) {}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::Object) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &values[i];
  return nullptr;
}

int64_t Value::as_int() const {
  static const char* const kNames[] = {"null",     "a boolean", "",
                                       "a string", "an array",  "an object"};
  if (kind != Kind::Number)
    throw Error(pos, std::string("expected an integer, got ") + kNames[static_cast<int>(kind)]);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(str.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) throw Error(pos, "expected an integer, got " + str);
  return v;
}

namespace {

struct Reader {
  std::string_view s;
  size_t i = 0;
  size_t line = 1, line_start = 0;

  Pos here() const { return {line, i - line_start + 1}; }
  [[noreturn]] void fail(const std::string& why) const { throw Error(here(), why); }
  bool at_end() const { return i >= s.size(); }

  void ws() {
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '\n') {
        ++line;
        line_start = i + 1;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        return;
      }
    }
  }
  // The next non-blank character, without taking it.
  char peek(const char* expected) {
    ws();
    if (at_end()) fail(std::string("unexpected end of input, expected ") + expected);
    return s[i];
  }
  void expect(char c) {
    const std::string what = std::string("'") + c + "'";
    if (peek(what.c_str()) != c)
      fail("expected " + what + ", found '" + show_bytes(s.substr(i, 1)) + "'");
    ++i;
  }

  Value value(int depth);
  template <class F>
  Value list(Value::Kind kind, char open, char close, const char* first, const char* then,
             F read_member);
  Value object(int depth);
  Value array(int depth);
  std::string string();
  void escape(std::string& out);
  uint32_t hex4();
  Value number();
  void literal(std::string_view word);
};

uint32_t Reader::hex4() {
  if (i + 4 > s.size()) fail("truncated \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k, ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) fail("bad hex digit in \\u escape");
    v = v << 4 | uint32_t(d);
  }
  return v;
}

// After the backslash. A \u escape of a high surrogate must be followed by one of a low
// surrogate (the pair is one code point beyond U+FFFF); any other surrogate has no UTF-8 form.
void Reader::escape(std::string& out) {
  const Pos start{line, i - line_start};  // the backslash
  if (at_end()) fail("unterminated escape");
  const char e = s[i++];
  static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
  if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
    out += kTo[k];
    return;
  }
  if (e != 'u') {
    --i;
    fail(std::string("unknown escape \\") + show_bytes(std::string_view(&e, 1)));
  }
  uint32_t cp = hex4();
  if (cp >= 0xD800 && cp <= 0xDBFF && s.substr(i, 2) == "\\u") {
    i += 2;
    const uint32_t lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) throw Error(start, "unpaired surrogate in \\u escape");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    throw Error(start, "unpaired surrogate in \\u escape");
  }
  append_utf8(out, cp);
}

std::string Reader::string() {
  expect('"');
  std::string out;
  while (true) {
    if (at_end()) fail("unterminated string");
    const char c = s[i];
    if (c == '"') {
      ++i;
      return out;
    }
    if (c == '\\') {
      ++i;
      escape(out);
      continue;
    }
    if (static_cast<uint8_t>(c) < 0x20) fail("control character inside a string");
    uint32_t cp;
    const int len = utf8_decode(s, i, cp);
    if (cp == kInvalidUtf8) fail("invalid UTF-8");
    out.append(s.substr(i, len));
    i += len;
  }
}

// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
Value Reader::number() {
  Value v;
  v.kind = Value::Kind::Number;
  v.pos = here();
  const size_t start = i;
  auto digits = [&] {
    const size_t from = i;
    while (!at_end() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  if (!at_end() && s[i] == '-') ++i;
  const size_t int_at = i;
  const size_t n_int = digits();
  bool ok = n_int > 0 && !(n_int > 1 && s[int_at] == '0');
  if (ok && !at_end() && s[i] == '.') ++i, ok = digits() > 0;
  if (ok && !at_end() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (!at_end() && (s[i] == '+' || s[i] == '-')) ++i;
    ok = digits() > 0;
  }
  v.str = std::string(s.substr(start, i - start));
  if (!ok) throw Error(v.pos, "bad number '" + show_bytes(v.str) + "'");
  v.num = std::strtod(v.str.c_str(), nullptr);
  return v;
}

void Reader::literal(std::string_view word) {
  if (s.substr(i, word.size()) != word)
    fail("unexpected '" + show_bytes(s.substr(i, 1)) + "', expected a value");
  i += word.size();
}

// '[' or '{', members separated by commas (none after the last), then the closing bracket.
template <class F>
Value Reader::list(Value::Kind kind, char open, char close, const char* first, const char* then,
                   F read_member) {
  Value v;
  v.kind = kind;
  v.pos = here();
  expect(open);
  bool more = peek(first) != close;
  while (more) {
    read_member(v);
    more = peek(then) == ',';
    if (more) ++i;
  }
  expect(close);
  return v;
}

Value Reader::array(int depth) {
  return list(Value::Kind::Array, '[', ']', "a value or ']'", "',' or ']'",
              [&](Value& v) { v.items.push_back(value(depth + 1)); });
}

Value Reader::object(int depth) {
  std::unordered_set<std::string> seen;
  return list(Value::Kind::Object, '{', '}', "a key or '}'", "',' or '}'", [&](Value& v) {
    if (peek("a key") != '"')
      fail("expected a key in double quotes, found '" + show_bytes(s.substr(i, 1)) + "'");
    const Pos key_at = here();
    std::string key = string();
    if (!seen.insert(key).second) throw Error(key_at, "duplicate key '" + show_bytes(key) + "'");
    expect(':');
    v.keys.push_back(std::move(key));
    v.values.push_back(value(depth + 1));
  });
}

Value Reader::value(int depth) {
  if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
  const char c = peek("a value");
  if (c == '{') return object(depth);
  if (c == '[') return array(depth);
  Value v;
  v.pos = here();
  if (c == '"') {
    v.kind = Value::Kind::String;
    v.str = string();
  } else if (c == 't' || c == 'f') {
    v.kind = Value::Kind::Bool;
    v.b = c == 't';
    literal(v.b ? "true" : "false");
  } else if (c == 'n') {
    literal("null");
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    return number();
  } else {
    fail("unexpected '" + show_bytes(s.substr(i, 1)) + "', expected a value");
  }
  return v;
}

}  // namespace

Value parse(std::string_view text) {
  Reader r{text};
  Value v = r.value(1);  // the top level is depth 1
  r.ws();
  if (!r.at_end()) r.fail("unexpected '" + show_bytes(text.substr(r.i, 1)) + "' after the value");
  return v;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string object(std::initializer_list<std::pair<std::string_view, std::string>> members) {
  std::string out = "{";
  for (const auto& [key, value] : members) {
    if (out.size() > 1) out += ", ";
    out += quote(key) + ": " + value;
  }
  return out + "}";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

ObjectWriter& ObjectWriter::add_raw(std::string_view key, const std::string& json) {
  body_ += (body_.empty() ? "" : ", ") + quote(key) + ": " + json;
  return *this;
}
ObjectWriter& ObjectWriter::add_string(std::string_view key, std::string_view v) {
  return add_raw(key, quote(v));
}
ObjectWriter& ObjectWriter::add_number(std::string_view key, double v) {
  return add_raw(key, number(v));
}
ObjectWriter& ObjectWriter::add_int(std::string_view key, int64_t v) {
  return add_raw(key, std::to_string(v));
}
ObjectWriter& ObjectWriter::add_bool(std::string_view key, bool v) {
  return add_raw(key, v ? "true" : "false");
}
std::string ObjectWriter::str() const { return "{" + body_ + "}"; }

}  // namespace tg::json
