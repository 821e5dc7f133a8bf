// §2.5 (byte pair encoding): a byte-level BPE tokenizer that encodes exactly like tiktoken's
// "gpt2" encoding, loads OpenAI's encoder.json + vocab.bpe or tiktoken rank files, and also
// runs vocabularies trained by bpe_train.h.
// Python references: tiktoken (src/lib.rs byte_pair_merge, tiktoken/load.py), minbpe/regex.py,
// GPT-2's encoder.py (bytes_to_unicode).
//
// Merge rule (tiktoken's): inside one pre-tokenized chunk, repeatedly join the adjacent pair whose
// concatenated bytes have the lowest rank (= token id), leftmost on ties; a chunk that is itself a
// token is emitted directly. Input is a byte string; see data/README.md for how that differs from
// tiktoken's str API.
//
// Not here: other encodings' patterns (cl100k, o200k), training (bpe_train.h), streaming decode,
// thread pools, normalisation or lower-casing.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/text.h"  // show_bytes, utf8_decode

namespace tg::data {

// A vocabulary file that does not parse; what() is "PATH:LINE: reason".
struct VocabError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// tiktoken's allowed_special / disallowed_special arguments: either "all" or a list of names.
struct SpecialSet {
  bool all = false;
  std::vector<std::string> names;
  static SpecialSet All() { return {true, {}}; }
  static SpecialSet None() { return {}; }
  static SpecialSet Of(std::vector<std::string> n) { return {false, std::move(n)}; }
};

// GPT-2's bytes_to_unicode(): byte b is written as this code point in encoder.json / vocab.bpe.
uint32_t gpt2_byte_to_unicode(uint8_t b);

// Replaces invalid UTF-8 with U+FFFD, one per maximal invalid subpart (Unicode's recommended
// practice; what Python's errors="replace" and TextDecoder do).
std::string utf8_replace_invalid(std::string_view bytes);

// Ids above this are refused when a vocabulary is built or read (a corrupt rank or id must not
// size a table of 2^31 entries); o200k, the largest OpenAI encoding, has about 200k.
inline constexpr int kMaxTokenId = (1 << 22) - 1;
// Longer tokens are refused likewise (GPT-2's longest is 128 bytes).
inline constexpr size_t kMaxTokenBytes = 4096;

class Tokenizer {
 public:
  // ranks[id] = the token's bytes; every single byte must be a token. specials = (name, id).
  Tokenizer(std::vector<std::string> ranks, std::vector<std::pair<std::string, int>> specials,
            std::string name = "custom");

  // OpenAI's GPT-2 release files; throws VocabError naming the file and line.
  static Tokenizer from_gpt2_files(const std::string& encoder_json_path,
                                   const std::string& vocab_bpe_path);
  // encoder.json + vocab.bpe from dir (default: see default_gpt2_dir()).
  static Tokenizer gpt2(const std::string& dir = "");
  // tiktoken's rank format: "base64(token) rank" per line.
  static Tokenizer from_tiktoken_file(const std::string& path,
                                      std::vector<std::pair<std::string, int>> specials = {});
  // Our versioned format (bpe_train.h writes it; format in data/README.md).
  static Tokenizer from_tapegrad_file(const std::string& path);
  // ids 0..255 are bytes 0..255; merges[k] = (a, b) makes id 256 + k (what training returns).
  // byte_order, when given, holds the byte of each of ids 0..255 instead (GPT-2's files put them
  // in bytes_to_unicode's order); the tokenizer is then named gpt2.
  static Tokenizer from_merges(const std::vector<std::pair<int, int>>& merges,
                               std::vector<std::pair<std::string, int>> specials = {},
                               std::string_view byte_order = {});
  // Either of the two formats above, by the first line.
  static Tokenizer load(const std::string& path);

  // Writes our format (needs ids 0..255 = bytes 0..255 and every later token a merge of two
  // earlier ones, as training produces) or tiktoken's rank format.
  void save(const std::string& path) const;
  void save_tiktoken(const std::string& path) const;

  // Like tiktoken: throws std::invalid_argument if the text contains a disallowed special token
  // (by default every special not in `allowed`); allowed specials become their ids.
  std::vector<int> encode(std::string_view text, const SpecialSet& allowed = SpecialSet::None(),
                          const SpecialSet& disallowed = SpecialSet::All()) const;
  // Special tokens are ordinary text here.
  std::vector<int> encode_ordinary(std::string_view text) const;
  // BPE of a single chunk (no pre-tokenization); appends to out.
  void encode_chunk(std::string_view chunk, std::vector<int>& out) const;

  // Exact bytes; throws std::out_of_range naming the first unknown id.
  std::string decode_bytes(std::span<const int> ids) const;
  // Bytes with invalid UTF-8 replaced by U+FFFD (tiktoken's decode, errors="replace").
  std::string decode(std::span<const int> ids) const;
  // Bytes of one token (ordinary or special); throws std::out_of_range.
  const std::string& token_bytes(int id) const;

  int n_vocab() const { return n_vocab_; }  // max id + 1, specials included
  int n_mergeable() const { return static_cast<int>(ranks_.size()); }
  const std::vector<std::pair<std::string, int>>& specials() const { return specials_; }
  const std::string& name() const { return name_; }
  // Merge pair (a, b) that forms each token >= 256, or (-1, -1); used by save().
  std::pair<int, int> merge_of(int id) const;

  // For tests: chunks longer than n (at most 64) take the tree merge, the others tiktoken's scan;
  // n = 0 forces the tree merge, 64 the scan wherever it can run, to compare both paths.
  void set_tree_threshold(size_t n) { tree_threshold_ = n; }

 private:
  void merge_chunk(std::string_view chunk, std::vector<int>& out) const;  // no whole-token check
  void merge_small(std::string_view chunk, std::vector<int>& out) const;
  void merge_tree(std::string_view chunk, std::vector<int>& out) const;
  int pair_rank(int a, int b) const;
  int lookup(std::string_view bytes) const;  // -1 if not a token
  int lookup(std::string_view bytes, uint64_t hash) const;

  void insert(std::string_view bytes, int id);

  std::string name_;
  std::vector<std::string> ranks_;  // id -> bytes
  // bytes -> id: open addressing, linear probing; a slot is (hash tag: 24 bits, length: 8 bits,
  // id + 1: 32 bits), 0 = empty. Flat slots keep the hot lookup in one cache line (a node-based map
  // was the encoder's main cost).
  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
  // All token bytes back to back (token id at arena_[offset_[id] .. offset_[id + 1])): the
  // compare after a tag match reads this compact buffer, not scattered std::strings.
  std::string arena_;
  std::vector<uint32_t> offset_;
  // (left id << 32 | right id) -> id of the concatenation; flat, linear probing.
  struct PairSlot {
    uint64_t key;
    int id;
  };
  static constexpr uint64_t kNoPair = ~0ull;  // ids are < 2^31, so no real key is all ones
  static uint64_t pair_hash(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 29);
  }
  std::vector<PairSlot> pair_slots_;
  uint64_t pair_mask_ = 0;
  int byte_id_[256];
  std::vector<std::pair<std::string, int>> specials_;
  std::vector<std::pair<int, int>> merges_;  // from from_merges(), for save()
  std::unordered_map<int, std::string> special_by_id_;
  int n_vocab_ = 0;
  size_t tree_threshold_ = 24;
};

// Where gpt2() looks when dir is empty: $TAPEGRAD_GPT2_DIR, then ./third_party/gpt2, then the
// source tree's third_party/gpt2 (compiled in).
std::string default_gpt2_dir();

}  // namespace tg::data
