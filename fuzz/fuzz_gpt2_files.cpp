// GPT-2's encoder.json + vocab.bpe loader on any pair of files. The input is split at the first
// NUL byte: encoder.json before it, vocab.bpe after (the seeds are cut-down real files).
#include <exception>

#include "data/bpe_tokenizer.h"
#include "fuzz/fuzz.h"

using namespace tg;

TG_FUZZ_ENTRY(gpt2_files) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  const std::string enc = fuzz::write_temp("encoder.json", in.substr(0, cut));
  const std::string bpe =
      fuzz::write_temp("vocab.bpe", cut == std::string_view::npos ? "" : in.substr(cut + 1));
  try {
    const data::Tokenizer tok = data::Tokenizer::from_gpt2_files(enc, bpe);
    // A vocabulary that loads must encode and decode its own files' bytes losslessly.
    const std::vector<int> ids = tok.encode_ordinary(in);
    TG_FUZZ_CHECK(tok.decode_bytes(ids) == in);
  } catch (const std::exception&) {
  }
  return 0;
}
