// BPE training with incremental pair counts; see bpe_train.h.
#include "data/bpe_train.h"

#include <algorithm>
#include <queue>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "data/pretokenize.h"

namespace tg::data {
namespace {

using Pair = uint64_t;  // (left id << 32) | right id
Pair make_pair_key(int a, int b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}
int left_of(Pair p) { return static_cast<int>(p >> 32); }
int right_of(Pair p) { return static_cast<int>(p & 0xFFFFFFFFu); }

struct Word {
  std::vector<int> ids;  // current tokens of this distinct chunk
  int64_t freq = 0;      // how often the chunk occurs in the text
};

struct PairInfo {
  int64_t count = 0;    // occurrences, weighted by word frequency
  std::set<int> words;  // distinct chunks (by first appearance) that contain the pair
};

// Priority: larger count, then earlier first occurrence (word, then byte offset in it).
struct Key {
  int64_t count;
  int word;
  int64_t offset;
  Pair pair;
  bool operator<(const Key& o) const {  // "lower priority than"
    if (count != o.count) return count < o.count;
    if (word != o.word) return word > o.word;
    return offset > o.offset;
  }
  bool same_rank(const Key& o) const {
    return count == o.count && word == o.word && offset == o.offset;
  }
};

// (pair, number of occurrences) of a token list, sorted by pair.
std::vector<std::pair<Pair, int>> pair_counts(const std::vector<int>& ids) {
  std::vector<Pair> ps;
  ps.reserve(ids.size());
  for (size_t i = 0; i + 1 < ids.size(); ++i) ps.push_back(make_pair_key(ids[i], ids[i + 1]));
  std::sort(ps.begin(), ps.end());
  std::vector<std::pair<Pair, int>> out;
  for (const Pair p : ps) {
    if (!out.empty() && out.back().first == p) {
      ++out.back().second;
    } else {
      out.emplace_back(p, 1);
    }
  }
  return out;
}

// Step 1: the text's distinct chunks (pretokenized between the special tokens) with their
// frequencies, numbered by first appearance.
struct Chunks {
  std::vector<Word> words;
  size_t n_chunks = 0;  // chunks in the text, repeats included
};

Chunks count_chunks(std::string_view text, const std::vector<std::string>& special_tokens) {
  Chunks out;
  std::unordered_map<std::string_view, int> index;
  const auto add_segment = [&](std::string_view seg) {
    pretokenize_gpt2(seg, [&](std::string_view chunk) {
      ++out.n_chunks;
      const auto [it, fresh] = index.emplace(chunk, static_cast<int>(out.words.size()));
      if (fresh) {
        Word w;
        w.ids.assign(reinterpret_cast<const uint8_t*>(chunk.data()),
                     reinterpret_cast<const uint8_t*>(chunk.data()) + chunk.size());
        out.words.push_back(std::move(w));
      }
      ++out.words[it->second].freq;
    });
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t best = std::string_view::npos, len = 0;
    for (const auto& s : special_tokens) {
      if (s.empty()) throw std::invalid_argument("bpe_train: empty special token");
      const size_t at = text.find(s, start);
      if (at < best || (at == best && at != std::string_view::npos && s.size() > len))
        best = at, len = s.size();
    }
    add_segment(text.substr(start, best == std::string_view::npos ? best : best - start));
    if (best == std::string_view::npos) break;
    start = best + len;
  }
  return out;
}

// Steps 2 and 3: the pair counts over the chunks, the chunks each pair occurs in, and a heap of
// candidate merges. Heap entries are refreshed lazily: a popped entry whose pair has changed is
// pushed again with its current key. Keys only get worse without a push (a pair loses
// occurrences only if it does not contain the new token, and pairs with the new token are
// pushed), so the top, once current, is the true best pair.
class PairTable {
 public:
  // Step 2: the initial pair counts.
  explicit PairTable(std::vector<Word>& words) : words_(words), token_len_(256, 1) {
    for (int w = 0; w < static_cast<int>(words_.size()); ++w)
      for (const auto& [p, c] : pair_counts(words_[w].ids)) {
        PairInfo& info = pairs_[p];
        info.count += c * words_[w].freq;
        info.words.insert(w);
      }
    for (const auto& [p, info] : pairs_) heap_.push(key_of(p, info));
  }

  // The best pair left to merge, or false when there is none.
  bool pop_best(Pair& best) {
    while (!heap_.empty()) {
      const Key top = heap_.top();
      heap_.pop();
      const auto found = pairs_.find(top.pair);
      if (found == pairs_.end() || found->second.count <= 0 || found->second.words.empty())
        continue;
      const Key now = key_of(top.pair, found->second);
      if (!now.same_rank(top)) {
        heap_.push(now);
        continue;
      }
      best = top.pair;
      return true;
    }
    return false;
  }

  // Bytes of the token that merging `pair` makes.
  int64_t merged_bytes(Pair pair) const {
    return token_len_[left_of(pair)] + token_len_[right_of(pair)];
  }

  // Step 3: replaces `pair` by the new token t in every chunk that holds it.
  void merge(Pair pair, int t) {
    const auto found = pairs_.find(pair);
    token_len_.push_back(merged_bytes(pair));
    const std::vector<int> affected(found->second.words.begin(), found->second.words.end());
    pairs_.erase(found);
    for (const int w : affected) merge_in_word(w, pair, t);
  }

 private:
  // Current key of a pair: its count and its first occurrence (chunk, then byte offset in it).
  Key key_of(Pair p, const PairInfo& info) const {
    const int w = *info.words.begin();
    const auto& ids = words_[w].ids;
    int64_t offset = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      if (ids[i] == left_of(p) && ids[i + 1] == right_of(p)) break;
      offset += token_len_[ids[i]];
    }
    return Key{info.count, w, offset, p};
  }

  void merge_in_word(int w, Pair pair, int t) {
    Word& word = words_[w];
    const int a = left_of(pair), b = right_of(pair);
    // minbpe's merge(): left to right, non-overlapping.
    std::vector<int> merged;
    merged.reserve(word.ids.size());
    for (size_t i = 0; i < word.ids.size(); ++i) {
      if (i + 1 < word.ids.size() && word.ids[i] == a && word.ids[i + 1] == b) {
        merged.push_back(t);
        ++i;
      } else {
        merged.push_back(word.ids[i]);
      }
    }
    const auto before = pair_counts(word.ids), after = pair_counts(merged);
    word.ids = std::move(merged);
    // Walk both sorted lists: pairs that vanished, changed or appeared in this word.
    size_t i = 0, j = 0;
    while (i < before.size() || j < after.size()) {
      Pair p;
      int64_t old_c = 0, new_c = 0;
      if (j >= after.size() || (i < before.size() && before[i].first < after[j].first)) {
        p = before[i].first, old_c = before[i++].second;
      } else if (i >= before.size() || after[j].first < before[i].first) {
        p = after[j].first, new_c = after[j++].second;
      } else {
        p = before[i].first, old_c = before[i++].second, new_c = after[j++].second;
      }
      if (p == pair || old_c == new_c) continue;
      PairInfo& info = pairs_[p];
      info.count += (new_c - old_c) * word.freq;
      if (new_c == 0) info.words.erase(w);
      if (old_c == 0) info.words.insert(w);
      if (new_c > old_c) heap_.push(key_of(p, info));
      if (info.count <= 0 && info.words.empty()) pairs_.erase(p);
    }
  }

  std::vector<Word>& words_;
  std::unordered_map<Pair, PairInfo> pairs_;
  std::vector<int64_t> token_len_;  // bytes per token id, for byte offsets
  std::priority_queue<Key> heap_;
};

}  // namespace

std::vector<std::pair<int, int>> bpe_train_merges(std::string_view text, int vocab_size,
                                                  const std::vector<std::string>& special_tokens,
                                                  BpeTrainStats* stats) {
  if (vocab_size < 256)
    throw std::invalid_argument("bpe_train: vocab_size must be >= 256 (the byte tokens), got " +
                                std::to_string(vocab_size));
  Chunks chunks = count_chunks(text, special_tokens);  // 1. distinct chunks
  PairTable table(chunks.words);                       // 2. pair counts
  std::vector<std::pair<int, int>> merges;             // 3. merges, until the vocabulary is full
  Pair best = 0;
  while (static_cast<int>(256 + merges.size()) < vocab_size && table.pop_best(best)) {
    const int t = static_cast<int>(256 + merges.size());  // the new token's id
    // A vocabulary file may not hold such a token (Tokenizer::from_merges refuses it on load).
    if (table.merged_bytes(best) > static_cast<int64_t>(kMaxTokenBytes))
      throw std::invalid_argument(
          "merge " + std::to_string(merges.size()) + " would make a token of " +
          std::to_string(table.merged_bytes(best)) + " bytes, more than the " +
          std::to_string(kMaxTokenBytes) +
          " a token may have (the text has a run of letters, digits, punctuation or spaces that "
          "long)");
    merges.emplace_back(left_of(best), right_of(best));
    table.merge(best, t);
  }
  if (stats) *stats = {chunks.n_chunks, chunks.words.size(), merges.size()};
  return merges;
}

Tokenizer bpe_train(std::string_view text, int vocab_size,
                    const std::vector<std::string>& special_tokens, BpeTrainStats* stats) {
  const auto merges = bpe_train_merges(text, vocab_size, special_tokens, stats);
  std::vector<std::pair<std::string, int>> specials;
  int next_id = static_cast<int>(256 + merges.size());
  for (const auto& s : special_tokens) specials.emplace_back(s, next_id++);
  return Tokenizer::from_merges(merges, std::move(specials));
}

}  // namespace tg::data
