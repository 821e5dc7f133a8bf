// Byte-level BPE, tiktoken-exact; see bpe_tokenizer.h.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>

#include "core/file_io.h"
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

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw VocabError(path + ": cannot open for reading" +
                     (std::filesystem::exists(path) ? "" : " (no such file)"));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw VocabError(path + ": read error");
  return ss.str();
}

[[noreturn]] void fail(const std::string& path, size_t line, const std::string& why) {
  throw VocabError(path + ":" + std::to_string(line) + ": " + why);
}

}  // namespace

// Printable form of a token for messages: C escapes for control and non-ASCII bytes.
std::string show_bytes(std::string_view s) {
  std::string out;
  for (const char ch : s.substr(0, 40)) {
    const auto c = static_cast<uint8_t>(ch);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += ch;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return s.size() > 40 ? out + "..." : out;
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
// Construction and loading

Tokenizer::Tokenizer(std::vector<std::string> ranks,
                     std::vector<std::pair<std::string, int>> specials, std::string name)
    : name_(std::move(name)), ranks_(std::move(ranks)), specials_(std::move(specials)) {
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
  for (const auto& [s, id] : specials_) {
    if (s.empty()) throw VocabError("vocabulary: empty special token");
    if (id < 0)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' has negative id");
    if ((static_cast<size_t>(id) < ranks_.size() && !ranks_[id].empty()) ||
        !special_by_id_.emplace(id, s).second)
      throw VocabError("vocabulary: special token '" + show_bytes(s) + "' reuses id " +
                       std::to_string(id));
    n_vocab_ = std::max(n_vocab_, id + 1);
  }
}

Tokenizer Tokenizer::from_merges(const std::vector<std::pair<int, int>>& merges,
                                 std::vector<std::pair<std::string, int>> specials) {
  std::vector<std::string> ranks(256 + merges.size());
  for (int b = 0; b < 256; ++b) ranks[b] = std::string(1, static_cast<char>(b));
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto [a, b] = merges[k];
    if (a < 0 || b < 0 || static_cast<size_t>(a) >= 256 + k || static_cast<size_t>(b) >= 256 + k)
      throw VocabError("merge " + std::to_string(k) + " uses an id not defined before it");
    ranks[256 + k] = ranks[a] + ranks[b];
  }
  Tokenizer t(std::move(ranks), std::move(specials), "trained");
  t.merges_ = merges;
  return t;
}

namespace {

// A small JSON reader for encoder.json: one object of "string": integer.
struct JsonReader {
  const std::string& path;
  const std::string& s;
  size_t i = 0;

  [[noreturn]] void error(const std::string& why) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i && k < s.size(); ++k) {
      if (s[k] == '\n') {
        ++line, col = 1;
      } else {
        ++col;
      }
    }
    throw VocabError(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + why);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  void expect(char c) {
    ws();
    if (i >= s.size()) error(std::string("unexpected end of file, expected '") + c + "'");
    if (s[i] != c)
      error(std::string("expected '") + c + "', found '" + show_bytes(s.substr(i, 1)) + "'");
    ++i;
  }
  unsigned hex4() {
    if (i + 4 > s.size()) error("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        --i;
        error("bad hex digit in \\u escape");
      }
    }
    return v;
  }
  // Returns the string's code points.
  std::vector<uint32_t> str() {
    expect('"');
    std::vector<uint32_t> cps;
    while (true) {
      if (i >= s.size()) error("unterminated string");
      const char c = s[i];
      if (c == '"') {
        ++i;
        return cps;
      }
      if (c == '\\') {
        if (++i >= s.size()) error("unterminated escape");
        const char e = s[i++];
        switch (e) {
          case '"':
            cps.push_back('"');
            break;
          case '\\':
            cps.push_back('\\');
            break;
          case '/':
            cps.push_back('/');
            break;
          case 'b':
            cps.push_back('\b');
            break;
          case 'f':
            cps.push_back('\f');
            break;
          case 'n':
            cps.push_back('\n');
            break;
          case 'r':
            cps.push_back('\r');
            break;
          case 't':
            cps.push_back('\t');
            break;
          case 'u': {
            uint32_t v = hex4();
            if (v >= 0xD800 && v < 0xDC00 && i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u') {
              i += 2;
              const uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate in \\u escape");
              v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            }
            cps.push_back(v);
            break;
          }
          default:
            --i, error(std::string("unknown escape \\") + e);
        }
        continue;
      }
      if (static_cast<uint8_t>(c) < 0x20) error("control character inside a string");
      uint32_t cp;
      const int len = utf8_decode(s, i, cp);
      if (cp == 0xFFFFFFFF) error("invalid UTF-8");
      cps.push_back(cp);
      i += len;
    }
  }
  long long integer() {
    ws();
    const size_t start = i;
    if (i < s.size() && s[i] == '-') ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start || (i == start + 1 && s[start] == '-')) error("expected an integer id");
    if (i - start > 10) error("id out of range");
    return std::stoll(s.substr(start, i - start));
  }
};

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

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json_path,
                                     const std::string& vocab_bpe_path) {
  // vocab.bpe: "#version: 0.2", then one merge "left right" per line; merge k has rank 256 + k.
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

  // encoder.json must agree with those ranks (tiktoken asserts the same); ids past them are
  // special tokens (GPT-2: <|endoftext|> = 50256).
  const std::string js = read_file(encoder_json_path);
  JsonReader r{encoder_json_path, js};
  std::vector<std::pair<std::string, int>> specials;
  std::vector<bool> seen(ranks.size(), false);
  r.expect('{');
  r.ws();
  bool first = true;
  while (true) {
    r.ws();
    if (r.i < js.size() && js[r.i] == '}') {
      ++r.i;
      break;
    }
    if (!first) r.expect(',');
    first = false;
    const size_t key_at = r.i;
    const std::vector<uint32_t> cps = r.str();
    r.expect(':');
    const long long id = r.integer();
    const std::string bytes = gpt2_unmap(cps);
    if (id >= 0 && static_cast<size_t>(id) < ranks.size()) {
      if (bytes != ranks[id]) {
        r.i = key_at;
        r.error("token id " + std::to_string(id) + " is '" + show_bytes(bytes) +
                "' here but vocab.bpe gives rank " + std::to_string(id) + " to '" +
                show_bytes(ranks[id]) + "'");
      }
      seen[id] = true;
    } else if (id >= 0 && id <= INT_MAX) {
      std::string name;
      for (const uint32_t cp : cps) append_utf8(name, cp);
      specials.emplace_back(name, static_cast<int>(id));
    } else {
      r.error("negative or huge id " + std::to_string(id));
    }
  }
  r.ws();
  if (r.i != js.size()) r.error("trailing characters after the object");
  for (size_t id = 0; id < seen.size(); ++id)
    if (!seen[id]) {
      r.i = js.size();
      r.error("no entry for id " + std::to_string(id) + " ('" + show_bytes(ranks[id]) +
              "'): encoder.json and vocab.bpe are not from the same release");
    }
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
      fail(path, k + 1, "bad rank '" + show_bytes(line.substr(sp + 1)) + "'");
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

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {
// A fast 64-bit hash of short byte strings: 8-byte words through a multiply-xorshift mix.
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

// Long chunks: a doubly linked list of parts and a min-heap of candidate pairs keyed by
// (rank, position), so each join costs O(log n). Entries go stale when a neighbour changes;
// a version number per part detects that lazily.
void Tokenizer::merge_heap(std::string_view chunk, std::vector<int>& out) const {
  const int n = static_cast<int>(chunk.size());
  std::vector<int> ids(n), prev(n), next(n);
  std::vector<uint32_t> ver(n, 0);
  struct Cand {
    int rank, left, right;
    uint32_t vl, vr;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  for (int i = 0; i < n; ++i) {
    ids[i] = byte_id_[static_cast<uint8_t>(chunk[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  const auto push = [&](int l, int r) {
    const int rk = pair_rank(ids[l], ids[r]);
    if (rk != INT_MAX) heap.push({rk, l, r, ver[l], ver[r]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (ver[c.left] != c.vl || ver[c.right] != c.vr || next[c.left] != c.right) continue;
    // Join right into left; the right part dies (its version bump invalidates its entries).
    ids[c.left] = c.rank;
    ++ver[c.left];
    ++ver[c.right];
    const int r2 = next[c.right];
    next[c.left] = r2;
    if (r2 >= 0) prev[r2] = c.left;
    if (prev[c.left] >= 0) push(prev[c.left], c.left);
    if (r2 >= 0) push(c.left, r2);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
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
  if (chunk.size() <= std::min<size_t>(heap_threshold_, 64)) {
    merge_small(chunk, out);
  } else {
    merge_heap(chunk, out);
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
