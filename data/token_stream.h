// §2.5 at scale: `tapegrad tokenize` on a text that arrives in blocks (a file or stdin of up to
// 1 GiB) without holding it, so memory stays a constant instead of ~52 bytes per input byte.
//
// TokenStream encodes each block up to the last place where the whole text's encoding is sure
// to split too, and keeps the rest for the next block: the start of the block's last GPT-2
// pretokenizer chunk, or of the first one that starts in its last 3 bytes (a chunk's extent
// depends on at most the 3 characters from its start, "'re", or on the one after its end, which
// the next chunk holds), moved back before an incomplete UTF-8 character and before a tail that
// could begin a special token. The ids are those of Tokenizer::encode on the whole text (the test
// compares them for every block size from 1 byte up).
//
// A chunk longer than a block (100 MB of one letter) is held whole, as encode holds it; the cut is
// looked for again only once the held text has doubled, so such a chunk is scanned a bounded
// number of times per byte, not once per block (which made 200 MB of one letter quadratic).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"

namespace tg::data {

class TokenStream {
 public:
  // `emit` gets the ids in order, in pieces. ordinary: specials are plain text (encode_ordinary);
  // else every special of the tokenizer is allowed (encode with SpecialSet::All()).
  TokenStream(const Tokenizer& tok, bool ordinary,
              std::function<void(const std::vector<int>&)> emit);
  void feed(std::string_view block);
  void finish();  // encodes what is held; call once, after the last block
  // Bytes looked at by the search for a cut so far: at most a few times the bytes fed (tests).
  size_t scanned_bytes() const { return scanned_; }

 private:
  size_t safe_cut() const;
  void encode(std::string_view text);

  const Tokenizer& tok_;
  bool ordinary_;
  std::function<void(const std::vector<int>&)> emit_;
  std::string pending_;
  size_t rescan_at_ = 0;  // pending_'s size at which to look for a cut again
  size_t scanned_ = 0;
};

}  // namespace tg::data
