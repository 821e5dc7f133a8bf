// A minimal JSON reader and string escaper: enough for safetensors headers, checkpoint metadata
// and our own --log lines. Values are null, bool, number (kept as double and as its text, so
// int64 offsets survive), string, array and object (insertion order kept).
//
// Not here: streaming, \u escapes beyond the Basic Multilingual Plane pairs, pretty printing.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::train {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;  // String: the value; Number: the literal as written
  std::vector<JsonValue> items;
  // Object members in order: keys[i] names values[i]. (Two vectors rather than pairs: a pair
  // needs JsonValue complete here, which clang 14 with libstdc++ enforces.)
  std::vector<std::string> keys;
  std::vector<JsonValue> values;

  // The field named key, or null when absent (or not an object).
  const JsonValue* find(std::string_view key) const;
  // Integer value of a Number; throws std::runtime_error if it is not an integer.
  int64_t as_int() const;
};

// Throws std::runtime_error "bad JSON at byte N: reason".
JsonValue parse_json(std::string_view text);

// "text" with quotes, backslashes and control characters escaped.
std::string json_quote(std::string_view s);
// A double as JSON (17 significant digits; NaN and infinities as null).
std::string json_number(double v);

}  // namespace tg::train
