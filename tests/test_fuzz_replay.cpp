// Replays fuzz/corpus/<harness>/* through each harness once (no mutation): every seed and every
// input that once crashed a harness (fuzz/README.md) must pass. A harness aborts on a finding,
// which fails this binary.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"

int tg_fuzz_safetensors(const uint8_t* data, size_t size);
int tg_fuzz_json(const uint8_t* data, size_t size);
int tg_fuzz_gpt2_files(const uint8_t* data, size_t size);
int tg_fuzz_tokenizer_files(const uint8_t* data, size_t size);
int tg_fuzz_encode(const uint8_t* data, size_t size);
int tg_fuzz_cli(const uint8_t* data, size_t size);
int tg_fuzz_attention(const uint8_t* data, size_t size);
int tg_fuzz_gpt2_weights(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

namespace {

// Runs every file of fuzz/corpus/<name> (in name order, for a stable log); returns how many.
int replay(const std::string& name, int (*entry)(const uint8_t*, size_t)) {
  const fs::path dir = fs::path(TG_FUZZ_CORPUS) / name;
  REQUIRE_MESSAGE(fs::is_directory(dir), "missing corpus " << dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    INFO("corpus file ", f.string());
    CHECK(entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  return int(files.size());
}

}  // namespace

TEST_CASE("fuzz corpus: safetensors and checkpoints") {
  // The harness points TAPEGRAD_GPT2_DIR nowhere (so a "gpt2" checkpoint fails fast); put it
  // back for the harnesses replayed after it.
  const char* env = std::getenv("TAPEGRAD_GPT2_DIR");
  const std::string saved = env ? env : "";
  CHECK(replay("safetensors", tg_fuzz_safetensors) > 5);
  if (env)
    setenv("TAPEGRAD_GPT2_DIR", saved.c_str(), 1);
  else
    unsetenv("TAPEGRAD_GPT2_DIR");
}
TEST_CASE("fuzz corpus: JSON readers") { CHECK(replay("json", tg_fuzz_json) > 5); }
TEST_CASE("fuzz corpus: GPT-2 encoder.json + vocab.bpe") {
  CHECK(replay("gpt2_files", tg_fuzz_gpt2_files) > 2);
}
TEST_CASE("fuzz corpus: tapegrad and tiktoken vocabulary files") {
  CHECK(replay("tokenizer_files", tg_fuzz_tokenizer_files) > 5);
}
TEST_CASE("fuzz corpus: encode/decode round trip") {
  // The harness round-trips GPT-2's vocabulary only when it loads: here it must (make test
  // fetches it), so that the replay cannot skip it silently.
  CHECK_NOTHROW(tg::data::Tokenizer::gpt2());
  CHECK(replay("encode", tg_fuzz_encode) > 5);
}
TEST_CASE("fuzz corpus: command-line parsers") { CHECK(replay("cli", tg_fuzz_cli) > 5); }
TEST_CASE("fuzz corpus: scaled_dot_product_attention's arguments") {
  CHECK(replay("attention", tg_fuzz_attention) > 5);
}
TEST_CASE("fuzz corpus: GPT-2 weights in Hugging Face's files") {
  CHECK(replay("gpt2_weights", tg_fuzz_gpt2_weights) > 5);
}
