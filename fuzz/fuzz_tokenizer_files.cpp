// Tokenizer::load on any bytes: tapegrad's "tapegrad-bpe v1" format (chosen by the first line)
// or tiktoken's rank format. A vocabulary that loads must round-trip text, and what save()
// writes must load back to the same ids.
#include <exception>

#include "data/bpe_tokenizer.h"
#include "fuzz/fuzz.h"

using namespace tg;

TG_FUZZ_ENTRY(tokenizer_files) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::write_temp("vocab.tok", in);
  try {
    const data::Tokenizer tok = data::Tokenizer::load(path);
    const std::vector<int> ids = tok.encode(in, data::SpecialSet::All());
    TG_FUZZ_CHECK(tok.decode_bytes(ids) == in);
    const std::string saved = path + ".saved";
    bool written = true;
    try {
      tok.save(saved);  // refuses vocabularies that are not merges of bytes
    } catch (const std::runtime_error&) {
      written = false;
    }
    if (written)
      TG_FUZZ_CHECK(data::Tokenizer::load(saved).encode(in, data::SpecialSet::All()) == ids);
    tok.save_tiktoken(saved);
    TG_FUZZ_CHECK(data::Tokenizer::from_tiktoken_file(saved, tok.specials())
                      .encode(in, data::SpecialSet::All()) == ids);
  } catch (const data::VocabError&) {
  }
  return 0;
}
