// encode / decode on any bytes: decode_bytes(encode(x)) == x for GPT-2's vocabulary (when
// third_party/gpt2 is there) and for a small trained one, with specials allowed and not, and
// the tree merge agrees with the scan.
#include <exception>
#include <memory>

#include "data/bpe_tokenizer.h"
#include "data/bpe_train.h"
#include "fuzz/fuzz.h"

using namespace tg;

namespace {

const data::Tokenizer* gpt2() {
  static const std::unique_ptr<data::Tokenizer> tok = []() -> std::unique_ptr<data::Tokenizer> {
    try {
      return std::make_unique<data::Tokenizer>(data::Tokenizer::gpt2());
    } catch (const std::exception&) {
      return nullptr;  // no GPT-2 files: the trained vocabulary still runs
    }
  }();
  return tok.get();
}

const data::Tokenizer& trained() {
  static const data::Tokenizer tok = data::bpe_train(
      "the tide clock ticks; the tide turns. <|endoftext|> aaaa bbbb 12345 \xc3\xa9\xc3\xa9 !!!!",
      320, {"<|endoftext|>"});
  return tok;
}

void round_trip(const data::Tokenizer& tok, std::string_view x) {
  TG_FUZZ_CHECK(tok.decode_bytes(tok.encode_ordinary(x)) == x);
  TG_FUZZ_CHECK(tok.decode_bytes(tok.encode(x, data::SpecialSet::All())) == x);
  // Disallowed specials are an exception, never a wrong encoding.
  try {
    TG_FUZZ_CHECK(tok.decode_bytes(tok.encode(x)) == x);
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

TG_FUZZ_ENTRY(encode) {
  const std::string_view x(reinterpret_cast<const char*>(data), size);
  if (const data::Tokenizer* g = gpt2()) round_trip(*g, x);
  round_trip(trained(), x);
  data::Tokenizer tree = trained();
  tree.set_tree_threshold(0);
  TG_FUZZ_CHECK(tree.encode_ordinary(x) == trained().encode_ordinary(x));
  return 0;
}
