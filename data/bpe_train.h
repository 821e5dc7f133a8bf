// §2.5 (byte pair encoding): training a byte-level BPE vocabulary, GPT-2 style: the text is
// pre-tokenized with GPT-2's pattern (pretokenize.h) and pairs merge only inside a chunk.
// Python reference: minbpe/regex.py (RegexTokenizer.train), minbpe/base.py (get_stats, merge).
//
// Each step merges the most frequent adjacent pair. Ties go to the pair that occurs first in the
// text (chunk order, then position), which is what minbpe's max() over its insertion-ordered
// stats picks, so results equal minbpe's RegexTokenizer. Pair counts are updated incrementally:
// a merge revisits only the distinct chunks that contain the pair.
//
// Not here: other patterns, lower-casing or normalisation, frequency thresholds, dropout-BPE,
// parallel training.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/bpe_tokenizer.h"

namespace tg::data {

struct BpeTrainStats {
  size_t chunks = 0, unique_chunks = 0, merges = 0;
};

// Merges (a, b) -> 256 + k, in order, until 256 + merges == vocab_size or no pair is left.
// Text equal to a special token is cut out before counting (it is never merged across).
std::vector<std::pair<int, int>> bpe_train_merges(
    std::string_view text, int vocab_size, const std::vector<std::string>& special_tokens = {},
    BpeTrainStats* stats = nullptr);

// A tokenizer from those merges; special tokens get ids vocab_size, vocab_size + 1, ... (or the
// first free ids if training stopped early).
Tokenizer bpe_train(std::string_view text, int vocab_size,
                    const std::vector<std::string>& special_tokens = {},
                    BpeTrainStats* stats = nullptr);

}  // namespace tg::data
