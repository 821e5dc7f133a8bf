// The tokenizer's file formats (see bpe_tokenizer.h): OpenAI's encoder.json + vocab.bpe,
// tiktoken's rank files, and tapegrad's own merges file; reading checks every line and names
// FILE:LINE in its errors, writing is atomic.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/file_io.h"
#include "core/json.h"
#include "data/bpe_tokenizer.h"
#include "data/pretokenize.h"

namespace tg::data {

namespace {

// GPT-2's single-byte ranks follow bytes_to_unicode's list order: printable bytes first.
std::vector<uint8_t> gpt2_byte_order() {
  std::vector<uint8_t> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int b = 0; b < 256; ++b)
      if ((gpt2_byte_to_unicode(static_cast<uint8_t>(b)) == static_cast<uint32_t>(b)) ==
          (pass == 0))
        order.push_back(static_cast<uint8_t>(b));
  return order;
}

// GPT-2's encoder.json is 1 MB; no vocabulary file comes near this.
constexpr uint64_t kMaxVocabFileBytes = uint64_t(256) << 20;

std::string read_file(const std::string& path) {
  try {
    return read_regular_file(path, kMaxVocabFileBytes, "vocabulary");
  } catch (const std::runtime_error& e) {
    throw VocabError(e.what());
  }
}

[[noreturn]] void fail(const std::string& path, size_t line, const std::string& why) {
  throw VocabError(path + ":" + std::to_string(line) + ": " + why);
}

// Inverse of bytes_to_unicode; -1 for code points it never produces.
int unicode_to_byte(uint32_t cp) {
  static const auto* table = [] {
    auto* t = new std::vector<int>(324, -1);
    for (int b = 0; b < 256; ++b) (*t)[gpt2_byte_to_unicode(static_cast<uint8_t>(b))] = b;
    return t;
  }();
  return cp < table->size() ? (*table)[cp] : -1;
}

// A token spelled in bytes_to_unicode characters -> its bytes; "" if some character is not one.
std::string gpt2_unmap(const std::vector<uint32_t>& cps) {
  std::string out;
  for (const uint32_t cp : cps) {
    const int b = unicode_to_byte(cp);
    if (b < 0) return {};
    out += static_cast<char>(b);
  }
  return out;
}

std::vector<uint32_t> utf8_to_cps(const std::string& path, size_t line, std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = utf8_decode(s, i, cp);
    if (cp == 0xFFFFFFFF) fail(path, line, "invalid UTF-8");
    cps.push_back(cp);
    i += len;
  }
  return cps;
}

}  // namespace

namespace {

// vocab.bpe: "#version: 0.2", then one merge "left right" per line; merge k has rank 256 + k.
std::vector<std::string> read_gpt2_merges(const std::string& vocab_bpe_path) {
  const std::string bpe = read_file(vocab_bpe_path);
  std::vector<std::string> ranks;
  for (const uint8_t b : gpt2_byte_order()) ranks.emplace_back(1, static_cast<char>(b));
  std::unordered_map<std::string, int> known;
  for (size_t id = 0; id < ranks.size(); ++id) known.emplace(ranks[id], static_cast<int>(id));
  size_t line_no = 0, pos = 0;
  while (pos < bpe.size()) {
    size_t end = bpe.find('\n', pos);
    if (end == std::string::npos) end = bpe.size();
    std::string_view line(bpe.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      if (line.rfind("#version", 0) != 0)
        fail(vocab_bpe_path, 1,
             "expected the header '#version: 0.2', found '" + show_bytes(line) + "'");
      continue;
    }
    if (line.empty()) {
      if (pos >= bpe.size()) break;  // the final newline
      fail(vocab_bpe_path, line_no, "empty line");
    }
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      fail(vocab_bpe_path, line_no,
           "expected two tokens separated by one space, found '" + show_bytes(line) + "'");
    const std::string a = gpt2_unmap(utf8_to_cps(vocab_bpe_path, line_no, line.substr(0, sp)));
    const std::string b = gpt2_unmap(utf8_to_cps(vocab_bpe_path, line_no, line.substr(sp + 1)));
    if (a.empty() || b.empty())
      fail(vocab_bpe_path, line_no, "a character outside GPT-2's byte-to-unicode alphabet");
    if (!known.count(a) || !known.count(b))
      fail(vocab_bpe_path, line_no,
           "merge of '" + show_bytes(known.count(a) ? b : a) + "', which no earlier line defines");
    std::string ab = a + b;
    if (!known.emplace(ab, static_cast<int>(ranks.size())).second)
      fail(vocab_bpe_path, line_no, "merge result '" + show_bytes(ab) + "' already defined");
    ranks.push_back(std::move(ab));
  }
  if (ranks.size() == 256) fail(vocab_bpe_path, line_no, "no merges");
  return ranks;
}

// encoder.json, one object of "token": id, must agree with the merges' ranks (tiktoken asserts
// the same); ids past them are special tokens (GPT-2: <|endoftext|> = 50256), returned.
std::vector<std::pair<std::string, int>> read_gpt2_encoder(const std::string& encoder_json_path,
                                                           const std::vector<std::string>& ranks) {
  const std::string js = read_file(encoder_json_path);
  const auto fail_at = [&](json::Pos p, const std::string& why) {
    throw VocabError(encoder_json_path + ":" + std::to_string(p.line) + ":" +
                     std::to_string(p.col) + ": " + why);
  };
  json::Value enc;
  try {
    enc = json::parse(js);
  } catch (const json::Error& e) {
    throw VocabError(encoder_json_path + ":" + e.what());
  }
  if (enc.kind != json::Value::Kind::Object)
    fail_at(enc.pos, "expected an object of \"token\": id");
  std::vector<std::pair<std::string, int>> specials;
  std::vector<bool> seen(ranks.size(), false);
  for (size_t k = 0; k < enc.keys.size(); ++k) {
    const std::string& token = enc.keys[k];
    const json::Value& v = enc.values[k];
    int64_t id = -1;
    try {
      id = v.as_int();
    } catch (const json::Error&) {
      fail_at(v.pos, "expected an integer id");
    }
    if (id >= 0 && static_cast<size_t>(id) < ranks.size()) {
      const std::string bytes = gpt2_unmap(utf8_to_cps(encoder_json_path, v.pos.line, token));
      if (bytes != ranks[id])
        fail_at(v.pos, "token id " + std::to_string(id) + " is '" + show_bytes(bytes) +
                           "' here but vocab.bpe gives rank " + std::to_string(id) + " to '" +
                           show_bytes(ranks[id]) + "'");
      seen[id] = true;
    } else if (id >= 0 && id <= INT_MAX) {
      specials.emplace_back(token, static_cast<int>(id));
    } else {
      fail_at(v.pos, "negative or huge id " + std::to_string(id));
    }
  }
  for (size_t id = 0; id < seen.size(); ++id)
    if (!seen[id])
      fail_at(enc.pos, "no entry for id " + std::to_string(id) + " ('" + show_bytes(ranks[id]) +
                           "'): encoder.json and vocab.bpe are not from the same release");
  return specials;
}

}  // namespace

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json_path,
                                     const std::string& vocab_bpe_path) {
  std::vector<std::string> ranks = read_gpt2_merges(vocab_bpe_path);
  std::vector<std::pair<std::string, int>> specials = read_gpt2_encoder(encoder_json_path, ranks);
  return Tokenizer(std::move(ranks), std::move(specials), "gpt2");
}

std::string default_gpt2_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TAPEGRAD_GPT2_DIR"); env && *env) return env;
  if (fs::exists("third_party/gpt2/encoder.json")) return "third_party/gpt2";
#ifdef TAPEGRAD_SOURCE_ROOT
  return std::string(TAPEGRAD_SOURCE_ROOT) + "/third_party/gpt2";
#else
  return "third_party/gpt2";
#endif
}

Tokenizer Tokenizer::gpt2(const std::string& dir_in) {
  const std::string dir = dir_in.empty() ? default_gpt2_dir() : dir_in;
  const std::string enc = dir + "/encoder.json", bpe = dir + "/vocab.bpe";
  for (const auto& p : {enc, bpe})
    if (!std::filesystem::exists(p))
      throw VocabError(p +
                       ": no such file (HINT: run `make gpt2` to fetch GPT-2's encoder.json and "
                       "vocab.bpe, or set TAPEGRAD_GPT2_DIR)");
  return from_gpt2_files(enc, bpe);
}

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += kB64[(v >> (6 * k)) & 63];
  }
  if (const size_t rest = in.size() - i; rest > 0) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// false on anything that is not canonical padded base64.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  uint32_t acc = 0;
  int pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    int v;
    if (c == '=') {
      if (i + 2 < in.size()) return false;
      ++pad, v = 0;
    } else {
      if (pad) return false;
      const char* p = std::char_traits<char>::find(kB64, 64, c);
      if (!p) return false;
      v = static_cast<int>(p - kB64);
    }
    acc = (acc << 6) | v;
    if (i % 4 == 3) {
      out += static_cast<char>(acc >> 16);
      if (pad < 2) out += static_cast<char>((acc >> 8) & 0xFF);
      if (pad < 1) out += static_cast<char>(acc & 0xFF);
      acc = 0;
    }
  }
  return true;
}

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find('\n', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view l = s.substr(pos, end - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.push_back(l);
    pos = end + 1;
  }
  return lines;
}

bool parse_int(std::string_view s, long long& v) {
  if (s.empty() || s.size() > 10) return false;
  v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return v <= INT_MAX;
}

}  // namespace

Tokenizer Tokenizer::from_tiktoken_file(const std::string& path,
                                        std::vector<std::pair<std::string, int>> specials) {
  const std::string text = read_file(path);
  std::vector<std::string> ranks;
  const auto lines = split_lines(text);
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string_view line = lines[k];
    if (line.empty()) continue;  // tiktoken skips blank lines
    const size_t sp = line.find(' ');
    long long rank;
    std::string bytes;
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      fail(path, k + 1, "expected 'base64 rank', found '" + show_bytes(line) + "'");
    if (!base64_decode(line.substr(0, sp), bytes))
      fail(path, k + 1, "bad base64 '" + show_bytes(line.substr(0, sp)) + "'");
    if (!parse_int(line.substr(sp + 1), rank))
      fail(path, k + 1, "bad rank '" + show_bytes(line.substr(sp + 1)) + "' (not a whole number)");
    if (rank > kMaxTokenId)
      fail(path, k + 1,
           "rank " + std::to_string(rank) + " is above the largest token id we take, " +
               std::to_string(kMaxTokenId));
    if (static_cast<size_t>(rank) >= ranks.size()) ranks.resize(rank + 1);
    if (!ranks[rank].empty()) fail(path, k + 1, "rank " + std::to_string(rank) + " given twice");
    ranks[rank] = std::move(bytes);
  }
  if (ranks.empty()) throw VocabError(path + ": empty rank file");
  try {
    return Tokenizer(std::move(ranks), std::move(specials), "tiktoken");
  } catch (const VocabError& e) {
    throw VocabError(path + ": " + e.what());
  }
}

// Our format (v1), documented in data/README.md:
//   tapegrad-bpe v1
//   pattern gpt2
//   merges N
//   <a> <b>          N lines; line k makes id 256 + k from ids a and b
//   specials M
//   <id> <name>      M lines
Tokenizer Tokenizer::from_tapegrad_file(const std::string& path) {
  const std::string text = read_file(path);
  const auto lines = split_lines(text);
  size_t k = 0;
  const auto next = [&](const char* what) -> std::string_view {
    if (k >= lines.size())
      fail(path, k + 1, std::string("unexpected end of file, expected ") + what);
    return lines[k++];
  };
  const auto count = [&](std::string_view line, std::string_view key) {
    long long n;
    if (line.substr(0, key.size()) != key || line.size() <= key.size() || line[key.size()] != ' ' ||
        !parse_int(line.substr(key.size() + 1), n))
      fail(path, k,
           "expected '" + std::string(key) + " <count>', found '" + show_bytes(line) + "'");
    return static_cast<size_t>(n);
  };
  const std::string_view header = next("the header");
  if (header != "tapegrad-bpe v1")
    fail(path, k,
         header.rfind("tapegrad-bpe ", 0) == 0
             ? "unsupported version '" + show_bytes(header) + "' (this build reads v1)"
             : "not a tapegrad-bpe file (first line '" + show_bytes(header) + "')");
  const std::string_view pattern = next("'pattern gpt2'");
  if (pattern != "pattern gpt2")
    fail(path, k,
         "expected 'pattern gpt2' (the only pattern supported), found '" + show_bytes(pattern) +
             "'");
  const size_t n_merges = count(next("'merges N'"), "merges");
  std::vector<std::pair<int, int>> merges;
  for (size_t m = 0; m < n_merges; ++m) {
    const std::string_view line = next("a merge line");
    const size_t sp = line.find(' ');
    long long a, b;
    if (sp == std::string_view::npos || !parse_int(line.substr(0, sp), a) ||
        !parse_int(line.substr(sp + 1), b))
      fail(path, k, "expected a merge '<id> <id>', found '" + show_bytes(line) + "'");
    if (a >= static_cast<long long>(256 + m) || b >= static_cast<long long>(256 + m))
      fail(path, k,
           "merge uses id " + std::to_string(std::max(a, b)) +
               ", not defined before this line (it makes id " + std::to_string(256 + m) + ")");
    merges.emplace_back(static_cast<int>(a), static_cast<int>(b));
  }
  const size_t n_specials = count(next("'specials M'"), "specials");
  std::vector<std::pair<std::string, int>> specials;
  for (size_t m = 0; m < n_specials; ++m) {
    const std::string_view line = next("a special token line");
    const size_t sp = line.find(' ');
    long long id;
    if (sp == std::string_view::npos || !parse_int(line.substr(0, sp), id) || sp + 1 >= line.size())
      fail(path, k, "expected a special token '<id> <name>', found '" + show_bytes(line) + "'");
    specials.emplace_back(std::string(line.substr(sp + 1)), static_cast<int>(id));
  }
  while (k < lines.size())
    if (!lines[k++].empty()) fail(path, k, "unexpected text after the special tokens");
  try {
    return from_merges(merges, std::move(specials));
  } catch (const VocabError& e) {
    throw VocabError(path + ": " + e.what());
  }
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string text = read_file(path);
  if (text.rfind("tapegrad-bpe", 0) == 0) return from_tapegrad_file(path);
  return from_tiktoken_file(path);
}

void Tokenizer::save(const std::string& path) const {
  std::string out =
      "tapegrad-bpe v1\npattern gpt2\nmerges " + std::to_string(ranks_.size() - 256) + "\n";
  for (int b = 0; b < 256; ++b)
    if (ranks_[b] != std::string(1, static_cast<char>(b)))
      throw std::runtime_error("save: ids 0..255 are not bytes 0..255 in this vocabulary (" +
                               name_ + "); write it with save_tiktoken instead");
  for (size_t id = 256; id < ranks_.size(); ++id) {
    const auto [a, b] = merge_of(static_cast<int>(id));
    if (a < 0)
      throw std::runtime_error("save: token " + std::to_string(id) +
                               " is not a merge of two earlier tokens; use save_tiktoken");
    out += std::to_string(a) + " " + std::to_string(b) + "\n";
  }
  out += "specials " + std::to_string(specials_.size()) + "\n";
  for (const auto& [s, id] : specials_) out += std::to_string(id) + " " + s + "\n";
  write_file_atomic(path, out);
}

void Tokenizer::save_tiktoken(const std::string& path) const {
  std::string out;
  for (size_t id = 0; id < ranks_.size(); ++id)
    if (!ranks_[id].empty()) out += base64_encode(ranks_[id]) + " " + std::to_string(id) + "\n";
  write_file_atomic(path, out);
}

}  // namespace tg::data
