// Large inputs in bounded memory (issue 23): `tapegrad tokenize` streams its input, so its peak
// memory is a constant (the tokenizer, one 1 MiB block and its ids), not a multiple of the text.
// TokenStream, which makes that possible, must give exactly Tokenizer::encode's ids whatever the
// block size.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/bpe_train.h"
#include "data/token_stream.h"
#include "tests/temp_dir.h"

using namespace tg;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int> streamed(const data::Tokenizer& tok, bool ordinary, const std::string& text,
                          size_t block) {
  std::vector<int> all;
  data::TokenStream s(tok, ordinary, [&](const std::vector<int>& ids) {
    all.insert(all.end(), ids.begin(), ids.end());
  });
  for (size_t at = 0; at < text.size(); at += block)
    s.feed(std::string_view(text).substr(at, block));
  s.finish();
  return all;
}

struct Run {
  long status = -1, peak_kib = -1;
};

// Runs a shell command; its exit status and the peak RSS of that process alone: a child forks
// it, waits, and reports its RUSAGE_CHILDREN (the test process's own earlier children do not
// count there).
Run run_measured(const std::string& cmd) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(p[0]);
    const pid_t t = ::fork();
    if (t == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(t, &status, 0);
    rusage ru{};
    ::getrusage(RUSAGE_CHILDREN, &ru);
    const long report[2] = {WIFEXITED(status) ? WEXITSTATUS(status) : 128, ru.ru_maxrss};
    (void)!::write(p[1], report, sizeof report);
    ::_exit(0);
  }
  ::close(p[1]);
  Run r;
  long report[2] = {-1, -1};
  REQUIRE(::read(p[0], report, sizeof report) == sizeof report);
  ::close(p[0]);
  ::waitpid(child, nullptr, 0);
  r.status = report[0];
  r.peak_kib = report[1];
  return r;
}

}  // namespace

TEST_CASE("TokenStream: the ids of encode on the whole text, for every block size") {
  const std::string book = slurp(std::string(TG_GOLDEN_DIR) + "/train_text.txt");
  REQUIRE(book.size() > 2000);
  // Cuts inside UTF-8 characters, whitespace runs (\s+(?!\S)), contractions, digits and special
  // tokens, and text that only looks like the start of one.
  const std::vector<std::string> texts = {
      book,
      "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82!!  \n\n  x",
      "a   b\t\t c\n\n\nd    " + book.substr(0, 200) + "      ",
      "it's they're we'll I'd 12345 678 ...!? <|endoftext|>x<|endoftext|><|endoftext|> <|endof",
      "<|endo<|endoftext|>< |endoftext|><|<|endoftext|" + book.substr(500, 300) + "<|endoftext|>",
      std::string(5000, 'a') + " " + std::string(300, ' ') + "b",
  };
  const data::Tokenizer trained = data::bpe_train(book, 400, {"<|endoftext|>", "<|endoftext|>x"});
  const data::Tokenizer gpt2 = data::Tokenizer::gpt2();
  for (const data::Tokenizer* tok : {&trained, &gpt2}) {
    for (const std::string& text : texts) {
      const std::vector<int> whole = tok->encode(text, data::SpecialSet::All());
      const std::vector<int> plain = tok->encode_ordinary(text);
      for (const size_t block : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(7), size_t(13),
                                 size_t(64), size_t(1000), size_t(1) << 20}) {
        INFO("text of ", text.size(), " bytes, blocks of ", block);
        CHECK(streamed(*tok, false, text, block) == whole);
        CHECK(streamed(*tok, true, text, block) == plain);
      }
    }
  }
}

TEST_CASE("TokenStream: random texts of the pieces that decide where chunks end") {
  const std::vector<std::string> pieces = {"a",
                                           "b",
                                           " ",
                                           "  ",
                                           "\n",
                                           "\t",
                                           "'",
                                           "r",
                                           "e",
                                           "s",
                                           "ll",
                                           "7",
                                           "42",
                                           "!",
                                           ".",
                                           "\xC3\xA9",
                                           "\xF0\x9F\x99\x82",
                                           "<|",
                                           "endoftext",
                                           "|>",
                                           "<|endoftext|>",
                                           "\xC2\xA0",
                                           "\xE3\x80\x80",
                                           "\r\n",
                                           "\xE6\x97\xA5",
                                           "'re",
                                           " '",
                                           "\xFF"};
  const data::Tokenizer gpt2 = data::Tokenizer::gpt2();
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const uint64_t n = 1 + next(60);
    for (uint64_t k = 0; k < n; ++k) text += pieces[next(pieces.size())];
    const size_t block = 1 + next(9);
    INFO("text '", text, "', blocks of ", block);
    CHECK(streamed(gpt2, false, text, block) == gpt2.encode(text, data::SpecialSet::All()));
    CHECK(streamed(gpt2, true, text, block) == gpt2.encode_ordinary(text));
  }
}

TEST_CASE("tapegrad tokenize: peak memory of a 50 MB text stays under 64 MiB") {
  testing::TempDir d("tg_big_inputs");
  const std::string book = slurp(std::string(TG_GOLDEN_DIR) + "/train_text.txt");
  {
    std::ofstream out(d / "big.txt", std::ios::binary);
    size_t n = 0;
    for (int i = 0; n < 50'000'000; ++i) {
      const std::string part = book + " <|endoftext|> " + std::to_string(i) + "\n";
      out << part;
      n += part.size();
    }
  }
  const Run r = run_measured(std::string(TG_TAPEGRAD_EXE) + " tokenize " + (d / "big.txt") + " > " +
                             (d / "ids.txt"));
  CHECK(r.status == 0);
  const long peak_kib = r.peak_kib;
  MESSAGE("tokenize of 50 MB: peak RSS ", peak_kib / 1024, " MiB");
#if defined(TG_UNDER_ASAN)
  // ASan's shadow memory and its quarantine of freed blocks (up to 256 MiB) are not tokenize's.
  (void)peak_kib;
#else
  CHECK(peak_kib < 64 * 1024);  // before streaming: 191 MiB
#endif
  // The ids are all there: one line, ending where the text's last number does.
  const std::string ids = slurp(d / "ids.txt");
  CHECK(ids.size() > 40'000'000);
  CHECK(ids.back() == '\n');
  CHECK(ids.find('\n') == ids.size() - 1);
}

TEST_CASE(
    "TokenStream: a chunk over many blocks is looked at a few times per byte, not per block") {
  // 1 MiB of one letter is one pre-tokenizer chunk: before, every 4 KiB block rescanned all that
  // was held (~128 MiB scanned in all; 200 MB in 1 MiB blocks took minutes).
  const data::Tokenizer gpt2 = data::Tokenizer::gpt2();
  const std::string text = std::string(size_t(1) << 20, 'a') + " b";
  for (const bool ordinary : {false, true}) {
    std::vector<int> all;
    data::TokenStream s(gpt2, ordinary, [&](const std::vector<int>& ids) {
      all.insert(all.end(), ids.begin(), ids.end());
    });
    for (size_t at = 0; at < text.size(); at += 4096)
      s.feed(std::string_view(text).substr(at, 4096));
    s.finish();
    CHECK(all == gpt2.encode_ordinary(text));
    CHECK(s.scanned_bytes() <= 4 * text.size());
  }
}

TEST_CASE("tapegrad tokenize: one chunk of 16 MB (one letter repeated) in ~10 bytes per byte") {
  testing::TempDir d("tg_big_chunk");
  std::ofstream(d / "a.txt", std::ios::binary) << std::string(16'000'000, 'a');
  const Run r = run_measured(std::string(TG_TAPEGRAD_EXE) + " tokenize " + (d / "a.txt") + " > " +
                             (d / "ids.txt"));
  CHECK(r.status == 0);
  MESSAGE("tokenize of 16 MB of 'a': peak RSS ", r.peak_kib / 1024, " MiB");
#if !defined(TG_UNDER_ASAN)        // ASan's shadow and quarantine are not tokenize's
  CHECK(r.peak_kib < 256 * 1024);  // before: 613 MiB (~40 bytes per byte)
#endif
  // 4M times GPT-2's token "aaaa" (24794), on one line.
  std::string want;
  for (int i = 0; i < 4'000'000; ++i) want += i ? " 24794" : "24794";
  CHECK(slurp(d / "ids.txt") == want + "\n");
}
