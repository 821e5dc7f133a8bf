// Tokenizer tests (§2.5): exact GPT-2 ids against npm tiktoken's goldens
// (tests/golden/tokenizer_golden.txt, written by tests/golden/tiktoken/gen_tiktoken.mjs), the
// pre-tokenizer by hand, both merge paths, round trips, special tokens and file errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/tokenize_cmd.h"
#include "data/bpe_tokenizer.h"
#include "data/bpe_train.h"
#include "data/pretokenize.h"

using tg::data::SpecialSet;
using tg::data::Tokenizer;
using tg::data::VocabError;

namespace {

const std::string kSrc = TG_TEST_SOURCE_ROOT;
const std::string kShared = TG_TEST_SHARED_DIR;

const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::gpt2(kSrc + "/third_party/gpt2");
  return t;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int> parse_ids(std::istringstream& in) {
  size_t n;
  in >> n;
  std::vector<int> ids(n);
  for (auto& id : ids) in >> id;
  return ids;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& content, const std::string& name = "tok") {
    path = (std::filesystem::temp_directory_path() /
            ("tg_test_" + name + "_" + std::to_string(std::random_device{}())))
               .string();
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

// First index where a and b differ, for a readable failure.
std::string first_diff(const std::vector<int>& a, const std::vector<int>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  std::ostringstream ss;
  ss << "sizes " << a.size() << " vs " << b.size() << ", first difference at " << i;
  if (i < a.size()) ss << ": ours " << a[i];
  if (i < b.size()) ss << ", tiktoken " << b[i];
  return ss.str();
}

}  // namespace

TEST_CASE("pre-tokenizer splits like GPT-2's regex") {
  using tg::data::pretokenize_gpt2;
  using V = std::vector<std::string_view>;
  CHECK(pretokenize_gpt2("Hello world") == V{"Hello", " world"});
  CHECK(pretokenize_gpt2("Hello  world") == V{"Hello", " ", " world"});
  CHECK(pretokenize_gpt2("a\n\nb") == V{"a", "\n", "\n", "b"});  // \s+(?!\S) backs off by one
  CHECK(pretokenize_gpt2("a   ") == V{"a", "   "});              // trailing run kept whole
  CHECK(pretokenize_gpt2("I'm they're 'S") == V{"I", "'m", " they", "'re", " '", "S"});
  CHECK(pretokenize_gpt2("x 123abc!!? ") == V{"x", " 123", "abc", "!!?", " "});
  CHECK(pretokenize_gpt2("\t\tx") == V{"\t", "\t", "x"});
  CHECK(pretokenize_gpt2("") == V{});
  // Invalid UTF-8 bytes are "other" characters, so any byte string splits and tiles the input.
  CHECK(pretokenize_gpt2("a\xff\xfe b") == V{"a", "\xff\xfe", " b"});
  CHECK(pretokenize_gpt2("caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd") ==
        V{"caf\xc3\xa9", " \xe4\xbd\xa0\xe5\xa5\xbd"});
  CHECK(std::string(tg::data::unicode_version()) == "16.0.0");
}

TEST_CASE("GPT-2 ids equal npm tiktoken's on the golden corpus") {
  const Tokenizer& tok = gpt2();
  std::ifstream f(kSrc + "/tests/golden/tokenizer_golden.txt");
  REQUIRE_MESSAGE(f.good(), "missing tests/golden/tokenizer_golden.txt");
  std::string line, name, mode, text;
  int cases = 0, decodes = 0, replaces = 0;
  std::vector<int> pending_decode;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "case") {
      std::string h;
      in >> name >> mode >> h;
      text = unhex(h);
    } else if (kind == "ids" || kind == "throws") {
      ++cases;
      std::vector<int> ours;
      bool threw = false;
      try {
        if (mode == "ordinary") ours = tok.encode_ordinary(text);
        if (mode == "all") ours = tok.encode(text, SpecialSet::All());
        if (mode == "default") ours = tok.encode(text);
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      INFO("case ", name, " ", mode);
      if (kind == "throws") {
        CHECK(threw);
      } else {
        const std::vector<int> want = parse_ids(in);
        CHECK_MESSAGE(ours == want, first_diff(ours, want));
        // Decoding gives back the exact text.
        CHECK(tok.decode_bytes(want) == text);
      }
    } else if (kind == "decode") {
      pending_decode = parse_ids(in);
    } else if (kind == "text") {
      std::string h;
      in >> h;
      ++decodes;
      CHECK(tok.decode(pending_decode) == unhex(h));
    } else if (kind == "replace") {
      std::string a, b;
      in >> a >> b;
      ++replaces;
      INFO("bytes ", a);
      CHECK(tg::data::utf8_replace_invalid(unhex(a)) == unhex(b));
    }
  }
  CHECK(cases > 90);
  CHECK(decodes > 1000);
  CHECK(replaces == 300);
}

TEST_CASE("the-verdict.txt gives the book's 5145 tokens") {
  const std::string path = kShared + "/data/the-verdict.txt";
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipped: " << path << " not found");
    return;
  }
  const std::vector<int> ids = gpt2().encode(read(path));
  REQUIRE(ids.size() == 5145);
  CHECK(std::vector<int>(ids.begin(), ids.begin() + 5) ==
        std::vector<int>{40, 367, 2885, 1464, 1807});
  CHECK(gpt2().decode_bytes(ids) == read(path));
}

namespace {

// tiktoken's byte_pair_merge as its src/lib.rs writes it, for the reference: parts as start
// offsets, each pair's rank looked up by its bytes, the lowest joined (leftmost on ties), one
// rescan of all parts per join. Quadratic, and independent of both merge paths' pair tables.
std::vector<int> tiktoken_merge(const Tokenizer& tok, std::string_view piece) {
  const auto rank_of = [&](std::string_view bytes) {
    std::vector<int> id;
    tok.encode_chunk(bytes, id);  // a whole token is its one id, whichever merge path is set
    return id.size() == 1 ? id[0] : INT_MAX;
  };
  std::vector<size_t> start(piece.size() + 1);
  for (size_t i = 0; i <= piece.size(); ++i) start[i] = i;
  const auto rank_at = [&](size_t i) {
    return i + 2 < start.size() ? rank_of(piece.substr(start[i], start[i + 2] - start[i]))
                                : INT_MAX;
  };
  while (true) {
    size_t best = 0;
    int best_rank = INT_MAX;
    for (size_t i = 0; i + 2 < start.size(); ++i)
      if (const int r = rank_at(i); r < best_rank) best = i, best_rank = r;
    if (best_rank == INT_MAX) break;
    start.erase(start.begin() + long(best) + 1);
  }
  std::vector<int> ids;
  for (size_t i = 0; i + 1 < start.size(); ++i)
    ids.push_back(rank_of(piece.substr(start[i], start[i + 1] - start[i])));
  return ids;
}

// Pieces of the kinds that stress the order of joins: one byte repeated, short patterns
// repeated (ties everywhere), random letters, and spans of the golden corpus (real text).
std::vector<std::string> merge_test_pieces(std::mt19937& rng, size_t max_len, int count) {
  const std::string corpus = read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  const std::string alphabet = "aaabbcdeeeinorst \xc3\xa9\xe4\xbd\xa0";
  const std::vector<std::string> motifs = {"a",   " ",   "\n",           "ab", "aab",
                                           "abc", "ing", "\xe4\xbd\xa0", "==", "-.",
                                           "0",   "12",  "ha",           "lol"};
  std::vector<std::string> pieces;
  for (int k = 0; k < count; ++k) {
    const size_t n = 1 + rng() % max_len;
    std::string s;
    if (k % 3 == 0) {
      while (s.size() < n) s += motifs[rng() % motifs.size()];
    } else if (k % 3 == 1) {
      while (s.size() < n) s += alphabet[rng() % alphabet.size()];
    } else {
      s = corpus.substr(rng() % (corpus.size() - n), n);
    }
    pieces.push_back(s);
  }
  return pieces;
}

}  // namespace

TEST_CASE("tree merge and tiktoken's scan agree on random chunks") {
  Tokenizer scan = gpt2(), tree = gpt2();
  scan.set_tree_threshold(64);
  tree.set_tree_threshold(0);
  std::mt19937 rng(7);
  for (const std::string& s : merge_test_pieces(rng, 64, 3000)) {
    std::vector<int> a, b;
    scan.encode_chunk(s, a);
    tree.encode_chunk(s, b);
    INFO("chunk '", s, "'");
    CHECK(a == b);
  }
  const std::string corpus = read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  CHECK(scan.encode_ordinary(corpus) == tree.encode_ordinary(corpus));
}

TEST_CASE("tree merge equals tiktoken's byte_pair_merge on long chunks") {
  Tokenizer tree = gpt2();
  tree.set_tree_threshold(0);
  std::mt19937 rng(11);
  for (const std::string& s : merge_test_pieces(rng, 400, 150)) {
    std::vector<int> ids;
    tree.encode_chunk(s, ids);
    INFO("chunk '", s, "'");
    CHECK(ids == tiktoken_merge(tree, s));
  }
}

TEST_CASE("tree merge: one chunk of 4 MiB of one byte, and of a repeated pattern") {
  // Joins go left to right, pairs of equal tokens first: each 64-byte stretch (a multiple of the
  // longest run token) encodes as the 64 bytes alone, whatever the chunk's length.
  const Tokenizer& tok = gpt2();
  for (const std::string motif : {"a", "ab", "\xe4\xbd\xa0\xe4\xbd\xa0"}) {
    std::string unit;
    while (unit.size() < 64) unit += motif;
    unit.resize(64 / motif.size() * motif.size());
    std::string big;
    while (big.size() < (size_t(4) << 20)) big += unit;
    std::vector<int> one, all;
    tok.encode_chunk(unit, one);
    tok.encode_chunk(big, all);
    INFO("motif '", motif, "'");
    REQUIRE(all.size() == one.size() * (big.size() / unit.size()));
    bool periodic = true;
    for (size_t i = 0; i < all.size(); ++i) periodic = periodic && all[i] == one[i % one.size()];
    CHECK(periodic);
  }
}

TEST_CASE("any byte string round-trips, invalid UTF-8 included") {
  const Tokenizer& tok = gpt2();
  std::mt19937 rng(1);
  for (int k = 0; k < 200; ++k) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += static_cast<char>(rng() % 256);
    CHECK(tok.decode_bytes(tok.encode_ordinary(s)) == s);
  }
  CHECK(tok.encode_ordinary("").empty());
  CHECK(tok.encode_ordinary("!") == std::vector<int>{0});
  CHECK(tok.decode(tok.encode_ordinary("\xff")) == "\xEF\xBF\xBD");
}

TEST_CASE("special tokens follow tiktoken's allowed/disallowed rules") {
  const Tokenizer& tok = gpt2();
  const std::string text = "Hello<|endoftext|> world";
  CHECK_THROWS_AS(tok.encode(text), std::invalid_argument);
  CHECK(tok.encode(text, SpecialSet::All()) == std::vector<int>{15496, 50256, 995});
  CHECK(tok.encode(text, SpecialSet::Of({"<|endoftext|>"})) == std::vector<int>{15496, 50256, 995});
  // Not disallowed: encoded as ordinary text, like encode_ordinary.
  CHECK(tok.encode(text, SpecialSet::None(), SpecialSet::None()) == tok.encode_ordinary(text));
  CHECK(tok.encode_ordinary(text).size() > 3);
  CHECK_THROWS_AS(tok.encode(text, SpecialSet::Of({"<|nope|>"})), std::invalid_argument);
  CHECK(tok.decode_bytes(std::vector<int>{50256}) == "<|endoftext|>");
  CHECK(tok.n_vocab() == 50257);
}

TEST_CASE("decode rejects unknown ids") {
  const Tokenizer& tok = gpt2();
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<int>{50257}),
                       doctest::Contains("unknown token id 50257"), std::out_of_range);
  CHECK_THROWS_AS(tok.decode(std::vector<int>{-1}), std::out_of_range);
}

TEST_CASE("tiktoken rank file round trip") {
  const Tokenizer& tok = gpt2();
  TempFile f("", "ranks");
  tok.save_tiktoken(f.path);
  const std::string first = read(f.path).substr(0, 10);
  CHECK(first == "IQ== 0\nIg=");  // "!" has rank 0, as in tiktoken's gpt2 ranks
  const Tokenizer back = Tokenizer::from_tiktoken_file(f.path, {{"<|endoftext|>", 50256}});
  const std::string corpus = read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  CHECK(back.encode(corpus, SpecialSet::All()) == tok.encode(corpus, SpecialSet::All()));
}

TEST_CASE("vocabulary file errors name the file, the line and the reason") {
  const std::string dir = kSrc + "/third_party/gpt2";
  const auto err = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const VocabError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(err([] { Tokenizer::gpt2("/nonexistent"); }).find("make gpt2") != std::string::npos);
  const std::string bpe = read(dir + "/vocab.bpe");
  {
    // Line 3 made into one token only.
    std::string bad = bpe;
    const size_t l3 = bad.find('\n', bad.find('\n') + 1) + 1;
    bad.replace(l3, bad.find('\n', l3) - l3, "broken");
    TempFile f(bad, "bpe");
    const std::string e = err([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", f.path); });
    CHECK(e.find(f.path + ":3: expected two tokens") != std::string::npos);
  }
  {
    TempFile f("#version: 0.2\nx\xc4\xa0 zz\n", "bpe2");
    const std::string e = err([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", f.path); });
    CHECK(e.find(":2: merge of") != std::string::npos);
  }
  {
    TempFile f("not a header\n", "bpe3");
    CHECK(err([&] {
            Tokenizer::from_gpt2_files(dir + "/encoder.json", f.path);
          }).find(":1: expected the header") != std::string::npos);
  }
  {
    std::string js = read(dir + "/encoder.json");
    js.replace(js.find("\"#\": 2"), 6, "\"#\": 3");  // id 3 belongs to "$"
    TempFile f(js, "json");
    const std::string e = err([&] { Tokenizer::from_gpt2_files(f.path, dir + "/vocab.bpe"); });
    CHECK(e.find(":1:") != std::string::npos);
    CHECK(e.find("token id 3") != std::string::npos);
  }
  {
    TempFile f("{\"!\": 0,\n \"#\" 2}", "json2");
    const std::string e = err([&] { Tokenizer::from_gpt2_files(f.path, dir + "/vocab.bpe"); });
    CHECK(e.find(":2:6: expected ':'") != std::string::npos);
  }
  {
    // core/json.h's strict reader: refusals keep the file's path:line:col.
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"{\"!\": 0,\n \"!\": 0}", ":2:2: duplicate key '!'"},
        {"{\"!\": 0} x", ":1:10: unexpected 'x' after the value"},
        {"{\"\\ud800\": 0}", ":1:3: unpaired surrogate in \\u escape"},
        {"{\"!\": \"0\"}", ":1:7: expected an integer id"},
        {"{\"!\": -1}", ":1:7: negative or huge id -1"},
    };
    for (const auto& [text, message] : bad) {
      TempFile f(text, "json3");
      const std::string e = err([&] { Tokenizer::from_gpt2_files(f.path, dir + "/vocab.bpe"); });
      CHECK(e == f.path + message);
    }
  }
  {
    TempFile f("IQ== 0\n!!! 1\n", "rank");
    CHECK(err([&] { Tokenizer::from_tiktoken_file(f.path); }).find(":2: bad base64") !=
          std::string::npos);
  }
  {
    TempFile f("IQ== 0\n", "rank2");
    CHECK(err([&] { Tokenizer::from_tiktoken_file(f.path); }).find("no token for byte 0x00") !=
          std::string::npos);
  }
  CHECK(err([] {
          Tokenizer::load("/nonexistent/tok.bpe");
        }).find("/nonexistent/tok.bpe: no such file") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Training

namespace {

// minbpe's RegexTokenizer.train, step by step: recount all pairs each merge, in text order, and
// take the first pair with the largest count (Python's max over an insertion-ordered dict).
std::vector<std::pair<int, int>> reference_train(std::string_view text, int vocab_size) {
  std::vector<std::vector<int>> chunks;
  for (const auto c : tg::data::pretokenize_gpt2(text))
    chunks.emplace_back(reinterpret_cast<const uint8_t*>(c.data()),
                        reinterpret_cast<const uint8_t*>(c.data()) + c.size());
  std::vector<std::pair<int, int>> merges;
  for (int t = 256; t < vocab_size; ++t) {
    std::vector<std::pair<std::pair<int, int>, long>> stats;  // insertion-ordered
    std::map<std::pair<int, int>, size_t> where;
    for (const auto& ids : chunks)
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const std::pair<int, int> p{ids[i], ids[i + 1]};
        const auto [it, fresh] = where.emplace(p, stats.size());
        if (fresh) stats.push_back({p, 0});
        ++stats[it->second].second;
      }
    if (stats.empty()) break;
    size_t best = 0;
    for (size_t k = 1; k < stats.size(); ++k)
      if (stats[k].second > stats[best].second) best = k;
    const auto [a, b] = stats[best].first;
    merges.emplace_back(a, b);
    for (auto& ids : chunks) {
      std::vector<int> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          out.push_back(t);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = std::move(out);
    }
  }
  return merges;
}

}  // namespace

TEST_CASE("training: minbpe's aaabdaaabac example") {
  // Wikipedia's example: aa -> Z (256), Za -> Y (257), Yb -> X (258); "XdXac".
  const auto merges = tg::data::bpe_train_merges("aaabdaaabac", 256 + 3);
  CHECK(merges == std::vector<std::pair<int, int>>{{97, 97}, {256, 97}, {257, 98}});
  const Tokenizer tok = tg::data::bpe_train("aaabdaaabac", 256 + 3);
  CHECK(tok.encode_ordinary("aaabdaaabac") == std::vector<int>{258, 100, 258, 97, 99});
  CHECK(tok.decode(tok.encode_ordinary("aaabdaaabac")) == "aaabdaaabac");
}

TEST_CASE("training: incremental counts give minbpe's merges exactly") {
  const std::string corpus = read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  CHECK(tg::data::bpe_train_merges(corpus, 256 + 150) == reference_train(corpus, 256 + 150));
  std::mt19937 rng(3);
  const std::string alphabet = "aaabbbcd  \n'!1";
  for (int k = 0; k < 20; ++k) {
    std::string s;
    for (int i = 0; i < 300; ++i) s += alphabet[rng() % alphabet.size()];
    INFO("text ", s);
    CHECK(tg::data::bpe_train_merges(s, 256 + 40) == reference_train(s, 256 + 40));
  }
  // Stops when no pair is left.
  CHECK(tg::data::bpe_train_merges("ab", 1000).size() == 1);
  CHECK_THROWS_AS(tg::data::bpe_train_merges("ab", 255), std::invalid_argument);
}

TEST_CASE("training: special tokens are cut out and get the ids after the vocabulary") {
  const std::string text = "hello world<|endoftext|>hello there<|endoftext|>";
  tg::data::BpeTrainStats st;
  const Tokenizer tok = tg::data::bpe_train(text, 256 + 10, {"<|endoftext|>"}, &st);
  CHECK(st.merges == 10);
  CHECK(tok.specials() == std::vector<std::pair<std::string, int>>{{"<|endoftext|>", 266}});
  // No merge learned from inside the special token ("<|" never pairs).
  for (int id = 256; id < 266; ++id) CHECK(tok.token_bytes(id).find('|') == std::string::npos);
  const auto ids = tok.encode(text, SpecialSet::All());
  CHECK(std::count(ids.begin(), ids.end(), 266) == 2);
  CHECK(tok.decode_bytes(ids) == text);
}

TEST_CASE("training: save and load in our format and tiktoken's") {
  const std::string corpus = read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  const Tokenizer tok = tg::data::bpe_train(corpus, 400, {"<|endoftext|>"});
  TempFile ours("", "ours"), ranks("", "ranks");
  tok.save(ours.path);
  tok.save_tiktoken(ranks.path);
  CHECK(read(ours.path).rfind("tapegrad-bpe v1\npattern gpt2\nmerges 144\n", 0) == 0);
  const Tokenizer a = Tokenizer::load(ours.path);
  const Tokenizer b = Tokenizer::load(ranks.path);
  const auto want = tok.encode(corpus, SpecialSet::All());
  CHECK(a.encode(corpus, SpecialSet::All()) == want);
  CHECK(b.encode_ordinary(corpus) == tok.encode_ordinary(corpus));
  CHECK(a.n_vocab() == 401);
  for (int id = 256; id < 400; ++id) CHECK(a.merge_of(id) == tok.merge_of(id));
  // GPT-2's byte order is not ours: it saves only in tiktoken's format.
  CHECK_THROWS_AS(gpt2().save(ours.path), std::runtime_error);
}

TEST_CASE("our format's errors name the line") {
  const auto err = [](const std::string& content) -> std::string {
    TempFile f(content, "fmt");
    try {
      Tokenizer::from_tapegrad_file(f.path);
    } catch (const VocabError& e) {
      const std::string what = e.what();
      return what.substr(what.find(':'));
    }
    return "(no error)";
  };
  CHECK(err("tapegrad-bpe v2\n").find(":1: unsupported version") == 0);
  CHECK(err("hello\n").find(":1: not a tapegrad-bpe file") == 0);
  CHECK(err("tapegrad-bpe v1\npattern cl100k\n").find(":2: expected 'pattern gpt2'") == 0);
  CHECK(err("tapegrad-bpe v1\npattern gpt2\nmerges x\n").find(":3: expected 'merges") == 0);
  CHECK(err("tapegrad-bpe v1\npattern gpt2\nmerges 2\n97 97\n256 300\n")
            .find(":5: merge uses id 300") == 0);
  CHECK(err("tapegrad-bpe v1\npattern gpt2\nmerges 1\n97 97\n").find(":5: unexpected end") == 0);
  CHECK(err("tapegrad-bpe v1\npattern gpt2\nmerges 1\n97 97\nspecials 1\n256 <|x|>\n")
            .find("reuses id 256") != std::string::npos);
  CHECK(err("tapegrad-bpe v1\npattern gpt2\nmerges 0\nspecials 0\n") == "(no error)");
}

// ---------------------------------------------------------------------------------------------
// Command line (tokenize_main / bpe_train_main)

namespace {

struct Run {
  int rc;
  std::string out, err;
};

Run run_cli(std::vector<std::string> args, const std::string& stdin_text = "") {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  const int rc =
      args[0] == "tokenize"
          ? tg::data::tokenize_main(static_cast<int>(argv.size()), argv.data(), in, out, err)
          : tg::data::bpe_train_main(static_cast<int>(argv.size()), argv.data(), out, err);
  return {rc, out.str(), err.str()};
}

// An error is exactly one line.
bool one_line(const std::string& s) {
  return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

}  // namespace

TEST_CASE("tokenize command: ids, decode, specials") {
  Run r = run_cli({"tokenize"}, "Hello world<|endoftext|> again\n");
  CHECK(r.rc == 0);
  CHECK(r.out == "15496 995 50256 757 198\n");
  CHECK(r.err.empty());
  r = run_cli({"tokenize", "--ordinary", "-"}, "a<|endoftext|>");
  CHECK(r.out.find("50256") == std::string::npos);
  r = run_cli({"tokenize", "--encoding", "gpt2", "--decode"}, "15496 995 50256\n757 198");
  CHECK(r.rc == 0);
  CHECK(r.out == "Hello world<|endoftext|> again\n");
  // File input and the round trip through ids.
  const std::string corpus_path = kSrc + "/tests/golden/tokenizer_corpus.txt";
  r = run_cli({"tokenize", corpus_path});
  REQUIRE(r.rc == 0);
  CHECK(run_cli({"tokenize", "--decode"}, r.out).out == read(corpus_path));
  CHECK(run_cli({"tokenize", "--help"}).rc == 0);
}

TEST_CASE("tokenize command: every bad input is one line and a non-zero exit") {
  const auto bad = [](std::vector<std::string> args, const std::string& in, int rc,
                      const std::string& text) {
    const Run r = run_cli(std::move(args), in);
    INFO("stderr: ", r.err);
    CHECK(r.rc == rc);
    CHECK(one_line(r.err));
    CHECK(r.err.find(text) != std::string::npos);
    CHECK(r.out.empty());
  };
  bad({"tokenize", "--bogus"}, "x", 2, "unknown option '--bogus'");
  bad({"tokenize", "--encoding"}, "x", 2, "needs a value");
  bad({"tokenize", "--encoding", "cl100k_base"}, "x", 2,
      "--encoding expects gpt2, got 'cl100k_base'");
  bad({"tokenize", "--encoding", "gpt2", "--tokenizer", "f"}, "x", 2, "not both");
  bad({"tokenize", "a", "b"}, "x", 2, "more than one input file");
  bad({"tokenize", "/nonexistent/file.txt"}, "", 1, "/nonexistent/file.txt: no such file");
  bad({"tokenize", "/"}, "", 1, "is a directory");
  bad({"tokenize"}, "", 1, "empty input");
  bad({"tokenize", "--decode"}, " \n", 1, "empty input");
  bad({"tokenize", "--decode"}, "1 2 x3", 1, "'x3' is not a token id (id number 3)");
  // Binary input is quoted with escapes, not copied raw to the terminal.
  bad({"tokenize", "--decode"}, "1 \x01\xff\x1b[2J 3", 1,
      "'\\x01\\xff\\x1b[2J' is not a token id (id number 2)");
  bad({"tokenize", "--decode"}, "1 50257", 1, "unknown token id 50257");
  bad({"tokenize", "--decode"}, "-5", 1, "unknown token id -5");
  bad({"tokenize", "--tokenizer", "/nonexistent.bpe"}, "x", 1, "/nonexistent.bpe: no such file");
  TempFile corrupt("tapegrad-bpe v1\npattern gpt2\nmerges 1\n97\n", "corrupt");
  bad({"tokenize", "--tokenizer", corrupt.path}, "x", 1, corrupt.path + ":4: expected a merge");
  TempFile ranks("IQ== 0\nnot-base64 1\n", "corrupt2");
  bad({"tokenize", "--tokenizer", ranks.path}, "x", 1, ranks.path + ":2: bad base64");
  TempFile sign("IQ== 0\nIg== -1\n", "rank-sign"), huge("IQ== 0\nIg== 4194304\n", "rank-huge");
  bad({"tokenize", "--tokenizer", sign.path}, "x", 1,
      sign.path + ":2: bad rank '-1' (not a whole number)");
  bad({"tokenize", "--tokenizer", huge.path}, "x", 1,
      huge.path + ":2: rank 4194304 is above the largest token id we take, 4194303");
}

TEST_CASE("bpe-train command: trains, writes atomically, rejects bad input") {
  TempFile text(read(kSrc + "/tests/golden/tokenizer_corpus.txt"), "text");
  const std::string out_path = text.path + ".bpe";
  Run r = run_cli({"bpe-train", "--vocab-size", "300", "-o", out_path, "--special", "<|endoftext|>",
                   text.path});
  CHECK(r.rc == 0);
  CHECK(r.out.find("44 merges") != std::string::npos);
  REQUIRE(std::filesystem::exists(out_path));
  r = run_cli({"tokenize", "--tokenizer", out_path, text.path});
  CHECK(r.rc == 0);
  CHECK(run_cli({"tokenize", "--tokenizer", out_path, "--decode"}, r.out).out == read(text.path));
  // tiktoken format.
  r = run_cli(
      {"bpe-train", "--vocab-size", "300", "-o", out_path, "--format", "tiktoken", text.path});
  CHECK(r.rc == 0);
  CHECK(read(out_path).rfind("AA== 0\n", 0) == 0);
  std::filesystem::remove(out_path);

  const auto bad = [](std::vector<std::string> args, int rc, const std::string& text) {
    const Run r = run_cli(std::move(args));
    INFO("stderr: ", r.err);
    CHECK(r.rc == rc);
    CHECK(one_line(r.err));
    CHECK(r.err.find(text) != std::string::npos);
  };
  bad({"bpe-train", "-o", "x", "t"}, 2, "--vocab-size N is required");
  bad({"bpe-train", "--vocab-size", "100", "-o", "x", "t"}, 2,
      "--vocab-size expects an integer from 256 to 1000000, got '100'");
  bad({"bpe-train", "--vocab-size", "3k", "-o", "x", "t"}, 2, "got '3k'");
  bad({"bpe-train", "--vocab-size", "300", "t"}, 2, "-o FILE is required");
  bad({"bpe-train", "--vocab-size", "300", "-o", "x"}, 2, "missing the TEXT file");
  bad({"bpe-train", "--vocab-size", "300", "-o", "x", "--format", "json", "t"}, 2,
      "--format expects tapegrad or tiktoken, got 'json'");
  bad({"bpe-train", "--vocab-size", "300", "-o", "x", "/nonexistent.txt"}, 1, "no such file");
  TempFile empty("", "empty");
  bad({"bpe-train", "--vocab-size", "300", "-o", "x", empty.path}, 1, "empty input");
  // An unwritable destination fails cleanly and leaves no temp file behind.
  const std::string dir = std::filesystem::temp_directory_path() / "tg_test_no_such_dir";
  bad({"bpe-train", "--vocab-size", "300", "-o", dir + "/v.bpe", text.path}, 1, "cannot write");
  CHECK(!std::filesystem::exists(dir));
}
