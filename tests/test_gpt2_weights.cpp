// §5.5: GPT-2 weights in Hugging Face's files (train/gpt2_weights.h) and generation through the
// KV cache (GPTModel::forward(x, use_cache), train::generate_cached).
//
// The fixtures tests/golden/gpt2_hf{,_f16} come from tests/golden/gen_gpt2_hf.py (PyTorch 1.13):
// the book's GPTModel with random weights in HF's layout, with PyTorch's logits and continuations
// (greedy, the book's §5.5 top-k/temperature settings, plain temperature), all past the context
// length. Bad files are made here from the fixture's tensors, one change each.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/json.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/train_testing.h"
#include "train/checkpoint.h"
#include "train/gpt2_weights.h"
#include "train/session.h"
#include "train/trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

const std::string kGolden = TG_GOLDEN_DIR;
const std::string kFixture = kGolden + "/gpt2_hf", kFixtureF16 = kGolden + "/gpt2_hf_f16";

using tg::testing::slurp;
using tg::testing::spit;

// golden.txt of gen_gpt2_hf.py.
struct Case {
  std::string name;
  uint64_t seed = 0;
  double temperature = 0;
  int64_t top_k = 0, max_new_tokens = 0, context_size = 0;
  std::vector<int64_t> ids;
};
struct Golden {
  std::string prompt;
  std::vector<int64_t> prompt_ids;
  std::vector<double> logits_last;
  std::vector<Case> cases;
};

Golden read_golden(const std::string& dir) {
  std::ifstream in(dir + "/golden.txt");
  REQUIRE_MESSAGE(in, "missing " << dir << "/golden.txt (HINT: /usr/bin/python3 "
                                 << "tests/golden/gen_gpt2_hf.py)");
  Golden g;
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "tapegrad-golden gpt2_hf 1");
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "prompt") {
      g.prompt = line.substr(7);
    } else if (key == "prompt_ids") {
      for (int64_t v; ls >> v;) g.prompt_ids.push_back(v);
    } else if (key == "logits_last") {
      for (double v; ls >> v;) g.logits_last.push_back(v);
    } else if (key == "case") {
      Case c;
      ls >> c.name >> c.seed >> c.temperature >> c.top_k >> c.max_new_tokens >> c.context_size;
      g.cases.push_back(c);
    } else if (key == "ids") {
      for (int64_t v; ls >> v;) g.cases.back().ids.push_back(v);
    }
  }
  REQUIRE(g.cases.size() == 3);
  return g;
}

train::LoadedModel load(const std::string& dir, std::string* notes = nullptr) {
  std::ostringstream os;
  train::LoadedModel lm = train::load_gpt2_model(dir, os);
  if (notes) *notes = os.str();
  return lm;
}

std::vector<int64_t> run(nn::GPTModel& model, const Case& c, const std::vector<int64_t>& prompt,
                         bool cached) {
  Generator gen;
  gen.manual_seed(c.seed);
  return (cached ? train::generate_cached : train::generate)(
      model, prompt, c.max_new_tokens, c.context_size, c.temperature, c.top_k, -1, gen, {});
}

void check_against_golden(const std::string& dir) {
  const Golden g = read_golden(dir);
  std::string notes;
  train::LoadedModel lm = load(dir, &notes);
  CHECK(notes.find("n_layer 2, n_embd 64, n_head 4") != std::string::npos);
  // The tokenizer (DIR's vocab.json + merges.txt) gives the script's ids.
  CHECK(train::text_to_token_ids(g.prompt, *lm.tokenizer) == g.prompt_ids);
  NoGradGuard no_grad;
  const Tensor logits = (*lm.model)(from_vector(g.prompt_ids, {1, int64_t(g.prompt_ids.size())}));
  const std::vector<float> last =
      logits.select(0, 0).select(0, logits.size(1) - 1).contiguous().to_vector<float>();
  REQUIRE(last.size() == g.logits_last.size());
  double maxdiff = 0;
  for (size_t i = 0; i < last.size(); ++i)
    maxdiff = std::max(maxdiff, std::abs(double(last[i]) - g.logits_last[i]));
  CHECK_MESSAGE(maxdiff < 1e-4, "logits maxdiff " << maxdiff);
  for (const Case& c : g.cases) {
    INFO("case ", c.name);
    CHECK(run(*lm.model, c, g.prompt_ids, false) == c.ids);
    CHECK(run(*lm.model, c, g.prompt_ids, true) == c.ids);
  }
}

}  // namespace

TEST_CASE("GPT-2 in Hugging Face's layout: PyTorch's logits and continuations, cached or not") {
  SUBCASE("F32, no mask buffers") { check_against_golden(kFixture); }
  SUBCASE("F16 with attn.bias and masked_bias") {
    check_against_golden(kFixtureF16);
    std::string notes;
    load(kFixtureF16, &notes);
    CHECK(notes.find("model.safetensors: F16 weights widened to float32") != std::string::npos);
  }
}

TEST_CASE("GPT-2 loader: the book's load_weights_into_gpt mapping") {
  train::LoadedModel lm = load(kFixture);
  const tg::SafeTensorsHeader h = tg::read_safetensors_header(kFixture + "/model.safetensors");
  auto file = [&](const std::string& name) {
    const tg::SafeTensorInfo* t = h.find(name);
    REQUIRE(t);
    std::vector<float> v(size_t(t->end - t->begin) / 4);
    tg::read_safetensors_bytes(h, *t, reinterpret_cast<char*>(v.data()));
    return v;
  };
  auto param = [&](const std::string& name) {
    for (const auto& [n, t] : lm.model->state_dict())
      if (n == name) return t.contiguous().to_vector<float>();
    FAIL("no parameter " << name);
    return std::vector<float>();
  };
  const int64_t C = 64;
  const std::vector<float> c_attn = file("h.1.attn.c_attn.weight");      // [C, 3C], in×out
  const std::vector<float> wk = param("trf_blocks.1.att.W_key.weight");  // [C, C], out×in
  for (int64_t o = 0; o < C; o += 7)
    for (int64_t i = 0; i < C; i += 5)
      CHECK(wk[size_t(o * C + i)] == c_attn[size_t(i * 3 * C + C + o)]);
  const std::vector<float> bias = file("h.0.attn.c_attn.bias");
  const std::vector<float> bv = param("trf_blocks.0.att.W_value.bias");
  for (int64_t o = 0; o < C; ++o) CHECK(bv[size_t(o)] == bias[size_t(2 * C + o)]);
  CHECK(param("out_head.weight") == file("wte.weight"));
  CHECK(param("trf_blocks.1.norm2.shift") == file("h.1.ln_2.bias"));
  CHECK(lm.cfg.qkv_bias);
  CHECK(lm.cfg.context_length == 32);
  CHECK(lm.cfg.vocab_size == 1000);
}

namespace {

// A safetensors file written byte by byte: any dtype name, any bytes.
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};

std::string safetensors_bytes(const std::vector<RawTensor>& ts) {
  std::string header = "{", data;
  for (const RawTensor& t : ts) {
    if (header.size() > 1) header += ",";
    header += json::quote(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) header += ',';
      header += std::to_string(t.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::vector<RawTensor> fixture_tensors() {
  const tg::SafeTensorsHeader h = tg::read_safetensors_header(kFixture + "/model.safetensors");
  std::vector<RawTensor> out;
  for (const tg::SafeTensorInfo& t : h.tensors) {
    std::string bytes(size_t(t.end - t.begin), '\0');
    tg::read_safetensors_bytes(h, t, bytes.data());
    out.push_back({t.name, t.dtype, t.shape, bytes});
  }
  return out;
}

RawTensor* find(std::vector<RawTensor>& ts, const std::string& name) {
  for (RawTensor& t : ts)
    if (t.name == name) return &t;
  FAIL("no tensor " << name);
  return nullptr;
}

// float32 values to F16 / BF16 bytes (round to nearest even; the fixture's values are normal).
std::string narrowed(const std::string& f32, bool bf16) {
  std::string out(f32.size() / 2, '\0');
  for (size_t i = 0; i < f32.size() / 4; ++i) {
    uint32_t b;
    std::memcpy(&b, f32.data() + 4 * i, 4);
    uint16_t h;
    if (bf16) {
      h = uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
    } else {
      const uint32_t sign = (b >> 16) & 0x8000;
      const int32_t exp = int32_t((b >> 23) & 0xFF) - 127 + 15;
      uint32_t mant = b & 0x7FFFFF;
      if (exp <= 0) {
        h = uint16_t(sign);  // underflows to zero (tiny values only)
      } else {
        uint32_t r = (uint32_t(exp) << 10) | (mant >> 13);
        const uint32_t rest = mant & 0x1FFF;
        if (rest > 0x1000 || (rest == 0x1000 && (r & 1))) ++r;
        h = uint16_t(sign | r);
      }
    }
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

std::string config_text() { return slurp(kFixture + "/config.json"); }

// The fixture with the config replaced (on a key: value line) and the tensors given, in a dir.
void write_dir(const tg::testing::TempDir& d, const std::vector<RawTensor>& ts,
               const std::string& config) {
  spit(d / "config.json", config);
  spit(d / "model.safetensors", safetensors_bytes(ts));
  fs::copy_file(kFixture + "/vocab.json", d / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(kFixture + "/merges.txt", d / "merges.txt", fs::copy_options::overwrite_existing);
}

std::string with(std::string config, const std::string& from, const std::string& to) {
  const size_t at = config.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return config.replace(at, from.size(), to);
}

std::string load_error(const std::string& dir) {
  try {
    std::ostringstream notes;
    train::load_gpt2_model(dir, notes);
  } catch (const train::TrainError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("GPT-2 loader: bad files are refused with one line naming what is wrong") {
  struct Row {
    const char* what;
    void (*edit)(std::vector<RawTensor>&, std::string&);
    const char* message;  // after "DIR/"
  };
  static const float s_nan = std::numeric_limits<float>::quiet_NaN();
  const Row rows[] = {
      {"a missing tensor",
       [](std::vector<RawTensor>& ts, std::string&) {
         ts.erase(ts.begin() + ptrdiff_t(find(ts, "h.1.mlp.c_fc.bias") - ts.data()));
       },
       "model.safetensors: lacks 'h.1.mlp.c_fc.bias' (config.json's n_layer is 2)"},
      {"an unexpected tensor",
       [](std::vector<RawTensor>& ts, std::string&) {
         ts.push_back({"h.2.ln_1.weight", "F32", {64}, std::string(256, '\0')});
       },
       "model.safetensors: unexpected tensor 'h.2.ln_1.weight' (not part of a GPT-2 with "
       "n_layer 2)"},
      {"a transposed c_attn",
       [](std::vector<RawTensor>& ts, std::string&) {
         find(ts, "h.0.attn.c_attn.weight")->shape = {192, 64};
       },
       "model.safetensors: 'h.0.attn.c_attn.weight' is [192, 64] but config.json (n_embd 64, "
       "n_positions 32, vocab_size 1000) needs [64, 192]"},
      {"an integer weight",
       [](std::vector<RawTensor>& ts, std::string&) {
         RawTensor* t = find(ts, "ln_f.bias");
         t->dtype = "I32";
       },
       "model.safetensors: 'ln_f.bias' has dtype I32; GPT-2 weights are F32, F16 or BF16"},
      {"a NaN",
       [](std::vector<RawTensor>& ts, std::string&) {
         std::memcpy(find(ts, "h.1.ln_2.weight")->bytes.data() + 12, &s_nan, 4);
       },
       "model.safetensors: 'h.1.ln_2.weight' holds NaN or infinite values"},
  };
  for (const Row& r : rows) {
    INFO(std::string(r.what));
    tg::testing::TempDir d("tg_gpt2");
    std::vector<RawTensor> ts = fixture_tensors();
    std::string config = config_text();
    r.edit(ts, config);
    write_dir(d, ts, config);
    CHECK(load_error(d.dir) == d.dir + "/" + r.message);
  }
  // config.json with one "key": value replaced.
  struct ConfigRow {
    const char *what, *from, *to, *message;
  };
  const ConfigRow config_rows[] = {
      {"n_layer above the file's", "\"n_layer\": 2", "\"n_layer\": 3",
       "model.safetensors: lacks 'h.2.ln_1.weight' (config.json's n_layer is 3)"},
      {"n_layer below the file's", "\"n_layer\": 2", "\"n_layer\": 1",
       "model.safetensors: unexpected tensor 'h.1.ln_1.weight' (not part of a GPT-2 with n_layer "
       "1)"},
      {"a missing size", "\"n_embd\": 64,", "",
       "config.json: lacks \"n_embd\" (a GPT-2 config.json has it)"},
      {"a size as a string", "\"n_head\": 4", "\"n_head\": \"4\"",
       "config.json: \"n_head\" must be an integer"},
      {"heads that do not divide n_embd", "\"n_head\": 4", "\"n_head\": 5",
       "config.json: GPT config: emb_dim (64) must be divisible by n_heads (5)"},
      {"a vocabulary past the bound", "\"vocab_size\": 1000", "\"vocab_size\": 99999999999",
       "config.json: GPT config: vocab_size must be <= 4194304, got 99999999999"},
      {"another activation", "\"gelu_new\"", "\"relu\"",
       "config.json: activation_function must be \"gelu_new\" (the book's GELU), got \"relu\""},
      {"another LayerNorm epsilon", "\"layer_norm_epsilon\": 1e-05",
       "\"layer_norm_epsilon\": 1e-06",
       "config.json: layer_norm_epsilon must be 1e-05 (the book's LayerNorm)"},
  };
  for (const ConfigRow& r : config_rows) {
    INFO(std::string(r.what));
    tg::testing::TempDir d("tg_gpt2");
    write_dir(d, fixture_tensors(), with(config_text(), r.from, r.to));
    CHECK(load_error(d.dir) == d.dir + "/" + r.message);
  }
  tg::testing::TempDir d("tg_gpt2");
  write_dir(d, fixture_tensors(), "{\"n_embd\": 64,");
  CHECK(load_error(d.dir).rfind(d.dir + "/config.json: ", 0) == 0);  // the JSON reader's error
}

TEST_CASE("GPT-2 loader: F16, BF16, the transformer. prefix and lm_head give the same model") {
  const Golden g = read_golden(kFixture);
  auto greedy = [&](const std::string& dir) {
    train::LoadedModel lm = load(dir);
    return run(*lm.model, g.cases[0], g.prompt_ids, true);
  };
  const std::vector<int64_t> want = g.cases[0].ids;
  SUBCASE("transformer. prefix and lm_head.weight (GPT2LMHeadModel.save_pretrained)") {
    tg::testing::TempDir d("tg_gpt2");
    std::vector<RawTensor> ts = fixture_tensors();
    for (RawTensor& t : ts) t.name = "transformer." + t.name;
    RawTensor head = *find(ts, "transformer.wte.weight");
    head.name = "lm_head.weight";
    ts.push_back(head);
    write_dir(d, ts, config_text());
    CHECK(greedy(d.dir) == want);
  }
  SUBCASE("a prefix on some names only") {
    tg::testing::TempDir d("tg_gpt2");
    std::vector<RawTensor> ts = fixture_tensors();
    find(ts, "wte.weight")->name = "transformer.wte.weight";
    write_dir(d, ts, config_text());
    CHECK(load_error(d.dir) == d.dir + "/model.safetensors: unexpected tensor 'wpe.weight' (not " +
                                   "part of a GPT-2 with n_layer 2)");
  }
  for (const bool bf16 : {false, true}) {
    SUBCASE(bf16 ? "BF16" : "F16") {
      tg::testing::TempDir d("tg_gpt2");
      std::vector<RawTensor> ts = fixture_tensors();
      for (RawTensor& t : ts) {
        t.bytes = narrowed(t.bytes, bf16);
        t.dtype = bf16 ? "BF16" : "F16";
      }
      write_dir(d, ts, config_text());
      std::string notes;
      train::LoadedModel lm = load(d.dir, &notes);
      CHECK(notes.find(std::string(bf16 ? "BF16" : "F16") + " weights widened to float32") !=
            std::string::npos);
      if (!bf16) {  // the same rounding as the F16 fixture's, so PyTorch's tokens
        const Golden g16 = read_golden(kFixtureF16);
        CHECK(run(*lm.model, g16.cases[1], g16.prompt_ids, true) == g16.cases[1].ids);
      }
    }
  }
}

TEST_CASE("GPT-2 loader: the tokenizer, the memory said before allocating") {
  SUBCASE("vocab.json without merges.txt") {
    tg::testing::TempDir d("tg_gpt2");
    write_dir(d, fixture_tensors(), config_text());
    fs::remove(d / "merges.txt");
    CHECK(load_error(d.dir) ==
          d.dir + ": has vocab.json but no merges.txt (a GPT-2 tokenizer needs both)");
  }
  SUBCASE("GPT-2's own files when DIR has none: 50257 ids do not fit vocab_size 1000") {
    if (!fs::exists(data::default_gpt2_dir() + "/encoder.json")) return;  // not fetched here
    tg::testing::TempDir d("tg_gpt2");
    write_dir(d, fixture_tensors(), config_text());
    fs::remove(d / "merges.txt");
    fs::remove(d / "vocab.json");
    CHECK(load_error(d.dir) ==
          d.dir +
              ": GPT-2's tokenizer (the folder has no vocab.json + merges.txt) has 50257 tokens "
              "but its config.json's vocab_size is 1000");
  }
  SUBCASE("no such directory") {
    CHECK(load_error("/nonexistent/gpt2") ==
          "/nonexistent/gpt2: not a directory (expected config.json and model.safetensors in it)");
  }
  nn::GPTConfig xl;
  xl.vocab_size = 50257;
  xl.context_length = 1024;
  xl.emb_dim = 1600;
  xl.n_heads = 25;
  xl.n_layers = 48;
  CHECK(train::gpt2_memory_note(xl, "xl", 0) ==
        "xl: gpt2-xl (1558M), n_layer 48, n_embd 1600, n_head 25, 1558M parameters (6.23 GB in "
        "float32); the GPTModel takes 6.75 GB (out_head and the causal masks of its own)");
  CHECK_THROWS_WITH_AS(train::gpt2_memory_note(xl, "xl", uint64_t(4) << 30),
                       doctest::Contains("more than this machine's 4.29 GB of memory"),
                       train::TrainError);
}

// ---- the KV cache --------------------------------------------------------------------------

TEST_CASE("KV cache: the same tokens as the uncached loop on a trained model, past the context") {
  // Three epochs of the trainer tests' small GPT (context 16) on its text.
  tg::testing::TempDir d("tg_gpt2");
  train::TrainOptions o;
  o.text_path = kGolden + "/train_text.txt";
  o.config = tg::testing::small_config();
  o.tokenizer = "bpe:256";
  o.epochs = 3;
  o.batch_size = 4;
  o.lr = 1e-3;
  o.eval_freq = 100;
  o.sample_tokens = 1;
  o.out_dir = d / "out";
  o.progress = 0;
  std::ostringstream out, err;
  train::run_training(o, out, err);
  train::LoadedModel lm = train::load_checkpoint_model(d / "out");
  const std::vector<int64_t> prompt = train::text_to_token_ids("The river ", *lm.tokenizer);
  for (const int64_t n : {int64_t(1), int64_t(5), 16 - int64_t(prompt.size()), int64_t(40)}) {
    for (const std::pair<double, int64_t>& s :
         {std::pair<double, int64_t>{0.0, 0}, {1.0, 0}, {1.5, 5}, {0.7, 50}}) {
      const Case c{"", 123, s.first, s.second, n, 16, {}};
      INFO("new tokens ", c.max_new_tokens, ", temperature ", c.temperature, ", top_k ", c.top_k);
      CHECK(run(*lm.model, c, prompt, true) == run(*lm.model, c, prompt, false));
    }
  }
  // A context_size below the model's: the crop starts earlier.
  const Case c{"", 5, 1.0, 0, 30, 6, {}};
  CHECK(run(*lm.model, c, prompt, true) == run(*lm.model, c, prompt, false));
}

namespace {

// Each attention route caches its own way: the book's formula, or the fused core (causal from an
// empty cache, the mask's rows for a chunk after it, no mask for one token).
void check_cache_rows(const std::string& route) {
  nn::GPTConfig cfg = tg::testing::small_config();
  cfg.qkv_bias = true;
  cfg.attention = route;
  Generator gen;
  gen.manual_seed(1);
  nn::GPTModel model(cfg, &gen);
  model.eval();
  NoGradGuard no_grad;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 16; ++i) ids.push_back((i * 37 + 11) % 257);
  const Tensor full = model(from_vector(ids, {1, 16}));  // (1, 16, 257)
  // The prompt in two pieces, then one token at a time.
  std::vector<Tensor> parts;
  parts.push_back(
      model.forward(from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + 5), {1, 5}), true));
  parts.push_back(model.forward(
      from_vector(std::vector<int64_t>(ids.begin() + 5, ids.begin() + 9), {1, 4}), true));
  for (int64_t t = 9; t < 16; ++t)
    parts.push_back(model.forward(from_vector(std::vector<int64_t>{ids[size_t(t)]}, {1, 1}), true));
  CHECK(model.current_pos == 16);
  int64_t row = 0;
  double maxdiff = 0;
  for (const Tensor& p : parts)
    for (int64_t t = 0; t < p.size(1); ++t, ++row) {
      const std::vector<float> a = p.select(0, 0).select(0, t).contiguous().to_vector<float>();
      const std::vector<float> b = full.select(0, 0).select(0, row).contiguous().to_vector<float>();
      for (size_t i = 0; i < a.size(); ++i)
        maxdiff = std::max(maxdiff, double(std::abs(a[i] - b[i])));
    }
  CHECK(row == 16);
  CHECK(maxdiff < 1e-5);
  CHECK_THROWS_WITH_AS(model.forward(from_vector(std::vector<int64_t>{1}, {1, 1}), true),
                       "GPTModel: the KV cache holds 16 of 16 positions, 1 more do not fit "
                       "(reset_kv_cache())",
                       std::invalid_argument);
  model.reset_kv_cache();
  CHECK(model.current_pos == 0);
  model.forward(from_vector(std::vector<int64_t>{1, 2}, {1, 2}), true);
  CHECK_THROWS_WITH_AS(model.forward(from_vector(std::vector<int64_t>{1, 2}, {2, 1}), true),
                       "MultiHeadAttention: the KV cache holds a batch of 1, got 2 (reset_cache())",
                       std::invalid_argument);
  // The book's forward ignores the cache and leaves it alone.
  const Tensor again = model(from_vector(ids, {1, 16}));
  CHECK(again.contiguous().to_vector<float>() == full.contiguous().to_vector<float>());
  // last_only: the last row of the same logits, through the cache or not.
  const auto max_diff = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    const std::vector<float> x = a.contiguous().to_vector<float>();
    const std::vector<float> y = b.contiguous().to_vector<float>();
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - y[i])));
    return d;
  };
  for (const bool use_cache : {false, true}) {
    INFO("use_cache = ", use_cache);
    model.reset_kv_cache();
    const Tensor one = model.forward(from_vector(ids, {1, 16}), use_cache, /*last_only=*/true);
    CHECK(max_diff(one, full.slice(1, 15, 16)) < 1e-5);
  }
  // A batch of two sequences through the cache in two pieces of 8 (the second piece's queries
  // see the first piece's keys through the mask's rows), the last piece with last_only: the
  // rows of the batch's full forward.
  std::vector<int64_t> two(ids);
  for (int64_t t = 0; t < 16; ++t) two.push_back(ids[size_t(15 - t)]);
  const Tensor full2 = model(from_vector(two, {2, 16}));  // (2, 16, 257)
  const auto piece = [&](int64_t from) {
    std::vector<int64_t> p;
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t t = from; t < from + 8; ++t) p.push_back(two[size_t(s * 16 + t)]);
    return from_vector(p, {2, 8});
  };
  model.reset_kv_cache();
  const Tensor first = model.forward(piece(0), true);
  const Tensor second = model.forward(piece(8), true, /*last_only=*/true);
  CHECK(max_diff(first, full2.slice(1, 0, 8)) < 1e-5);
  CHECK(max_diff(second, full2.slice(1, 15, 16)) < 1e-5);
}

}  // namespace

TEST_CASE("KV cache: rows through the cache equal the book's forward; misuse is refused") {
  for (const char* route : nn::kAttentionRoutes) SUBCASE(route) {
      check_cache_rows(route);
    }
}

TEST_CASE("linear on a single row leaves its bias alone (a 1-token forward)") {
  // The expanded bias of a (1, 1, out) result counted as contiguous, and linear accumulated x·Wᵀ
  // into the bias itself: every 1-token forward (a 1-token prompt, each KV-cache step) shifted it.
  const Tensor w = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor b = from_vector(std::vector<float>{10, 20, 30}, {3});
  const Tensor x = from_vector(std::vector<float>{1, 1}, {1, 1, 2});
  CHECK(linear(x, w, b).contiguous().to_vector<float>() == std::vector<float>{13, 27, 41});
  CHECK(b.to_vector<float>() == std::vector<float>{10, 20, 30});
  CHECK(linear(x, w, b).contiguous().to_vector<float>() == std::vector<float>{13, 27, 41});
}

namespace {

// A GPTModel in Hugging Face's GPT-2 names and layout (Conv1D in×out): the inverse of the loader,
// as gen_gpt2_hf.py's hf_state writes it.
std::vector<RawTensor> hf_export(const nn::GPTModel& model) {
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model.state_dict()) p.emplace(n, t.contiguous());
  auto raw = [](const std::string& name, const Tensor& t) {
    const std::vector<float> v = t.contiguous().to_vector<float>();
    return RawTensor{name, "F32", t.shape(),
                     std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
  };
  std::vector<RawTensor> out = {raw("wte.weight", p["tok_emb.weight"]),
                                raw("wpe.weight", p["pos_emb.weight"])};
  for (int64_t i = 0; i < model.cfg.n_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".",
                      b = "trf_blocks." + std::to_string(i) + ".";
    auto t = [&](const std::string& n) { return p[b + n].T(); };
    out.push_back(raw(h + "ln_1.weight", p[b + "norm1.scale"]));
    out.push_back(raw(h + "ln_1.bias", p[b + "norm1.shift"]));
    out.push_back(
        raw(h + "attn.c_attn.weight",
            cat({t("att.W_query.weight"), t("att.W_key.weight"), t("att.W_value.weight")}, 1)));
    out.push_back(raw(
        h + "attn.c_attn.bias",
        cat({p[b + "att.W_query.bias"], p[b + "att.W_key.bias"], p[b + "att.W_value.bias"]}, 0)));
    out.push_back(raw(h + "attn.c_proj.weight", t("att.out_proj.weight")));
    out.push_back(raw(h + "attn.c_proj.bias", p[b + "att.out_proj.bias"]));
    out.push_back(raw(h + "ln_2.weight", p[b + "norm2.scale"]));
    out.push_back(raw(h + "ln_2.bias", p[b + "norm2.shift"]));
    out.push_back(raw(h + "mlp.c_fc.weight", t("ff.layers.0.weight")));
    out.push_back(raw(h + "mlp.c_fc.bias", p[b + "ff.layers.0.bias"]));
    out.push_back(raw(h + "mlp.c_proj.weight", t("ff.layers.2.weight")));
    out.push_back(raw(h + "mlp.c_proj.bias", p[b + "ff.layers.2.bias"]));
  }
  out.push_back(raw("ln_f.weight", p["final_norm.scale"]));
  out.push_back(raw("ln_f.bias", p["final_norm.shift"]));
  return out;
}

std::string hf_config(const nn::GPTConfig& c) {
  return "{\"activation_function\": \"gelu_new\", \"n_embd\": " + std::to_string(c.emb_dim) +
         ", \"n_head\": " + std::to_string(c.n_heads) +
         ", \"n_layer\": " + std::to_string(c.n_layers) +
         ", \"n_positions\": " + std::to_string(c.context_length) +
         ", \"vocab_size\": " + std::to_string(c.vocab_size) + "}";
}

// One training step from DIR's weights on the golden text, context 16, quietly.
train::TrainOptions one_step_from(const std::string& dir, const std::string& out_dir) {
  train::TrainOptions o;
  o.text_path = kGolden + "/train_text.txt";
  o.init_from = dir;
  o.context_length = 16;
  o.batch_size = 2;
  o.max_steps = 1;
  o.eval_freq = 100;
  o.sample_tokens = 1;
  o.out_dir = out_dir;
  o.progress = 0;
  return o;
}

// The stored tokenizer of checkpoint ck, tampered with and written to bad: each refusal names the
// checkpoint and the entry. A gpt2 checkpoint from before kept neither entry and takes the build's
// GPT-2 tokenizer.
void check_tampered_tokenizers(const std::string& ck, const std::string& bad) {
  const struct {
    const char* drop;      // a tensor removed, or nullptr
    int64_t byte0, byte1;  // tokenizer.byte_order[0..1] then
    std::string message;   // after "CK: "
  } tampered[] = {
      {"tokenizer.byte_order", 0, 0,
       "checkpoint's tokenizer 'gpt2' lacks its tokenizer.byte_order"},
      {nullptr, 300, 1, "checkpoint's tokenizer.byte_order holds 300, not a byte"},
      {nullptr, 7, 7,
       "checkpoint's tokenizer does not load (vocabulary: token '\\x07' appears twice (ids 0 and "
       "1))"},
      {"tokenizer.merges", 0, 0, "tokenizer has 50257 tokens but the model's vocab_size is 1000"},
  };
  for (const auto& t : tampered) {
    SafeTensors st = load_safetensors(ck);
    std::vector<std::pair<std::string, Tensor>> kept;
    for (auto& [name, tensor] : st.tensors) {
      if (t.drop && name == t.drop) continue;
      if (t.drop && std::string(t.drop) == "tokenizer.merges" && name == "tokenizer.byte_order")
        continue;
      if (!t.drop && name == "tokenizer.byte_order") {
        tensor = tensor.contiguous();
        tensor.data<int64_t>()[0] = t.byte0;
        tensor.data<int64_t>()[1] = t.byte1;
      }
      kept.emplace_back(name, tensor);
    }
    save_safetensors(bad, kept, st.metadata);
    CHECK_THROWS_WITH_AS(train::load_checkpoint_model(bad), (bad + ": " + t.message).c_str(),
                         train::TrainError);
  }
}

}  // namespace

TEST_CASE("train --init-from DIR: a run starts from GPT-2's weights (library)") {
  // A GPT-2-vocabulary model small enough to write here: emb 8, 2 heads, 1 layer, 64 positions.
  if (!fs::exists(data::default_gpt2_dir() + "/encoder.json")) return;  // not fetched here
  nn::GPTConfig cfg;
  cfg.emb_dim = 8;
  cfg.n_heads = 2;
  cfg.n_layers = 1;
  cfg.context_length = 64;
  cfg.qkv_bias = true;
  Generator gen;
  gen.manual_seed(9);
  nn::GPTModel src(cfg, &gen);
  tg::testing::TempDir d("tg_gpt2");
  fs::create_directories(d / "gpt2");
  spit(d / "gpt2/config.json", hf_config(cfg));
  spit(d / "gpt2/model.safetensors", safetensors_bytes(hf_export(src)));
  // The export loads back to the same model (out_head becomes wte: tie it in src first).
  {
    NoGradGuard no_grad;
    src.out_head->weight.copy_(src.tok_emb->weight);
  }
  std::ostringstream notes;
  const auto back =
      train::load_gpt2_weights(d / "gpt2", train::read_gpt2_config(d / "gpt2"), notes);
  for (const auto& entry : src.state_dict()) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    INFO(name);
    for (const auto& [n2, t2] : back->state_dict())
      if (n2 == name)
        CHECK(t.contiguous().to_vector<float>() == t2.contiguous().to_vector<float>());
  }
  // One step at lr 0 leaves the weights as loaded; --context 16 keeps wpe's first 16 rows.
  train::TrainOptions o = one_step_from(d / "gpt2", d / "out");
  o.lr = 0;
  o.weight_decay = 0;
  std::ostringstream out, err;
  train::run_training(o, out, err);
  CHECK(err.str().find("n_layer 1, n_embd 8, n_head 2") != std::string::npos);
  const train::LoadedModel lm = train::load_checkpoint_model(d / "out");
  CHECK(lm.cfg.context_length == 16);
  CHECK(lm.tokenizer_spec == "gpt2");
  for (const auto& entry : lm.model->state_dict()) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    INFO(name);
    for (const auto& [n2, t2] : back->state_dict()) {
      if (n2 != name) continue;
      const Tensor want = name == "pos_emb.weight" ? t2.slice(0, 0, 16)
                          : name.find(".mask") != std::string::npos
                              ? t2.slice(0, 0, 16).slice(1, 0, 16)
                              : t2;
      CHECK(t.contiguous().to_vector<float>() == want.contiguous().to_vector<float>());
    }
  }
}

TEST_CASE("train --init-from DIR: DIR's own tokenizer, kept in the checkpoint") {
  // The fixture has its own vocab.json + merges.txt (1000 tokens, config.json's vocab_size):
  // before, the run took the build's GPT-2 tokenizer and refused "more than preset custom's
  // vocab_size 1000", a preset never given.
  if (!fs::exists(data::default_gpt2_dir() + "/encoder.json")) return;  // not fetched here
  tg::testing::TempDir d("tg_gpt2");
  const train::TrainOptions o = one_step_from(kFixture, d / "out");
  std::ostringstream out, err;
  train::run_training(o, out, err);
  const auto fixture = std::make_unique<data::Tokenizer>(
      data::Tokenizer::from_gpt2_files(kFixture + "/vocab.json", kFixture + "/merges.txt"));
  const std::string text = slurp(o.text_path);
  const train::LoadedModel lm = train::load_checkpoint_model(d / "out");
  CHECK(lm.tokenizer->n_vocab() == 1000);
  CHECK(lm.tokenizer->encode(text) == fixture->encode(text));
  CHECK(lm.tokenizer->decode_bytes(fixture->encode(text)) == text);
  // Resumed, the run keeps that tokenizer (it is the checkpoint's, not the build's).
  train::TrainOptions r;
  r.resume_dir = d / "out";
  r.max_steps = 2;
  r.progress = 0;
  train::run_training(r, out, err);
  CHECK(train::load_checkpoint_model(d / "out").tokenizer->encode(text) == fixture->encode(text));

  check_tampered_tokenizers(d / "out/checkpoint.safetensors", d / "bad.safetensors");

  // A folder whose tokenizer does not fit its config.json: the error names the folder and both.
  const struct {
    std::vector<std::string> files;  // copied from the fixture
    std::string message;             // after "DIR: "
  } cases[] = {
      {{"config.json", "model.safetensors"},
       "GPT-2's tokenizer (the folder has no vocab.json + merges.txt) has 50257 tokens but its "
       "config.json's vocab_size is 1000"},
      {{"config.json", "model.safetensors", "vocab.json"},
       "has vocab.json but no merges.txt (a GPT-2 tokenizer needs both)"},
  };
  int k = 0;
  for (const auto& c : cases) {
    const std::string dir = d / ("dir" + std::to_string(k++));
    fs::create_directories(dir);
    for (const std::string& f : c.files) fs::copy_file(kFixture + "/" + f, dir + "/" + f);
    train::TrainOptions bad = o;
    bad.init_from = dir;
    bad.out_dir = d / "bad";
    CHECK_THROWS_WITH_AS(train::run_training(bad, out, err), (dir + ": " + c.message).c_str(),
                         train::TrainError);
  }
}

namespace {

// The last position's logits through the cache (last_only), as float32 values.
std::vector<float> cached_last_logits(nn::GPTModel& model, const std::vector<int64_t>& ids) {
  model.reset_kv_cache();
  const Tensor l = model.forward(from_vector(ids, {1, int64_t(ids.size())}), true, true);
  return l.to(DType::Float32).contiguous().to_vector<float>();
}

}  // namespace

TEST_CASE("bf16 generation: model.to(BFloat16), a bf16 KV cache, cached tokens equal uncached") {
  const Golden g = read_golden(kFixture);
  train::LoadedModel lm = load(kFixture);
  NoGradGuard no_grad;
  const std::vector<float> f32 = cached_last_logits(*lm.model, g.prompt_ids);
  for (const char* route : nn::kAttentionRoutes) SUBCASE(route) {
      nn::GPTConfig cfg = lm.cfg;
      cfg.attention = route;
      nn::GPTModel model(cfg);
      model.load_state_dict(lm.model->state_dict());
      model.eval();
      const nn::NamedTensors before = model.state_dict();
      model.to(DType::BFloat16);
      // Every parameter and floating buffer converted in place, each rounded once; names and
      // order kept (model.to(torch.bfloat16)).
      const nn::NamedTensors after = model.state_dict();
      REQUIRE(after.size() == before.size());
      for (size_t i = 0; i < after.size(); ++i) {
        CHECK(after[i].first == before[i].first);
        if (!is_floating(before[i].second.dtype())) continue;
        CHECK_MESSAGE(after[i].second.dtype() == DType::BFloat16, after[i].first);
        CHECK(after[i].second.to(DType::Float32).to_vector<float>() ==
              before[i].second.to(DType::BFloat16).to(DType::Float32).to_vector<float>());
      }
      // Greedy and sampled (the golden cases' settings, context crops included): the cached
      // route's tokens are the uncached loop's.
      for (const Case& c : g.cases) {
        INFO("case ", c.name);
        CHECK(run(model, c, g.prompt_ids, true) == run(model, c, g.prompt_ids, false));
      }
      // The cache holds bf16 keys and values: half float32's bytes per token.
      const std::vector<float> b16 = cached_last_logits(model, g.prompt_ids);
      const auto& blk = static_cast<const nn::TransformerBlock&>((*model.trf_blocks)[0]);
      CHECK(blk.att->cache_k.dtype() == DType::BFloat16);
      CHECK(blk.att->cache_v.dtype() == DType::BFloat16);
      // Near float32's logits. Each weight and each op's output is rounded to bf16 (8 bits:
      // relative error up to 2^-9 each); through 2 blocks that is a few dozen roundings, whose
      // errors add up like a random walk to a few 2^-9 of the logits' scale, so 2^-5 (3%) of the
      // largest |logit| leaves room without letting a wrong model (errors of order 1) through.
      REQUIRE(b16.size() == f32.size());
      double maxdiff = 0, scale = 0;
      for (size_t i = 0; i < f32.size(); ++i) {
        maxdiff = std::max(maxdiff, double(std::abs(b16[i] - f32[i])));
        scale = std::max(scale, double(std::abs(f32[i])));
      }
      MESSAGE("bf16 logits: maxdiff " << maxdiff << " of max |logit| " << scale);
      CHECK(maxdiff > 0);  // it did compute in bf16
      CHECK(maxdiff <= scale / 32);
    }
}
