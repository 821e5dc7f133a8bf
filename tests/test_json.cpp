// core/json.h: what the strict reader accepts, and every refusal with its exact line:col message.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "doctest/doctest.h"

namespace json = tg::json;
using Kind = json::Value::Kind;

namespace {

std::string error_of(const std::string& text) {
  try {
    json::parse(text);
  } catch (const json::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("json: values, member order, positions") {
  const json::Value v = json::parse(
      " {\"a\": [1, -2.5e3, true, false, null],\n"
      "  \"b\": {\"c\": \"x\\ty\\u00e9\\ud83d\\ude00\"}, \"n\": 9007199254740993}\n");
  REQUIRE(v.kind == Kind::Object);
  CHECK(v.keys == std::vector<std::string>{"a", "b", "n"});
  const json::Value* a = v.find("a");
  REQUIRE(a);
  REQUIRE(a->items.size() == 5);
  CHECK(a->items[0].as_int() == 1);
  CHECK(a->items[1].num == -2500);
  CHECK(a->items[1].str == "-2.5e3");
  CHECK(a->items[2].b);
  CHECK(a->items[3].kind == Kind::Bool);
  CHECK(!a->items[3].b);
  CHECK(a->items[4].kind == Kind::Null);
  CHECK(v.find("b")->find("c")->str == "x\ty\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.find("n")->as_int() == 9007199254740993);  // past double's 2^53: kept as text
  CHECK(v.find("zz") == nullptr);
  CHECK(a->find("a") == nullptr);  // not an object
  // Positions: line and byte column where each value starts.
  CHECK(v.pos.line == 1);
  CHECK(v.pos.col == 2);
  CHECK(a->items[1].pos.col == 12);
  CHECK(v.find("b")->pos.line == 2);
  CHECK(v.find("b")->pos.col == 8);
  CHECK(json::parse("\"\xe2\x82\xac\"").str == "\xe2\x82\xac");  // raw UTF-8 passes through
  CHECK(json::parse("[]").items.empty());
  CHECK(json::parse("{}").keys.empty());
  CHECK(json::parse("0").as_int() == 0);
}

TEST_CASE("json: every refusal names line:col and the reason") {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", "1:1: unexpected end of input, expected a value"},
      {"{\"a\": 1,\n \"b\" 2}", "2:6: expected ':', found '2'"},
      {"{\"a\": 1, \"a\": 2}", "1:10: duplicate key 'a'"},
      {"{\"k\": {\"x\": 1, \"x\": 1}}", "1:16: duplicate key 'x'"},
      {"{\"a\": 1} x", "1:10: unexpected 'x' after the value"},
      {"[1, 2]]", "1:7: unexpected ']' after the value"},
      {"[1, 2,]", "1:7: unexpected ']', expected a value"},
      {"{\"a\": 1,}", "1:9: expected a key in double quotes, found '}'"},
      {"{a: 1}", "1:2: expected a key in double quotes, found 'a'"},
      {"[1 2]", "1:4: expected ']', found '2'"},
      {"[1,", "1:4: unexpected end of input, expected a value"},
      {"{\"a\"", "1:5: unexpected end of input, expected ':'"},
      {"\"abc", "1:5: unterminated string"},
      {"\"ab\\", "1:5: unterminated escape"},
      {"\"a\\x\"", "1:4: unknown escape \\x"},
      {"\"\\u12G4\"", "1:6: bad hex digit in \\u escape"},
      {"\"\\u12", "1:4: truncated \\u escape"},
      {"\"\\ud83d\\u0041\"", "1:2: unpaired surrogate in \\u escape"},
      {"\"\\ud83d\"", "1:2: unpaired surrogate in \\u escape"},
      {"\"x\\ude00\"", "1:3: unpaired surrogate in \\u escape"},
      {"\"a\nb\"", "1:3: control character inside a string"},
      {"\"\xc3\x28\"", "1:2: invalid UTF-8"},
      {"\"\xed\xa0\x80\"", "1:2: invalid UTF-8"},  // a surrogate in raw UTF-8
      {"01", "1:1: bad number '01'"},
      {"-", "1:1: bad number '-'"},
      {"1.", "1:1: bad number '1.'"},
      {"1e+", "1:1: bad number '1e+'"},
      {"+1", "1:1: unexpected '+', expected a value"},
      {"tru", "1:1: unexpected 't', expected a value"},
      {"nul", "1:1: unexpected 'n', expected a value"},
      {"'a'", "1:1: unexpected ''', expected a value"},
      {"[1] // comment", "1:5: unexpected '/' after the value"},
      {std::string(json::kMaxDepth + 1, '[') + std::string(json::kMaxDepth + 1, ']'),
       "1:65: nested deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(error_of(c.text) == c.message);
  }
  // One level less is fine.
  CHECK(error_of(std::string(json::kMaxDepth, '[') + std::string(json::kMaxDepth, ']')) ==
        "(no error)");
}

TEST_CASE("json: as_int refuses what is not an int64") {
  const json::Value v = json::parse("[1.5, \"7\", 1e3, 9223372036854775808, -9223372036854775808]");
  const auto err = [&](size_t k) {
    try {
      v.items[k].as_int();
    } catch (const json::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err(0) == "1:2: expected an integer, got 1.5");
  CHECK(err(1) == "1:7: expected an integer, got a string");
  CHECK(err(2) == "1:12: expected an integer, got 1e3");
  CHECK(err(3) == "1:17: expected an integer, got 9223372036854775808");
  CHECK(v.items[4].as_int() == INT64_MIN);
}

TEST_CASE("json: quote and number read back") {
  const std::string s = std::string("a\"b\\c\n\t\x01 \xc3\xa9");
  CHECK(json::quote(s) == "\"a\\\"b\\\\c\\n\\t\\u0001 \xc3\xa9\"");
  CHECK(json::parse(json::quote(s)).str == s);
  for (const double d : {0.1, -1e-300, 123456789.0, 1.0 / 3})
    CHECK(json::parse(json::number(d)).num == d);
  CHECK(json::number(std::nan("")) == "null");
}

TEST_CASE("json: object writes its members in order") {
  CHECK(json::object({}) == "{}");
  CHECK(json::object({{"a", "1"}}) == "{\"a\": 1}");
  CHECK(json::object({{"b\"", json::quote("x")}, {"a", "[1, 2]"}}) ==
        "{\"b\\\"\": \"x\", \"a\": [1, 2]}");
  CHECK(json::parse(json::object({{"k", json::number(0.1)}})).find("k")->num == 0.1);
}
