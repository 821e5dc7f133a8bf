// Every use of the JSON reader (core/json.h) on any bytes: the parser itself, GPTConfig::parse,
// and the checkpoint's stored options as --resume reads them. A parsed document's strings must
// survive json::quote and a second parse unchanged.
#include <exception>

#include "core/json.h"
#include "fuzz/fuzz.h"
#include "nn/gpt.h"
#include "train/train_options.h"

using namespace tg;

namespace {

// Every string in v, keys included, quoted and parsed again, is itself.
void check_strings_round_trip(const json::Value& v) {
  if (v.kind == json::Value::Kind::String)
    TG_FUZZ_CHECK(json::parse(json::quote(v.str)).str == v.str);
  for (const json::Value& item : v.items) check_strings_round_trip(item);
  for (const std::string& k : v.keys) TG_FUZZ_CHECK(json::parse(json::quote(k)).str == k);
  for (const json::Value& item : v.values) check_strings_round_trip(item);
}

}  // namespace

TG_FUZZ_ENTRY(json) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    check_strings_round_trip(json::parse(text));
  } catch (const json::Error&) {
  }
  try {
    const nn::GPTConfig c = nn::GPTConfig::parse(text);
    c.validate();
    TG_FUZZ_CHECK(nn::GPTConfig::parse(c.str()) == c);
  } catch (const std::invalid_argument&) {
  }
  try {
    train::TrainOptions o;
    o.resume_dir = "fuzz";
    train::merge_resume_options(o, json::parse(text), "fuzz");
    train::check_options(o);
  } catch (const std::exception&) {
  }
  return 0;
}
