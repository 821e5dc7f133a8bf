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

}  // namespace

std::vector<std::pair<int, int>> bpe_train_merges(std::string_view text, int vocab_size,
                                                  const std::vector<std::string>& special_tokens,
                                                  BpeTrainStats* stats) {
  if (vocab_size < 256)
    throw std::invalid_argument("bpe_train: vocab_size must be >= 256 (the byte tokens), got " +
                                std::to_string(vocab_size));
  // 1. Distinct chunks with their frequencies, numbered by first appearance.
  std::vector<Word> words;
  std::unordered_map<std::string_view, int> index;
  size_t n_chunks = 0;
  const auto add_segment = [&](std::string_view seg) {
    pretokenize_gpt2(seg, [&](std::string_view chunk) {
      ++n_chunks;
      const auto [it, fresh] = index.emplace(chunk, static_cast<int>(words.size()));
      if (fresh) {
        Word w;
        w.ids.assign(reinterpret_cast<const uint8_t*>(chunk.data()),
                     reinterpret_cast<const uint8_t*>(chunk.data()) + chunk.size());
        words.push_back(std::move(w));
      }
      ++words[it->second].freq;
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

  // 2. Initial pair counts and the chunks each pair occurs in.
  std::unordered_map<Pair, PairInfo> pairs;
  for (int w = 0; w < static_cast<int>(words.size()); ++w)
    for (const auto& [p, c] : pair_counts(words[w].ids)) {
      PairInfo& info = pairs[p];
      info.count += c * words[w].freq;
      info.words.insert(w);
    }
  std::vector<int64_t> token_len(256, 1);  // bytes per token id, for byte offsets

  // Current key of a pair: its count and its first occurrence.
  const auto key_of = [&](Pair p, const PairInfo& info) {
    const int w = *info.words.begin();
    const auto& ids = words[w].ids;
    int64_t offset = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      if (ids[i] == left_of(p) && ids[i + 1] == right_of(p)) break;
      offset += token_len[ids[i]];
    }
    return Key{info.count, w, offset, p};
  };
  std::priority_queue<Key> heap;
  for (const auto& [p, info] : pairs) heap.push(key_of(p, info));

  // 3. Merge until the vocabulary is full. Heap entries are refreshed lazily: a popped entry
  // whose pair has changed is pushed again with its current key. Keys only get worse without a
  // push (a pair loses occurrences only if it does not contain the new token, and pairs with the
  // new token are pushed), so the top, once current, is the true best pair.
  std::vector<std::pair<int, int>> merges;
  while (static_cast<int>(256 + merges.size()) < vocab_size && !heap.empty()) {
    const Key top = heap.top();
    heap.pop();
    const auto found = pairs.find(top.pair);
    if (found == pairs.end() || found->second.count <= 0 || found->second.words.empty()) continue;
    const Key now = key_of(top.pair, found->second);
    if (!now.same_rank(top)) {
      heap.push(now);
      continue;
    }
    const int a = left_of(top.pair), b = right_of(top.pair);
    const int t = static_cast<int>(256 + merges.size());
    // A vocabulary file may not hold such a token (Tokenizer::from_merges refuses it on load).
    if (token_len[a] + token_len[b] > static_cast<int64_t>(kMaxTokenBytes))
      throw std::invalid_argument(
          "merge " + std::to_string(merges.size()) + " would make a token of " +
          std::to_string(token_len[a] + token_len[b]) + " bytes, more than the " +
          std::to_string(kMaxTokenBytes) +
          " a token may have (the text has a run of letters, digits, punctuation or spaces that "
          "long)");
    merges.emplace_back(a, b);
    token_len.push_back(token_len[a] + token_len[b]);
    const std::vector<int> affected(found->second.words.begin(), found->second.words.end());
    pairs.erase(found);
    for (const int w : affected) {
      Word& word = words[w];
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
        if (p == top.pair || old_c == new_c) continue;
        PairInfo& info = pairs[p];
        info.count += (new_c - old_c) * word.freq;
        if (new_c == 0) info.words.erase(w);
        if (old_c == 0) info.words.insert(w);
        if (new_c > old_c) heap.push(key_of(p, info));
        if (info.count <= 0 && info.words.empty()) pairs.erase(p);
      }
    }
  }
  if (stats) *stats = {n_chunks, words.size(), merges.size()};
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
