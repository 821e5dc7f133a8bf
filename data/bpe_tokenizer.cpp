// Byte-level BPE, tiktoken-exact; see bpe_tokenizer.h.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "data/pretokenize.h"

namespace tg::data {

// ---------------------------------------------------------------------------------------------
// bytes_to_unicode and UTF-8 helpers

uint32_t gpt2_byte_to_unicode(uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 go to 256, 257, ... in byte order.
  const auto printable = [](int c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (int c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int len = utf8_decode(s, i, cp);
    if (cp != 0xFFFFFFFF) {
      out.append(s.data() + i, len);
      i += len;
      continue;
    }
    // Maximal subpart: the lead byte plus the continuation bytes that could still begin a valid
    // sequence (the second byte's range depends on the lead: E0, ED, F0, F4 are narrower).
    const auto c = static_cast<uint8_t>(s[i]);
    int need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t j = i + 1;
    for (int k = 0; k < need && j < s.size(); ++k, ++j) {
      const auto d = static_cast<uint8_t>(s[j]);
      if (d < lo || d > hi) break;
      lo = 0x80, hi = 0xBF;
    }
    out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Construction (the file formats are in tokenizer_files.cpp)

Tokenizer::Tokenizer(std::vector<std::string> ranks,
                     std::vector<std::pair<std::string, int>> specials, std::string name)
    : name_(std::move(name)), ranks_(std::move(ranks)), specials_(std::move(specials)) {
  if (ranks_.size() > size_t(kMaxTokenId) + 1)
    throw VocabError("vocabulary: " + std::to_string(ranks_.size()) + " tokens, more than " +
                     std::to_string(kMaxTokenId + 1));
  // The pair table below splits each token at every byte (quadratic in its length).
  for (size_t id = 0; id < ranks_.size(); ++id)
    if (ranks_[id].size() > kMaxTokenBytes)
      throw VocabError("vocabulary: token " + std::to_string(id) + " has " +
                       std::to_string(ranks_[id].size()) + " bytes, more than " +
                       std::to_string(kMaxTokenBytes));
  size_t cap = 16;
  while (cap < ranks_.size() * 2) cap *= 2;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  offset_.assign(1, 0);
  for (const std::string& t : ranks_) {
    arena_ += t;
    offset_.push_back(static_cast<uint32_t>(arena_.size()));
  }
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  for (size_t id = 0; id < ranks_.size(); ++id) {
    const std::string& t = ranks_[id];
    if (t.empty()) continue;  // a gap in the ranks (allowed by tiktoken's format)
    if (const int old = lookup(t); old >= 0)
      throw VocabError("vocabulary: token '" + show_bytes(t) + "' appears twice (ids " +
                       std::to_string(old) + " and " + std::to_string(id) + ")");
    insert(t, static_cast<int>(id));
    if (t.size() == 1) byte_id_[static_cast<uint8_t>(t[0])] = static_cast<int>(id);
  }
  for (int b = 0; b < 256; ++b)
    if (byte_id_[b] < 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "vocabulary: no token for byte 0x%02x", b);
      throw VocabError(buf);
    }
  // Every way to write a token as (token, token): the pair table that merging consults.
  std::vector<std::pair<uint64_t, int>> found;
  for (size_t id = 0; id < ranks_.size(); ++id) {
    const std::string_view t = ranks_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const int a = lookup(t.substr(0, k)), b = lookup(t.substr(k));
      if (a >= 0 && b >= 0)
        found.emplace_back((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b),
                           static_cast<int>(id));
    }
  }
  size_t pcap = 16;
  while (pcap < found.size() * 2) pcap *= 2;
  pair_slots_.assign(pcap, PairSlot{kNoPair, 0});
  pair_mask_ = pcap - 1;
  for (const auto& [key, id] : found) {
    uint64_t i = pair_hash(key) & pair_mask_;
    while (pair_slots_[i].key != kNoPair) i = (i + 1) & pair_mask_;
    pair_slots_[i] = {key, id};
  }
  n_vocab_ = static_cast<int>(ranks_.size());
  std::unordered_map<std::string, int> special_names;
  for (const auto& [s, id] : specials_) {
    if (s.empty()) throw VocabError("vocabulary: empty special token");
    // Vocabulary files hold one token per line: a line break could not be written back.
    if (s.find_first_of("\r\n") != std::string::npos)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' contains a line break");
    if (!special_names.emplace(s, id).second)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' is given twice");
    if (id < 0 || id > kMaxTokenId)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' has id " +
                       std::to_string(id) + ", outside 0.." + std::to_string(kMaxTokenId));
    if ((static_cast<size_t>(id) < ranks_.size() && !ranks_[id].empty()) ||
        !special_by_id_.emplace(id, s).second)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' reuses id " +
                       std::to_string(id));
    n_vocab_ = std::max(n_vocab_, id + 1);
  }
}

Tokenizer Tokenizer::from_merges(const std::vector<std::pair<int, int>>& merges,
                                 std::vector<std::pair<std::string, int>> specials,
                                 std::string_view byte_order) {
  if (!byte_order.empty() && byte_order.size() != 256)
    throw VocabError("byte order of " + std::to_string(byte_order.size()) + " bytes, not 256");
  std::vector<std::string> ranks(256 + merges.size());
  // A byte given twice leaves another without a token: the constructor refuses both.
  for (int b = 0; b < 256; ++b)
    ranks[b] = std::string(1, byte_order.empty() ? static_cast<char>(b) : byte_order[b]);
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto [a, b] = merges[k];
    if (a < 0 || b < 0 || static_cast<size_t>(a) >= 256 + k || static_cast<size_t>(b) >= 256 + k)
      throw VocabError("merge " + std::to_string(k) + " uses an id not defined before it");
    // Checked before concatenating: merges of merges double a token's length, so a few dozen
    // corrupt lines would otherwise ask for gigabytes.
    if (ranks[a].size() + ranks[b].size() > kMaxTokenBytes)
      throw VocabError("merge " + std::to_string(k) + " makes a token longer than " +
                       std::to_string(kMaxTokenBytes) + " bytes");
    ranks[256 + k] = ranks[a] + ranks[b];
  }
  Tokenizer t(std::move(ranks), std::move(specials), byte_order.empty() ? "trained" : "gpt2");
  t.merges_ = merges;
  return t;
}

std::pair<int, int> Tokenizer::merge_of(int id) const {
  if (id < 256 || static_cast<size_t>(id) >= ranks_.size()) return {-1, -1};
  if (!merges_.empty()) return merges_[id - 256];
  const std::string_view t = ranks_[id];
  for (size_t k = 1; k < t.size(); ++k) {
    const int a = lookup(t.substr(0, k)), b = lookup(t.substr(k));
    if (a >= 0 && b >= 0 && a < id && b < id) return {a, b};
  }
  return {-1, -1};
}

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {
// memcmp(a, b, n) == 0 for short strings, without a library call.
bool bytes_equal(const char* a, const char* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    if (x != y) return false;
  }
  for (; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// A fast 64-bit hash of short byte strings: 8-byte words through a multiply-xorshift mix.
uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
  }
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 32);
}
}  // namespace

namespace {
constexpr uint64_t kTagMask = 0xFFFFFF0000000000ull;
// The slot's tag and length bits for a key (lengths over 255 share the value 255).
uint64_t slot_key(uint64_t h, size_t len) {
  return (h & kTagMask) | (static_cast<uint64_t>(std::min<size_t>(len, 255)) << 32);
}
}  // namespace

void Tokenizer::insert(std::string_view bytes, int id) {
  const uint64_t h = hash_bytes(bytes);
  uint64_t i = h & mask_;
  while (slots_[i] != 0) i = (i + 1) & mask_;
  slots_[i] = slot_key(h, bytes.size()) | static_cast<uint32_t>(id + 1);
}

int Tokenizer::lookup(std::string_view bytes) const { return lookup(bytes, hash_bytes(bytes)); }

int Tokenizer::lookup(std::string_view bytes, uint64_t h) const {
  const uint64_t key = slot_key(h, bytes.size());
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint64_t e = slots_[i];
    if (e == 0) return -1;
    if ((e & 0xFFFFFFFF00000000ull) == key) {
      const int id = static_cast<int>(e & 0xFFFFFFFFu) - 1;
      const uint32_t at = offset_[id], len = offset_[id + 1] - at;
      if (len == bytes.size() && bytes_equal(arena_.data() + at, bytes.data(), len)) return id;
    }
  }
}

int Tokenizer::pair_rank(int a, int b) const {
  const uint64_t key = (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  for (uint64_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& e = pair_slots_[i];
    if (e.key == key) return e.id;
    if (e.key == kNoPair) return INT_MAX;
  }
}

// Short chunks: tiktoken's own loop (find the lowest-ranked pair, join it, update the two
// neighbouring ranks). Quadratic in the chunk length, but fastest for words.
void Tokenizer::merge_small(std::string_view chunk, std::vector<int>& out) const {
  const size_t n = chunk.size();
  int ids[64], rank[64];
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[static_cast<uint8_t>(chunk[i])];
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(ids[i], ids[i + 1]);
  size_t m = n;
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;  // strict: leftmost wins ties
    if (rank[best] == INT_MAX) break;
    ids[best] = rank[best];
    for (size_t i = best + 1; i + 1 < m; ++i) ids[i] = ids[i + 1], rank[i] = rank[i + 1];
    --m;
    if (best + 1 < m) rank[best] = pair_rank(ids[best], ids[best + 1]);
    if (best > 0) rank[best - 1] = pair_rank(ids[best - 1], ids[best]);
  }
  out.insert(out.end(), ids, ids + m);
}

namespace {
// The leftmost minimum of an array of ranks under point updates, in O(log n) each: the ranks in
// blocks of 16 (one cache line) under a binary tree of the blocks' minima, about 4.5 bytes per
// rank in all (a heap of (rank, position) entries took ~40).
class MinTree {
 public:
  static constexpr size_t kBlock = 16;
  explicit MinTree(std::vector<int> ranks) : leaf_(std::move(ranks)) {
    const size_t blocks = (leaf_.size() + kBlock - 1) / kBlock;
    leaf_.resize(blocks * kBlock, INT_MAX);
    while (top_ < blocks) top_ *= 2;
    node_.assign(2 * top_, INT_MAX);
    for (size_t b = 0; b < blocks; ++b) node_[top_ + b] = block_min(b);
    for (size_t v = top_ - 1; v >= 1; --v) node_[v] = std::min(node_[2 * v], node_[2 * v + 1]);
  }
  int min() const { return node_[1]; }
  // Down the tree, always into the left child when it holds the minimum: ties go left.
  size_t argmin() const {
    size_t v = 1;
    while (v < top_) v = 2 * v + (node_[2 * v] != node_[v]);
    size_t i = (v - top_) * kBlock;
    while (leaf_[i] != node_[1]) ++i;
    return i;
  }
  void set(size_t i, int rank) {
    leaf_[i] = rank;
    size_t v = top_ + i / kBlock;
    node_[v] = block_min(i / kBlock);
    for (v /= 2; v >= 1; v /= 2) {
      const int m = std::min(node_[2 * v], node_[2 * v + 1]);
      if (node_[v] == m) break;  // nothing above changes either
      node_[v] = m;
    }
  }

 private:
  int block_min(size_t b) const {
    int m = INT_MAX;
    for (size_t k = 0; k < kBlock; ++k) m = std::min(m, leaf_[b * kBlock + k]);
    return m;
  }
  std::vector<int> leaf_;
  std::vector<int> node_;  // node_[1] the root; node_[top_ + b] block b's minimum
  size_t top_ = 1;
};
}  // namespace

// Long chunks: tiktoken's rule with the pairs' ranks in a MinTree, so each join costs O(log n)
// and memory is ~9 bytes per chunk byte. A part is known by its first byte i: ids[i] is its token
// (-1 at the part's other bytes, so it ends at i + the token's length) and the tree's rank at i
// is that of joining it with the next part (INT_MAX: no such token, or no next part).
void Tokenizer::merge_tree(std::string_view chunk, std::vector<int>& out) const {
  if (chunk.size() > size_t(INT_MAX))
    throw std::length_error("encode: a pre-tokenized chunk of " + std::to_string(chunk.size()) +
                            " bytes, more than " + std::to_string(INT_MAX));
  const size_t n = chunk.size();
  std::vector<int> ids(n), rank(n, INT_MAX);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[static_cast<uint8_t>(chunk[i])];
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(ids[i], ids[i + 1]);
  MinTree tree(std::move(rank));
  const auto end_of = [&](size_t i) { return i + offset_[ids[i] + 1] - offset_[ids[i]]; };
  while (tree.min() != INT_MAX) {
    const size_t i = tree.argmin(), j = end_of(i);  // join part j into part i
    ids[i] = tree.min();
    ids[j] = -1;
    tree.set(j, INT_MAX);
    const size_t k = end_of(i);
    tree.set(i, k < n ? pair_rank(ids[i], ids[k]) : INT_MAX);
    if (i == 0) continue;
    size_t h = i - 1;  // the part before: at most a token's length back
    while (ids[h] < 0) --h;
    tree.set(h, pair_rank(ids[h], ids[i]));
  }
  for (size_t i = 0; i < n; i = end_of(i)) out.push_back(ids[i]);
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<int>& out) const {
  if (chunk.empty()) return;
  // A chunk that is a token is used as is, even if merging would not build it (tiktoken does).
  if (const int id = lookup(chunk); id >= 0) {
    out.push_back(id);
    return;
  }
  merge_chunk(chunk, out);
}

void Tokenizer::merge_chunk(std::string_view chunk, std::vector<int>& out) const {
  if (chunk.size() <= std::min<size_t>(tree_threshold_, 64)) {
    merge_small(chunk, out);
  } else {
    merge_tree(chunk, out);
  }
}

std::vector<int> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int> out;
  out.reserve(text.size() / 3);
  // Repeated chunks (the same words again and again) are answered from a small direct-mapped
  // cache before the token table: a colliding chunk evicts the old one, nothing is allocated per
  // chunk, and the hot words stay in L1/L2. A one-token chunk keeps its id in the entry; a longer
  // one points at its first encoding in `out`.
  struct Cached {
    const char* p = nullptr;
    uint32_t len = 0, n = 0;
    uint32_t at = 0;  // n > 1: out[at .. at + n)
    int id = -1;      // n == 1
  };
  size_t cap = 16;
  while (cap < 4096 && cap * 16 < text.size()) cap *= 2;
  std::vector<Cached> cache(cap);
  pretokenize_gpt2(text, [&](std::string_view chunk) {
    const uint64_t h = hash_bytes(chunk);
    Cached& c = cache[(h >> 40) & (cap - 1)];  // other bits than the token table's index
    if (c.len == chunk.size() && c.p && bytes_equal(c.p, chunk.data(), c.len)) {
      if (c.n == 1) {
        out.push_back(c.id);
      } else {
        for (uint32_t k = 0; k < c.n; ++k) out.push_back(out[c.at + k]);
      }
      return;
    }
    if (chunk.size() >= UINT32_MAX || out.size() >= UINT32_MAX) {  // too big for an entry
      encode_chunk(chunk, out);
      return;
    }
    const auto len = static_cast<uint32_t>(chunk.size());
    // A chunk that is a token is used as is (tiktoken does the same).
    if (const int id = lookup(chunk, h); id >= 0) {
      out.push_back(id);
      c = {chunk.data(), len, 1, 0, id};
      return;
    }
    const size_t at = out.size();
    merge_chunk(chunk, out);
    const auto n = static_cast<uint32_t>(out.size() - at);
    c = {chunk.data(), len, n, static_cast<uint32_t>(at), n == 1 ? out[at] : -1};
  });
  return out;
}

std::vector<int> Tokenizer::encode(std::string_view text, const SpecialSet& allowed,
                                   const SpecialSet& disallowed) const {
  std::vector<const std::pair<std::string, int>*> allow;
  const auto listed = [](const SpecialSet& set, const std::string& s) {
    return set.all || std::find(set.names.begin(), set.names.end(), s) != set.names.end();
  };
  for (const auto& name : allowed.names)
    if (std::none_of(specials_.begin(), specials_.end(),
                     [&](auto& sp) { return sp.first == name; }))
      throw std::invalid_argument("encode: '" + name + "' is not a special token of " + name_);
  for (const auto& sp : specials_) {
    if (listed(allowed, sp.first)) {
      allow.push_back(&sp);
    } else if (listed(disallowed, sp.first) && text.find(sp.first) != std::string_view::npos) {
      throw std::invalid_argument(
          "encode: the text contains the special token '" + sp.first +
          "', which is disallowed; allow it to encode it as a special token, or use "
          "encode_ordinary to encode it as ordinary text");
    }
  }
  if (allow.empty()) return encode_ordinary(text);
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    // The earliest allowed special token (the longest one if several start there).
    size_t best_at = std::string_view::npos;
    const std::pair<std::string, int>* best = nullptr;
    for (const auto* sp : allow) {
      const size_t at = text.find(sp->first, start);
      if (at < best_at ||
          (at == best_at && at != std::string_view::npos && sp->first.size() > best->first.size()))
        best_at = at, best = sp;
    }
    const std::vector<int> part = encode_ordinary(text.substr(start, best_at - start));
    out.insert(out.end(), part.begin(), part.end());
    if (!best) break;
    out.push_back(best->second);
    start = best_at + best->first.size();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding

const std::string& Tokenizer::token_bytes(int id) const {
  if (id >= 0 && static_cast<size_t>(id) < ranks_.size() && !ranks_[id].empty()) return ranks_[id];
  if (const auto it = special_by_id_.find(id); it != special_by_id_.end()) return it->second;
  throw std::out_of_range("decode: unknown token id " + std::to_string(id) + " (" + name_ +
                          " has ids 0.." + std::to_string(n_vocab_ - 1) + ")");
}

std::string Tokenizer::decode_bytes(std::span<const int> ids) const {
  std::string out;
  for (const int id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  return utf8_replace_invalid(decode_bytes(ids));
}

}  // namespace tg::data
