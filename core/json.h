// JSON (RFC 8259): one strict reader for every file tapegrad reads (GPT-2's encoder.json,
// safetensors headers, checkpoint metadata, GPT configs, --log lines), and the two writers its
// own files need (a quoted string, a number, an object of them).
//
// Strict means the reader refuses what RFC 8259 refuses (comments, single quotes, trailing
// commas, leading zeros, raw control characters in strings, invalid UTF-8, anything after the
// value) and also what the RFC allows but no caller could use: a key twice in one object, a \u
// escape that is a lone or mismatched surrogate, nesting deeper than kMaxDepth. Every refusal is
// a json::Error whose what() is "LINE:COL: reason", so a file's reader prefixes "PATH:".
//
// Not here: streaming, a document model to edit and write back, numbers beyond double (each
// number keeps its text too, so int64 values survive).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::json {

inline constexpr int kMaxDepth = 64;

// A place in the text: 1-based line and column, the column counted in bytes.
struct Pos {
  size_t line = 1, col = 1;
};

// "LINE:COL: reason"
struct Error : std::runtime_error {
  Error(Pos where, const std::string& reason);
  Pos where;
  std::string reason;
};

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;  // String: the value (UTF-8); Number: the literal as written
  std::vector<Value> items;
  // Object members in order: keys[i] names values[i]. (Two vectors rather than pairs: a pair
  // needs Value complete here, which clang 14 with libstdc++ enforces.)
  std::vector<std::string> keys;
  std::vector<Value> values;
  Pos pos;  // where the value starts, for callers' own errors

  // The member named key, or null when absent (or not an object).
  const Value* find(std::string_view key) const;
  // A Number written as an integer; throws Error at pos ("expected an integer, got ...")
  // for anything else, or when it does not fit in int64.
  int64_t as_int() const;
};

// Parses one JSON text; throws Error.
Value parse(std::string_view text);

// s as a JSON string: quotes, backslashes and control characters escaped, other bytes as they
// are (the reader checks UTF-8, the writer trusts its caller).
std::string quote(std::string_view s);
// v with 17 significant digits, so it reads back to the same double; NaN and infinities as null.
std::string number(double v);
// {"k1": v1, "k2": v2, ...}: the keys quoted, the values already JSON (number(), quote(), ...),
// in the order given.
std::string object(std::initializer_list<std::pair<std::string_view, std::string>> members);

// An object written member by member, in order: {"a": 1, "b": "x"} (", " and ": " between,
// as GPTConfig::str writes). Keys are the caller's and not checked for repeats.
class ObjectWriter {
 public:
  ObjectWriter& add_string(std::string_view key, std::string_view v);
  ObjectWriter& add_number(std::string_view key, double v);  // number(v)
  ObjectWriter& add_int(std::string_view key, int64_t v);
  ObjectWriter& add_bool(std::string_view key, bool v);
  std::string str() const;

 private:
  ObjectWriter& add_raw(std::string_view key, const std::string& json);
  std::string body_;
};

}  // namespace tg::json
