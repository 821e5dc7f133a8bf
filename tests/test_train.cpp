// Chapter 5's trainer: the model's initial weights, a few epochs with dropout, evaluation and
// samples against PyTorch goldens (tests/golden/gen_train.py), checkpoint resume, Ctrl-C, and the
// one-line errors of `tapegrad train` / `generate`.
#include <doctest/doctest.h>
#include <unistd.h>
#include <bit>
#include <functional>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli_options.h"
#include "app/commands.h"
#include "core/json.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "nn/gpt.h"
#include "tests/train_testing.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/session.h"
#include "train/trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

const std::string kGolden = TG_GOLDEN_DIR;

// A fresh scratch directory per call, removed by the caller's Scratch destructor.
struct Scratch {
  fs::path dir;
  Scratch() {
    static int n = 0;
    dir = fs::temp_directory_path() /
          ("tg_test_train_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

struct Golden {
  std::map<std::string, std::vector<double>> init, final_;  // name -> numel, sum, first 4
  std::vector<std::vector<double>> evals;                   // step, train, val
  std::vector<double> steps;
  std::vector<std::vector<int64_t>> samples;
};

Golden read_golden() {
  std::ifstream in(kGolden + "/train_small.txt");
  REQUIRE_MESSAGE(in.good(), "missing tests/golden/train_small.txt");
  Golden g;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind == "init" || kind == "final") {
      std::string name;
      ss >> name;
      std::vector<double> v;
      double x;
      while (ss >> x) v.push_back(x);
      (kind == "init" ? g.init : g.final_)[name] = v;
    } else if (kind == "eval") {
      std::vector<double> v(3);
      ss >> v[0] >> v[1] >> v[2];
      g.evals.push_back(v);
    } else if (kind == "step") {
      int i;
      double l;
      ss >> i >> l;
      g.steps.push_back(l);
    } else if (kind == "sample") {
      int e;
      ss >> e;
      std::vector<int64_t> ids;
      int64_t id;
      while (ss >> id) ids.push_back(id);
      g.samples.push_back(ids);
    }
  }
  return g;
}

using testing::small_config;

train::TrainOptions small_options(const Scratch& s) {
  train::TrainOptions o;
  o.text_path = kGolden + "/train_text.txt";
  o.config = small_config();
  o.tokenizer = "bpe:256";  // raw bytes
  o.epochs = 2;
  o.batch_size = 4;
  o.lr = 1e-3;
  o.weight_decay = 0.1;
  o.eval_freq = 4;
  o.eval_iter = 2;
  o.seed = 123;
  o.start_context = "The ";
  o.sample_tokens = 8;
  o.out_dir = s / "out";
  o.progress = 0;
  return o;
}

// One epoch of the small config, leaving its checkpoint in out_dir.
void train_one_epoch(const Scratch& s, const std::string& out_dir) {
  std::ostringstream o, e;
  train::TrainOptions a = small_options(s);
  a.epochs = 1;
  a.out_dir = out_dir;
  train::run_training(a, o, e);
}

void check_param(const nn::NamedTensors& sd, const std::string& name,
                 const std::vector<double>& want, double tol) {
  for (const auto& [n, t] : sd) {
    if (n != name) continue;
    const std::vector<float> v = t.to_vector<float>();
    REQUIRE(double(v.size()) == want[0]);
    double sum = 0;
    for (float x : v) sum += x;
    CHECK_MESSAGE(std::abs(sum - want[1]) <= tol * (1 + std::abs(want[1])), name);
    for (int i = 0; i < 4; ++i) CHECK_MESSAGE(std::abs(v[i] - want[2 + i]) <= tol, name);
    return;
  }
  FAIL("no parameter " << name);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a CLI command function with argv, capturing stdout and stderr.
struct CliRun {
  int rc;
  std::string out, err;
};
CliRun run_cli(int (*fn)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  const int rc = fn(int(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {rc, out.str(), err.str()};
}

// The error is one line "tapegrad <command>: ..." naming the problem (informational lines such
// as "resuming ..." may precede it), and the exit status is `rc`: 2 for a bad command line, 1 for
// bad input or a failure.
void check_one_line_error(const CliRun& r, const std::string& needle, int rc = 1) {
  CHECK(r.rc == rc);
  std::istringstream lines(r.err);
  std::string line;
  int errors = 0;
  while (std::getline(lines, line))
    if (line.rfind("tapegrad ", 0) == 0) {
      ++errors;
      CHECK_MESSAGE(line.find(needle) != std::string::npos, r.err);
    }
  CHECK_MESSAGE(errors == 1, r.err);
  CHECK(r.err.back() == '\n');
}

}  // namespace

TEST_CASE("GPTModel: book names, order and PyTorch's initial weights under manual_seed(123)") {
  const Golden g = read_golden();
  manual_seed(123);
  nn::GPTModel model(small_config());
  const auto sd = model.state_dict();
  // PyTorch's state_dict order: tok_emb, pos_emb, then block 0's att (mask, W_query, W_key,
  // W_value, out_proj), ff, norm1, norm2, ...
  REQUIRE(sd.size() > 8);
  CHECK(sd[0].first == "tok_emb.weight");
  CHECK(sd[1].first == "pos_emb.weight");
  CHECK(sd[2].first == "trf_blocks.0.att.mask");  // a module's buffers precede its children
  CHECK(sd[3].first == "trf_blocks.0.att.W_query.weight");
  CHECK(sd[6].first == "trf_blocks.0.att.out_proj.weight");
  CHECK(sd[8].first == "trf_blocks.0.ff.layers.0.weight");
  CHECK(sd.back().first == "out_head.weight");
  // embeddings + out_head, 2 blocks (W_q/k/v, out_proj, ff, two norms), final_norm
  CHECK(model.num_parameters() ==
        257 * 32 * 2 + 16 * 32 +
            2 * (3 * 32 * 32 + 32 * 32 + 32 + 2 * 4 * 32 * 32 + 4 * 32 + 32 + 4 * 32) + 2 * 32);
  for (const auto& [name, want] : g.init) check_param(sd, name, want, 1e-6);
}

TEST_CASE("GPTModel: the fused attention route is the book's, dropout draws included") {
  nn::GPTConfig cfg = small_config();
  std::vector<Tensor> logits, grads;
  std::vector<double> next;
  for (const char* route : {"book", "fused"}) {
    CAPTURE(route);
    cfg.attention = route;
    manual_seed(123);
    nn::GPTModel model(cfg);  // training mode: every dropout draws, attention's included
    const Tensor ids =
        tensor({{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, {8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2}});
    const Tensor y = model(ids);
    next.push_back(rand({1}).item<double>());
    (y * y).mean().backward();
    logits.push_back(y);
    grads.push_back(model.trf_blocks->named_parameters()[1].second.grad());  // W_query
  }
  CHECK(next[0] == next[1]);  // the same draws, in the same order
  auto rel = [](const Tensor& a, const Tensor& b) {
    const auto x = a.to_vector<double>(), w = b.to_vector<double>();
    double d = 0, m = 0;
    for (size_t i = 0; i < x.size(); ++i)
      d = std::max(d, std::abs(x[i] - w[i])), m = std::max(m, std::abs(w[i]));
    return d / m;
  };
  CHECK(rel(logits[1], logits[0]) < 1e-5);
  CHECK(rel(grads[1], grads[0]) < 1e-5);
  cfg.attention = "flash";
  CHECK_THROWS_WITH_AS(cfg.validate(), "GPT config: attention must be fused or book, got 'flash'",
                       std::invalid_argument);
}

TEST_CASE("GPTConfig: presets, validation, JSON round trip") {
  const nn::GPTConfig c = nn::gpt_preset("gpt2-124m");
  CHECK(c.vocab_size == 50257);
  CHECK(c.emb_dim == 768);
  CHECK(c.n_layers == 12);
  CHECK(c.context_length == 256);
  CHECK_FALSE(c.qkv_bias);
  CHECK(nn::GPTConfig::parse(c.str()) == c);
  CHECK(c.str() ==
        "{\"vocab_size\": 50257, \"context_length\": 256, \"emb_dim\": 768, \"n_heads\": 12, "
        "\"n_layers\": 12, \"drop_rate\": 0.10000000000000001, \"qkv_bias\": false}");
  CHECK_THROWS_WITH_AS(nn::gpt_preset("gpt5"), doctest::Contains("unknown preset 'gpt5'"),
                       std::invalid_argument);
  nn::GPTConfig bad = c;
  bad.n_heads = 7;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("divisible"), std::invalid_argument);
  // --pad-vocab: a way of running the model, neither saved nor compared (as attention).
  nn::GPTConfig padded = c;
  padded.pad_vocab = 64;
  CHECK(padded.padded_vocab_size() == 50304);  // the book's ch05/10 figure
  CHECK(c.padded_vocab_size() == 50257);
  CHECK(padded == c);
  CHECK(padded.str() == c.str());
  padded.pad_vocab = 0;
  CHECK_THROWS_WITH_AS(padded.validate(), "GPT config: pad_vocab must be in 1..65536, got 0",
                       std::invalid_argument);

  // parse refuses with one line naming the key or the place (core/json.h's reader underneath).
  const std::string ok = c.str();
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = ok;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const auto col = [](const std::string& t, const std::string& what) {
    return std::to_string(t.find(what) + 1);
  };
  struct Bad {
    std::string text, message;
  };
  const std::string twice = with("\"emb_dim\"", "\"n_layers\": 2, \"emb_dim\"");
  const std::string frac = with("\"n_heads\": 12", "\"n_heads\": 1.5");
  const std::string str = with("\"n_layers\": 12", "\"n_layers\": \"12\"");
  const std::string bias = with("false", "0");
  const std::vector<Bad> cases = {
      {ok + " x",
       "GPT config: 1:" + std::to_string(ok.size() + 2) + ": unexpected 'x' after the value"},
      {twice, "GPT config: 1:" + col(twice, "\"n_layers\": 12") + ": duplicate key 'n_layers'"},
      {with("\"emb_dim\": 768, ", ""),
       "GPT config: missing \"emb_dim\" in " + with("\"emb_dim\": 768, ", "")},
      {frac, "GPT config: 1:" + col(frac, "1.5") + ": \"n_heads\" must be an integer, got 1.5"},
      {str, "GPT config: 1:" + col(str, "\"12\"") + ": \"n_layers\" must be an integer"},
      {bias, "GPT config: 1:" + col(bias, "0}") + ": \"qkv_bias\" must be true or false"},
      {"[1]", "GPT config: expected a JSON object, got [1]"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.text);
    CHECK_THROWS_WITH_AS(nn::GPTConfig::parse(b.text), b.message.c_str(), std::invalid_argument);
  }
}

TEST_CASE("train_model_simple with dropout equals PyTorch's run step for step") {
  const Golden g = read_golden();
  Scratch s;
  std::ostringstream out, err;
  const train::TrainResult r = train::run_training(small_options(s), out, err);
  REQUIRE(r.step_losses.size() == g.steps.size());
  for (size_t i = 0; i < g.steps.size(); ++i)
    CHECK_MESSAGE(std::abs(r.step_losses[i] - g.steps[i]) <= 1e-4, "step " << i);
  REQUIRE(r.evals.size() == g.evals.size());
  for (size_t i = 0; i < g.evals.size(); ++i) {
    CHECK(r.evals[i].step == int64_t(g.evals[i][0]));
    CHECK(std::abs(r.evals[i].train_loss - g.evals[i][1]) <= 1e-4);
    CHECK(std::abs(r.evals[i].val_loss - g.evals[i][2]) <= 1e-4);
  }
  // The log is the book's format.
  CHECK(out.str().rfind("Ep 1 (Step 000000): Train loss 5.812, Val loss 5.761\n", 0) == 0);
  // Greedy samples after each epoch, and the final weights.
  const train::LoadedModel lm = train::load_checkpoint_model(s / "out");
  REQUIRE(g.samples.size() == 2);
  REQUIRE(r.samples.size() == 2);
  const std::vector<int64_t> start = train::text_to_token_ids("The ", *lm.tokenizer);
  CHECK(train::generate_text_simple(*lm.model, start, 8, 16) == g.samples[1]);
  CHECK(r.samples[1] == train::token_ids_to_text(g.samples[1], *lm.tokenizer));
  for (const auto& [name, want] : g.final_) check_param(lm.model->state_dict(), name, want, 1e-4);
  CHECK(fs::exists(s / "out/loss.svg"));
  CHECK(slurp(s / "out/loss.svg").find("Validation loss") != std::string::npos);
}

// The step losses of a stopped run followed by those of the run that resumed it.
static std::vector<double> joined(const train::TrainResult& first,
                                  const train::TrainResult& second) {
  std::vector<double> all = first.step_losses;
  all.insert(all.end(), second.step_losses.begin(), second.step_losses.end());
  return all;
}

// The step losses of a run of small_options (tweaked by `set`) stopped after 10 steps, then of
// the run that resumed it with no option given.
static std::vector<double> stopped_and_resumed(
    const Scratch& s, const std::function<void(train::TrainOptions&)>& set) {
  std::ostringstream out, err;
  train::TrainOptions a = small_options(s);
  set(a);
  a.max_steps = 10;
  const train::TrainResult first = train::run_training(a, out, err);
  train::TrainOptions b = small_options(s);
  b.config.reset();
  b.resume_dir = s / "out";
  return joined(first, train::run_training(b, out, err));
}

TEST_CASE("--resume continues to exactly the losses of an uninterrupted run") {
  Scratch s;
  std::ostringstream out, err;
  train::TrainOptions full_opt = small_options(s);
  full_opt.out_dir = s / "full";
  const train::TrainResult full = train::run_training(full_opt, out, err);

  SUBCASE("stopped mid-epoch by max_steps") {
    train::TrainOptions a = small_options(s);
    a.max_steps = 10;
    const train::TrainResult first = train::run_training(a, out, err);
    CHECK(first.interrupted);
    REQUIRE(first.step_losses.size() == 10);
    train::TrainOptions b = small_options(s);
    b.config.reset();
    b.resume_dir = s / "out";
    const train::TrainResult second = train::run_training(b, out, err);
    CHECK(joined(first, second) == full.step_losses);  // bit for bit
    REQUIRE(second.evals.size() == full.evals.size());
    for (size_t i = 0; i < full.evals.size(); ++i) {
      CHECK(second.evals[i].train_loss == full.evals[i].train_loss);
      CHECK(second.evals[i].val_loss == full.evals[i].val_loss);
    }
    CHECK(second.samples.back() == full.samples.back());
  }
  SUBCASE("at an epoch boundary, with more epochs asked on resume") {
    train::TrainOptions a = small_options(s);
    a.epochs = 1;
    const train::TrainResult first = train::run_training(a, out, err);
    train::TrainOptions b;
    b.resume_dir = s / "out";
    b.epochs = 2;
    b.explicit_flags = {"epochs"};
    b.progress = 0;
    const train::TrainResult second = train::run_training(b, out, err);
    CHECK(joined(first, second) == full.step_losses);
  }
  SUBCASE("Ctrl-C: SIGINT finishes the step, saves and stops") {
    train::stop_requested() = false;
    auto old = std::signal(SIGINT, [](int) { train::stop_requested() = true; });
    train::TrainOptions a = small_options(s);
    a.on_step = [](int64_t step) {
      if (step == 40) std::raise(SIGINT);
    };
    const train::TrainResult first = train::run_training(a, out, err);
    std::signal(SIGINT, old);
    train::stop_requested() = false;
    CHECK(first.interrupted);
    REQUIRE(first.step_losses.size() == 41);
    train::TrainOptions b;
    b.resume_dir = s / "out";
    b.progress = 0;
    const train::TrainResult second = train::run_training(b, out, err);
    CHECK(joined(first, second) == full.step_losses);
  }
}

TEST_CASE("--attention: both routes train alike; --resume keeps the checkpoint's route") {
  Scratch s;
  std::ostringstream out, err;
  std::vector<double> losses[2];
  for (int route = 0; route < 2; ++route) {
    train::TrainOptions o = small_options(s);
    o.attention = route == 0 ? "book" : "fused";
    o.out_dir = s / o.attention;
    losses[route] = train::run_training(o, out, err).step_losses;
  }
  REQUIRE(losses[0].size() == losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i)  // the same model: rounding apart
    CHECK_MESSAGE(std::abs(losses[0][i] - losses[1][i]) <= 1e-5, "step " << i);
  // Stopped on the book's route, resumed without --attention: still the book's, bit for bit.
  CHECK(stopped_and_resumed(s, [](train::TrainOptions& o) { o.attention = "book"; }) == losses[0]);
}

TEST_CASE("--precision bf16: autocast's losses follow float32's; the checkpoint stays float32") {
  Scratch s;
  std::ostringstream out, err;
  std::vector<double> losses[2];
  for (int p = 0; p < 2; ++p) {
    train::TrainOptions o = small_options(s);
    o.precision = p == 0 ? "fp32" : "bf16";
    o.out_dir = s / o.precision;
    losses[p] = train::run_training(o, out, err).step_losses;
  }
  REQUIRE(losses[0].size() == losses[1].size());
  REQUIRE(losses[0].size() >= 20);
  bool any_differs = false;
  for (size_t i = 0; i < losses[0].size(); ++i) {
    // bfloat16 keeps 8 bits: a loss of ~3 moves by a few 1e-3 over these steps, not more.
    CHECK_MESSAGE(std::abs(losses[1][i] - losses[0][i]) <= 0.02 * losses[0][i], "step " << i);
    any_differs = any_differs || losses[1][i] != losses[0][i];
  }
  CHECK(any_differs);  // the bf16 run did compute in bf16
  const tg::SafeTensors ck = tg::load_safetensors(s / "bf16/checkpoint.safetensors");
  for (const auto& [name, t] : ck.tensors) CHECK_MESSAGE(t.dtype() != DType::BFloat16, name);
}

// --precision bf16-pure: model.to(torch.bfloat16) as the book's ch05/10 (weights, gradients and
// AdamW's moments in bf16). Its losses stay near float32's; the checkpoint keeps float32 tensors
// holding bf16 values, and a resumed run continues to the uninterrupted run's bits.
TEST_CASE("--precision bf16-pure: the model in bf16, losses near float32's, resume exact") {
  Scratch s;
  std::ostringstream out, err;
  train::TrainOptions f = small_options(s), p = small_options(s);
  f.out_dir = s / "fp32";
  p.precision = "bf16-pure";
  p.out_dir = s / "pure";
  const std::vector<double> fl = train::run_training(f, out, err).step_losses;
  const train::TrainResult whole = train::run_training(p, out, err);
  REQUIRE(whole.step_losses.size() == fl.size());
  bool any_differs = false;
  for (size_t i = 0; i < fl.size(); ++i) {
    // Every op and the update round to 8 bits: a loss of ~3 drifts by up to ~1e-2 over these steps.
    CHECK_MESSAGE(std::abs(whole.step_losses[i] - fl[i]) <= 0.03 * fl[i], "step " << i);
    any_differs = any_differs || whole.step_losses[i] != fl[i];
  }
  CHECK(any_differs);
  const tg::SafeTensors ck = tg::load_safetensors(s / "pure/checkpoint.safetensors");
  for (const auto& [name, t] : ck.tensors) {
    if (t.dtype() != DType::Float32) continue;  // the tokenizer's and the trainer's int64 entries
    CAPTURE(name);
    const Tensor c = t.contiguous();
    int off = 0;  // values that are not a bf16's: the weights and moments are bf16 in float32
    for (int64_t i = 0; i < c.numel(); ++i)
      off += (std::bit_cast<uint32_t>(c.data<float>()[i]) & 0xFFFFu) != 0;
    CHECK(off == 0);
  }
  CHECK(stopped_and_resumed(s, [](train::TrainOptions& o) { o.precision = "bf16-pure"; }) ==
        whole.step_losses);  // bit for bit
  // One process, one micro-batch: the micro-batch exchange is float32.
  check_one_line_error(
      run_cli(cli::train_main, {"train", "--text", kGolden + "/train_text.txt", "--precision",
                                "bf16-pure", "--micro-batches", "2", "--out", s / "k2"}),
      "tapegrad train: --precision bf16-pure runs one micro-batch in one process, not with "
      "--micro-batches 2",
      2);
}

TEST_CASE("bad input: text, context, preset or tokenizer: one clear line and a non-zero exit") {
  Scratch s;
  const std::string text = kGolden + "/train_text.txt";
  const std::string out = s / "o";
  SUBCASE("missing text") {
    check_one_line_error(
        run_cli(cli::train_main, {"train", "--text", s / "nope.txt", "--out", out}),
        "cannot read text file");
  }
  SUBCASE("text shorter than one window") {
    std::ofstream(s / "short.txt") << "Just a few words, far fewer than one window.";
    check_one_line_error(run_cli(cli::train_main, {"train", "--text", s / "short.txt",
                                                   "--tokenizer", "bpe:256", "--out", out}),
                         "text too short");
  }
  SUBCASE("context larger than the preset allows") {
    check_one_line_error(
        run_cli(cli::train_main, {"train", "--text", text, "--context", "4096", "--out", out}),
        "--context 4096 is outside what preset tiny allows", 2);
  }
  SUBCASE("unknown preset") {
    check_one_line_error(
        run_cli(cli::train_main, {"train", "--text", text, "--preset", "gpt9", "--out", out}),
        "unknown preset 'gpt9'", 2);
  }
  SUBCASE("unknown tokenizer") {
    check_one_line_error(
        run_cli(cli::train_main, {"train", "--text", text, "--tokenizer", "sentencepiece"}),
        "unknown tokenizer 'sentencepiece'", 2);
  }
}

TEST_CASE("bad input: bad numbers, unknown flags, no checkpoint: one clear line, non-zero exit") {
  Scratch s;
  const std::string text = kGolden + "/train_text.txt";
  const std::string out = s / "o";
  struct Bad {
    std::vector<std::string> args;  // args[0] picks the command
    int rc;
    std::string needle;
  };
  const std::vector<Bad> table = {
      {{"train", "--epochs", "ten"}, 2, "--epochs expects an integer from 0 to 1000000, got 'ten'"},
      {{"train", "--frobnicate"}, 2, "unknown option '--frobnicate' (try --help)"},
      {{"train", "--threads", "4294967297"},
       2,
       "--threads expects an integer from 1 to 1024, got '4294967297'"},
      {{"train", "--clip-grad", "nan"}, 2, "--clip-grad expects a number >= 0, got 'nan'"},
      {{"train", "--weight-decay", "inf"}, 2, "--weight-decay expects a number >= 0, got 'inf'"},
      {{"train", "--warmup-steps", "-5"},
       2,
       "--warmup-steps expects an integer from 0 to 1099511627776, got '-5'"},
      {{"train", "--max-steps", "0"},
       2,
       "--max-steps expects an integer from 1 to 1099511627776, got '0'"},
      {{"train", "--attention", "flash"}, 2, "--attention expects fused or book, got 'flash'"},
      {{"train", "--log", s / "no-such-dir/log.jsonl", "--text", text, "--out", out},
       1,
       "cannot write log file"},
      {{"generate", "--threads", "100000", "--checkpoint", out},
       2,
       "--threads expects an integer from 1 to 1024, got '100000'"},
      {{"generate"}, 2, "--checkpoint DIR or --gpt2 DIR is required"},
      {{"generate", "--checkpoint", s / "none"}, 1, "no such checkpoint"},
  };
  for (const Bad& b : table) {
    CAPTURE(b.needle);
    const auto command = b.args[0] == "train" ? cli::train_main : cli::generate_main;
    check_one_line_error(run_cli(command, b.args), b.needle, b.rc);
  }
}

TEST_CASE("bad input: a checkpoint from another config, or one that cannot be, is refused") {
  Scratch s;
  const std::string out = s / "o";
  train_one_epoch(s, out);
  // resuming with a different data pipeline
  check_one_line_error(run_cli(cli::train_main, {"train", "--resume", out, "--tokenizer", "gpt2"}),
                       "does not match the checkpoint", 2);
  // a checkpoint whose weights do not fit its stated config
  tg::SafeTensors st = tg::load_safetensors(out + "/checkpoint.safetensors");
  nn::GPTConfig other = small_config();
  other.emb_dim = 64;
  st.metadata["config"] = other.str();
  tg::save_safetensors(s / "other.safetensors", st.tensors, st.metadata);
  check_one_line_error(
      run_cli(cli::generate_main, {"generate", "--checkpoint", s / "other.safetensors"}),
      "another config");
  // a resume position or history the file cannot have come from
  auto resume_with = [&](const std::string& key, const std::string& value) {
    tg::SafeTensors bad = tg::load_safetensors(out + "/checkpoint.safetensors");
    bad.metadata[key] = value;
    const std::string dir = s / ("bad-" + key);
    std::filesystem::create_directories(dir);
    tg::save_safetensors(dir + "/checkpoint.safetensors", bad.tensors, bad.metadata);
    return run_cli(cli::train_main, {"train", "--resume", dir, "--epochs", "3"});
  };
  check_one_line_error(resume_with("history", "[{\"step\": 0}]"),
                       "checkpoint history entry lacks 'epoch'");
  check_one_line_error(resume_with("batch", "99999"), "checkpoint position is out of range");
  check_one_line_error(resume_with("epoch", "-5"), "checkpoint position is out of range");
  // not a safetensors file at all
  std::ofstream(s / "junk.safetensors") << "hello";
  check_one_line_error(
      run_cli(cli::generate_main, {"generate", "--checkpoint", s / "junk.safetensors"}),
      "not a valid safetensors file");
}

TEST_CASE("bad input: NaN loss stops with a message and keeps the last good checkpoint") {
  Scratch s;
  const std::string out = s / "o";
  train_one_epoch(s, out);
  const std::string before = slurp(out + "/checkpoint.safetensors");
  // An absurd learning rate blows the weights up within a step or two.
  const CliRun r = run_cli(cli::train_main, {"train", "--resume", out, "--epochs", "2", "--lr",
                                             "1e30", "--no-progress"});
  check_one_line_error(r, "the last good checkpoint is " + out + "/checkpoint.safetensors");
  CHECK(r.err.find("loss is nan") != std::string::npos);
  CHECK(slurp(out + "/checkpoint.safetensors") == before);
}

TEST_CASE("utf8_incomplete_tail: the bytes a stream holds back until their character is whole") {
  const struct {
    const char* bytes;
    size_t tail;
  } rows[] = {
      {"", 0},         {"abc", 0},          {"a\xC3", 1},        {"a\xC3\xA9", 0},
      {"\xE4\xB8", 2}, {"\xE4\xB8\xAD", 0}, {"\xF0\x9F\x98", 3}, {"\xF0\x9F\x98\x80", 0},
      {"x\xF0", 1},    {"\x80\x80", 0},     {"\xFF", 0},         {"\xC3\xA9\xE2\x82", 2},
  };
  for (const auto& r : rows) {
    CAPTURE(tg::show_bytes(r.bytes));
    CHECK(tg::utf8_incomplete_tail(r.bytes) == r.tail);
  }
}

TEST_CASE("generate --stream prints the text the line prints, byte for byte, for any seed") {
  // GPT-2's tokenizer on a random small model: sampled tokens often carry half a character.
  const std::string dir = kGolden + "/gpt2_hf";
  bool split_seen = false;
  for (const char* seed : {"1", "2", "3", "4", "5", "6", "7", "8"}) {
    CAPTURE(seed);
    std::vector<std::string> args = {"generate",
                                     "--gpt2",
                                     dir,
                                     "--prompt",
                                     "Caf\xC3\xA9 \xE4\xB8\xAD",
                                     "--max-new-tokens",
                                     "24",
                                     "--temperature",
                                     "1.0",
                                     "--seed",
                                     seed};
    const CliRun line = run_cli(cli::generate_main, args);
    args.push_back("--stream");
    const CliRun streamed = run_cli(cli::generate_main, args);
    REQUIRE_MESSAGE(line.rc == 0, line.err);
    REQUIRE_MESSAGE(streamed.rc == 0, streamed.err);
    CHECK(streamed.out == line.out);
    split_seen = split_seen || line.out.find("\xEF\xBF\xBD") != std::string::npos ||
                 std::count_if(line.out.begin(), line.out.end(),
                               [](char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0xC0; }) > 2;
  }
  CHECK(split_seen);  // the seeds did sample multi-byte characters
}

TEST_CASE("generate --stream into a closed pipe stops at the first failed write") {
  const std::string cmd = std::string("bash -c '") + TG_TAPEGRAD_EXE + " generate --gpt2 " +
                          kGolden + "/gpt2_hf --max-new-tokens 100000 --temperature 1 --stream" +
                          " 2>/dev/null | head -c 10 >/dev/null; echo ${PIPESTATUS[0]}'";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  pclose(p);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(got);
  CHECK(std::string(buf) == "1\n");  // a failure, not a silent 0
  CHECK(s < 10);
}

TEST_CASE("the GPT-2 folder's own files are inputs: no output may overwrite one") {
  Scratch s;
  const std::string dir = s / "gpt2";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    std::filesystem::copy_file(kGolden + "/gpt2_hf/" + f, dir + "/" + f);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"}) {
    const std::string file = dir + "/" + f;
    const std::string before = slurp(file);
    CAPTURE(f);
    const CliRun g = run_cli(cli::generate_main, {"generate", "--gpt2", dir, "--logits", file});
    check_one_line_error(g,
                         "--logits " + file + " is the same file as the --gpt2 folder's " + file +
                             " (refused: writing one would destroy the other)",
                         2);
    const CliRun t = run_cli(cli::train_main, {"train", "--init-from", dir, "--log", file, "--text",
                                               kGolden + "/train_text.txt", "--out", s / "o"});
    check_one_line_error(t,
                         "--log " + file + " is the same file as the --init-from folder's " + file +
                             " (refused: writing one would destroy the other)",
                         2);
    CHECK(slurp(file) == before);
  }
}

TEST_CASE("generate --logits: a prompt longer than the model's context names both flags") {
  Scratch s;
  const std::string dir = kGolden + "/gpt2_hf";  // n_positions 32
  std::string p32, p80;  // " x" is two tokens of the fixture's vocabulary, "." one
  for (int i = 0; i < 16; ++i) p32 += " x";
  for (int i = 0; i < 40; ++i) p80 += " x";
  const struct {
    std::string prompt;
    int rc;
    std::string line;  // the last line on stderr; empty: success
  } cases[] = {
      {p32, 0, ""},  // exactly the context
      {p32 + ".", 2,
       "tapegrad generate: --prompt is 33 tokens, more than the model's context length 32; "
       "--logits needs the whole prompt in one context (shorten --prompt)"},
      {p80, 2,
       "tapegrad generate: --prompt is 80 tokens, more than the model's context length 32; "
       "--logits needs the whole prompt in one context (shorten --prompt)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.prompt);
    const CliRun g = run_cli(cli::generate_main,
                             {"generate", "--gpt2", dir, "--prompt", c.prompt, "--max-new-tokens",
                              "1", "--logits", s / "logits.safetensors"});
    CHECK(g.rc == c.rc);
    const size_t last = g.err.rfind('\n', g.err.size() - 2);
    const std::string line = g.err.substr(last == std::string::npos ? 0 : last + 1);
    if (c.rc != 0) CHECK(line == c.line + "\n");
  }
}

TEST_CASE("tapegrad train and generate from the command line") {
  Scratch s;
  const std::string out = s / "cli";
  const CliRun r = run_cli(cli::train_main, {"train",
                                             "--text",
                                             kGolden + "/train_text.txt",
                                             "--tokenizer",
                                             "bpe:300",
                                             "--context",
                                             "16",
                                             "--epochs",
                                             "1",
                                             "--batch-size",
                                             "8",
                                             "--eval-freq",
                                             "10",
                                             "--eval-iter",
                                             "1",
                                             "--out",
                                             out,
                                             "--log",
                                             s / "log.jsonl",
                                             "--no-progress",
                                             "--start-context",
                                             "Nobody"});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.out.rfind("Ep 1 (Step 000000): Train loss ", 0) == 0);
  // One JSON line per evaluation, with the documented fields.
  std::ifstream log(s / "log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) {
    const json::Value v = json::parse(line);
    for (const char* k :
         {"step", "epoch", "train_loss", "val_loss", "tokens_seen", "lr", "seconds"})
      CHECK_MESSAGE(v.find(k) != nullptr, k);
    ++lines;
  }
  CHECK(lines == int(std::count(r.out.begin(), r.out.end(), '(')));

  // Greedy generation is deterministic; sampling depends on the seed only.
  const CliRun g1 = run_cli(cli::generate_main, {"generate", "--checkpoint", out, "--prompt",
                                                 "Nobody", "--max-new-tokens", "12"});
  REQUIRE_MESSAGE(g1.rc == 0, g1.err);
  CHECK(g1.out.rfind("Nobody", 0) == 0);
  auto sample = [&](const char* seed) {
    return run_cli(cli::generate_main,
                   {"generate", "--checkpoint", out, "--prompt", "Nobody", "--max-new-tokens", "12",
                    "--temperature", "1.5", "--top-k", "20", "--seed", seed})
        .out;
  };
  CHECK(sample("1") == sample("1"));
  CHECK(sample("1") != sample("2"));
}

TEST_CASE(
    "generate --precision bf16: cached equals --no-cache; fp32 is the default; the checkpoint "
    "is not modified") {
  Scratch s;
  train_one_epoch(s, s / "out");
  const std::string ck = s / "out/checkpoint.safetensors", before = slurp(ck);
  const auto gen = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--checkpoint",     s / "out", "--prompt",
                                     "The ",     "--max-new-tokens", "20"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = run_cli(cli::generate_main, args);
    CHECK_MESSAGE(r.rc == 0, r.err);
    CHECK(r.out.rfind("The ", 0) == 0);
    return r.out;
  };
  // float32 stays the default, so its text is today's.
  const std::string fp32 = gen({});
  CHECK(gen({"--precision", "fp32"}) == fp32);
  // bf16: greedy through the KV cache (one-row linears on gemv_rows_bf16) gives the tokens of the
  // book's uncached loop (the GEMM over every row); sampling too; both routes' caches.
  const std::string bf16 = gen({"--precision", "bf16"});
  CHECK(gen({"--precision", "bf16", "--no-cache"}) == bf16);
  const std::vector<std::string> sampled = {
      "--precision=bf16", "--temperature", "1.2", "--top-k", "20", "--seed", "7"};
  std::vector<std::string> uncached = sampled;
  uncached.push_back("--no-cache");
  CHECK(gen(sampled) == gen(uncached));
  CHECK(slurp(ck) == before);  // converted in memory only
  // --gpt2: the fixture's F32 and F16 weights load as bf16, its files untouched.
  for (const char* dir : {"gpt2_hf", "gpt2_hf_f16"}) {
    CAPTURE(dir);
    const std::string model = kGolden + "/" + dir + "/model.safetensors", bytes = slurp(model);
    const auto run = [&](bool no_cache) {
      std::vector<std::string> args = {"generate",    "--gpt2", kGolden + "/" + dir,
                                       "--precision", "bf16",   "--max-new-tokens",
                                       "12"};
      if (no_cache) args.push_back("--no-cache");
      const CliRun r = run_cli(cli::generate_main, args);
      CHECK_MESSAGE(r.rc == 0, r.err);
      CHECK(r.out.rfind("Every effort moves you", 0) == 0);
      return r.out;
    };
    CHECK(run(false) == run(true));
    CHECK(slurp(model) == bytes);
  }
}

TEST_CASE("generate: top-k 1 and temperature 0 are greedy; eos stops") {
  manual_seed(5);
  nn::GPTModel model(small_config());
  model.eval();
  const std::vector<int64_t> start = {84, 104, 101, 32};
  const auto greedy = train::generate_text_simple(model, start, 6, 16);
  CHECK(train::generate(model, start, 6, 16, 0.0, 0, -1, default_generator()) == greedy);
  CHECK(train::generate(model, start, 6, 16, 2.0, 1, -1, default_generator()) == greedy);
  const auto stopped = train::generate(model, start, 6, 16, 0.0, 0, greedy[4], default_generator());
  CHECK(stopped.size() == 4);
}

TEST_CASE("AdamW: PyTorch 1.13's update on one parameter") {
  // Two steps on w = [1, -2] with gradient w (loss = 0.5 w·w), lr 0.1, weight_decay 0.1;
  // expected values from torch.optim.AdamW in double precision rounded to float.
  struct One : nn::Module {
    Tensor w;
    One() : nn::Module("One") { register_parameter("w", &w, tensor({1.0, -2.0})); }
  } m;
  train::AdamW opt(m, 0.1, 0.1);
  for (int i = 0; i < 2; ++i) {
    m.zero_grad();
    (m.w * m.w * 0.5).sum().backward();
    opt.step();
  }
  const auto v = m.w.to_vector<float>();
  // The update rule of torch/optim/adamw.py in double precision, with the gradient = w.
  for (int k = 0; k < 2; ++k) {
    double p = k == 0 ? 1.0 : -2.0, mm = 0, vv = 0;
    for (int t = 1; t <= 2; ++t) {
      const double grad = p;
      p *= 1 - 0.1 * 0.1;
      mm = 0.9 * mm + 0.1 * grad;
      vv = 0.999 * vv + 0.001 * grad * grad;
      const double denom = std::sqrt(vv) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
      p -= 0.1 / (1 - std::pow(0.9, t)) * mm / denom;
    }
    CHECK(v[k] == doctest::Approx(p).epsilon(1e-6));
  }
  CHECK(opt.step_count == 2);
}

TEST_CASE("warmup + cosine schedule and gradient clipping") {
  CHECK(train::warmup_cosine_lr(0, 100, 10, 0.0, 1.0, 0.1) == 0.0);
  CHECK(train::warmup_cosine_lr(5, 100, 10, 0.0, 1.0, 0.1) == doctest::Approx(0.5));
  CHECK(train::warmup_cosine_lr(10, 100, 10, 0.0, 1.0, 0.1) == doctest::Approx(1.0));
  CHECK(train::warmup_cosine_lr(100, 100, 10, 0.0, 1.0, 0.1) == doctest::Approx(0.1));
  CHECK(train::warmup_cosine_lr(55, 100, 10, 0.0, 1.0, 0.1) == doctest::Approx(0.55));
  struct One : nn::Module {
    Tensor w;
    One() : nn::Module("One") { register_parameter("w", &w, tensor({3.0, 4.0})); }
  } m;
  (m.w * m.w * 0.5).sum().backward();  // grad = w, norm 5
  CHECK(train::clip_grad_norm(m, 1.0) == doctest::Approx(5.0));
  const auto g = m.w.grad().to_vector<float>();
  CHECK(g[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(g[1] == doctest::Approx(0.8).epsilon(1e-5));
}

TEST_CASE("safetensors: round trip, metadata, and errors naming the file") {
  Scratch s;
  const Tensor a = tensor({{1.5, -2.0}, {3.25, 4.0}});
  const Tensor b = from_vector(std::vector<int64_t>{7, 8, 9}, {3});
  tg::save_safetensors(s / "x.safetensors", {{"a", a}, {"b.c", b}}, {{"k", "v \"q\""}});
  const std::string bytes = slurp(s / "x.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);  // data stays aligned
  const tg::SafeTensors st = tg::load_safetensors(s / "x.safetensors");
  REQUIRE(st.find("a") != nullptr);
  CHECK(st.find("a")->to_vector<float>() == a.to_vector<float>());
  CHECK(st.find("a")->shape() == Shape{2, 2});
  CHECK(st.find("b.c")->to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});
  CHECK(st.metadata.at("k") == "v \"q\"");
  std::ofstream(s / "cut.safetensors") << bytes.substr(0, bytes.size() - 4);
  CHECK_THROWS_WITH(tg::load_safetensors(s / "cut.safetensors"),
                    doctest::Contains("cut.safetensors: not a valid safetensors file"));
  // No temp files are left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(s.dir)) files += e.is_regular_file();
  CHECK(files == 2);
}

TEST_CASE("stored options: the JSON checkpoints have always held, read back; older ones too") {
  train::TrainOptions o;
  o.text_path = "t.txt";
  o.tokenizer = "bpe:512";
  o.context_length = 64;
  o.start_context = "Every \"effort\"";
  o.clip_grad = 1;
  o.warmup_steps = 3;
  o.cosine = true;
  o.initial_lr = 1e-5;
  o.min_lr = 4e-5;
  // The bytes options_json wrote before the table (its hand-assembled stream, run on these).
  const std::string before =
      "{\"text\": \"t.txt\", \"preset\": \"tiny\", \"tokenizer\": \"bpe:512\", \"context_length\": "
      "64, \"epochs\": 10, \"batch_size\": 2, \"lr\": 0.00040000000000000002, \"weight_decay\": "
      "0.10000000000000001, \"eval_freq\": 5, \"eval_iter\": 5, \"seed\": 123, \"start_context\": "
      "\"Every \\\"effort\\\"\", \"sample_tokens\": 50, \"clip_grad\": 1, \"warmup_steps\": 3, "
      "\"cosine\": true, \"initial_lr\": 1.0000000000000001e-05, \"min_lr\": "
      "4.0000000000000003e-05, \"attention\": \"fused\"}";
  // --drop-rate came after: its member is the last, so the old bytes are the new ones' start.
  o.drop_rate = 0.25;
  o.micro_batches = 2;  // --micro-batches came after --drop-rate, its member after it
  // --precision came last (its default, fp32, is stored too).
  const std::string now = before.substr(0, before.size() - 1) +
                          ", \"drop_rate\": 0.25, \"micro_batches\": 2, \"precision\": \"fp32\"}";
  CHECK(train::options_json(o) == now);
  train::TrainOptions r;
  r.resume_dir = "ck";
  train::merge_resume_options(r, json::parse(now), "ck");
  CHECK(train::options_json(r) == now);
  // Before the fused route a checkpoint had no "attention": it ran the book's; before
  // --drop-rate none had "drop_rate": its config's rate.
  train::TrainOptions old;
  old.resume_dir = "ck";
  train::merge_resume_options(old, json::parse(before), "ck");
  CHECK(old.drop_rate == -1);
  CHECK(old.micro_batches == 1);  // before --micro-batches every step was one batch
  const size_t cut = before.find(", \"attention\"");
  train::merge_resume_options(old, json::parse(before.substr(0, cut) + "}"), "ck");
  CHECK(old.attention == "book");
  CHECK(old.min_lr == 4e-5);
  // A given data-pipeline option must match; a given rate may change.
  train::TrainOptions given;
  given.batch_size = 4;
  given.lr = 1e-3;
  given.explicit_flags = {"batch-size"};
  CHECK_THROWS_WITH_AS(train::merge_resume_options(given, json::parse(before), "ck"),
                       "--batch-size 4 does not match the checkpoint ck (trained with 2); a "
                       "checkpoint from another config",
                       train::UsageError);
  given.explicit_flags = {"lr"};
  train::merge_resume_options(given, json::parse(before), "ck");
  CHECK(given.lr == 1e-3);
  CHECK(given.batch_size == 2);
}

TEST_CASE("--drop-rate: the preset's unless given, in the model's config and the checkpoint") {
  train::TrainOptions o;
  CHECK(train::resolve_model_config(o, nullptr, "").drop_rate == 0.1);
  CHECK(o.drop_rate == 0.1);  // stored as the rate the run used
  std::vector<std::string> args = {"train", "--drop-rate", "0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  bool help = false;
  train::TrainOptions given = cli::parse_train_args(int(argv.size()), argv.data(), help);
  CHECK(train::resolve_model_config(given, nullptr, "").drop_rate == 0);
  // A resumed run's dropout is the checkpoint's: given again, it must match.
  train::TrainOptions again;
  again.drop_rate = 0.2;
  again.explicit_flags = {"drop-rate"};
  CHECK_THROWS_WITH_AS(
      train::merge_resume_options(again, json::parse(train::options_json(given)), "ck"),
      "--drop-rate 0.2 does not match the checkpoint ck (trained with 0); a checkpoint from "
      "another config",
      train::UsageError);
}

// ---- --pad-vocab: out_head padded with zero rows, the numbers unchanged ------------------------

namespace {

// The bytes of t widened to float32 (exact from bf16), for bit-for-bit comparisons.
std::string float_bits(const Tensor& t) {
  const Tensor c = t.to(DType::Float32).contiguous();
  return std::string(reinterpret_cast<const char*>(c.data<float>()),
                     size_t(c.numel()) * sizeof(float));
}
// The bytes of a float32 or int64 tensor (a checkpoint's).
std::string raw_bytes(const Tensor& t) {
  if (t.dtype() == DType::Float32) return float_bits(t);
  const Tensor c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data<int64_t>()),
                     size_t(c.numel()) * sizeof(int64_t));
}

// A small GPT (vocab 257) padded to a multiple of `pad`, after `steps` AdamW steps on random
// batches in `precision` (fp32; bf16: the forward under autocast; bf16-pure: model.to(bf16)).
struct Trained {
  std::unique_ptr<nn::GPTModel> model;
  std::unique_ptr<train::AdamW> opt;
  std::vector<double> losses;
};
Trained train_small(int64_t pad, const std::string& precision, int64_t steps) {
  nn::GPTConfig c = small_config();
  c.pad_vocab = pad;
  manual_seed(123);
  Trained t{std::make_unique<nn::GPTModel>(c), nullptr, {}};
  t.opt = std::make_unique<train::AdamW>(*t.model, 1e-2, 0.1);
  if (precision == "bf16-pure") {
    t.model->to(DType::BFloat16);
    t.opt->to(DType::BFloat16);
  }
  const int64_t B = 4, T = c.context_length;
  std::vector<int64_t> ids(size_t(steps * B * T + 1));
  randint(ids.data(), int64_t(ids.size()), 0, c.vocab_size);
  for (int64_t s = 0; s < steps; ++s) {
    const auto at = ids.begin() + s * B * T;
    const Tensor x = from_vector(std::vector<int64_t>(at, at + B * T), {B, T});
    const Tensor y = from_vector(std::vector<int64_t>(at + 1, at + B * T + 1), {B, T});
    t.opt->zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(precision == "bf16");
      loss = train::calc_loss_batch(x, y, *t.model);
    }
    t.losses.push_back(loss.item<double>());
    loss.backward();
    t.opt->step();  // the gradients stay until the next zero_grad: checked below
  }
  return t;
}

}  // namespace

TEST_CASE("GPTModel with pad_vocab: the padding stays exactly 0, the rest is the unpadded bits") {
  for (const std::string precision : {"fp32", "bf16", "bf16-pure"}) {
    CAPTURE(precision);
    const Trained plain = train_small(1, precision, 4), padded = train_small(64, precision, 4);
    CHECK(padded.losses == plain.losses);
    const int64_t V = 257, Vp = 320;
    const nn::GPTModel& pm = *padded.model;
    REQUIRE(pm.out_head->weight.size(0) == Vp);
    const nn::NamedTensors a = plain.model->named_parameters(), b = pm.named_parameters();
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string& name = a[k].first;
      CAPTURE(name);
      CHECK(float_bits(pm.unpad(name, b[k].second)) == float_bits(a[k].second));
      CHECK(float_bits(pm.unpad(name, b[k].second.grad())) == float_bits(a[k].second.grad()));
      CHECK(float_bits(pm.unpad(name, padded.opt->exp_avg[k])) ==
            float_bits(plain.opt->exp_avg[k]));
      CHECK(float_bits(pm.unpad(name, padded.opt->exp_avg_sq[k])) ==
            float_bits(plain.opt->exp_avg_sq[k]));
      if (name != "out_head.weight") continue;
      // The padding's rows: a zero gradient, and weights and moments +0 bit for bit after the
      // weight decay and four updates.
      for (const float g : b[k].second.grad().slice(0, V, Vp).to(DType::Float32).to_vector<float>())
        CHECK(g == 0.f);
      for (const Tensor& t : {b[k].second, padded.opt->exp_avg[k], padded.opt->exp_avg_sq[k]})
        for (const float v : t.slice(0, V, Vp).to(DType::Float32).to_vector<float>())
          CHECK(std::bit_cast<uint32_t>(v) == 0u);
    }
    // Sampling reads the vocabulary's logits only: the unpadded model's tokens.
    padded.model->eval();
    plain.model->eval();
    const std::vector<int64_t> start = {84, 104, 101, 32};
    CHECK(train::generate_text_simple(*padded.model, start, 6, 16) ==
          train::generate_text_simple(*plain.model, start, 6, 16));
    Generator g1(7), g2(7);
    CHECK(train::generate_cached(*padded.model, start, 20, 16, 1.0, 0, -1, g1) ==
          train::generate_cached(*plain.model, start, 20, 16, 1.0, 0, -1, g2));
  }
}

// The whole run, as `tapegrad train --pad-vocab N`: the printed log, every loss and evaluation,
// and the checkpoint (every tensor's bytes and every metadata entry but the wall-clock ones) are
// the unpadded run's, in float32, autocast's bf16 and bf16-pure.
TEST_CASE("--pad-vocab: the unpadded run's log, losses and checkpoint, bit for bit") {
  Scratch s;
  std::ostringstream err;
  std::vector<double> fp32_losses;
  for (const std::string precision : {"fp32", "bf16", "bf16-pure"}) {
    std::string base_log;
    train::TrainResult base;
    for (const int64_t pad : {int64_t(1), int64_t(64), int64_t(100)}) {
      CAPTURE(precision);
      CAPTURE(pad);
      train::TrainOptions o = small_options(s);
      o.precision = precision;
      o.pad_vocab = pad;
      o.out_dir = s / (precision + "_" + std::to_string(pad));
      std::ostringstream out;
      const train::TrainResult r = train::run_training(o, out, err);
      if (pad == 1) {
        base = r, base_log = out.str();
        if (precision == "fp32") fp32_losses = r.step_losses;
        continue;
      }
      CHECK(out.str() == base_log);
      CHECK(r.step_losses == base.step_losses);
      REQUIRE(r.evals.size() == base.evals.size());
      for (size_t i = 0; i < r.evals.size(); ++i) {
        CHECK(r.evals[i].train_loss == base.evals[i].train_loss);
        CHECK(r.evals[i].val_loss == base.evals[i].val_loss);
      }
      const SafeTensors x = load_safetensors(s / (precision + "_1/checkpoint.safetensors"));
      const SafeTensors y = load_safetensors(o.out_dir + "/checkpoint.safetensors");
      REQUIRE(x.tensors.size() == y.tensors.size());
      for (size_t i = 0; i < x.tensors.size(); ++i) {
        CAPTURE(x.tensors[i].first);
        CHECK(x.tensors[i].first == y.tensors[i].first);
        CHECK(x.tensors[i].second.shape() == y.tensors[i].second.shape());
        CHECK(x.tensors[i].second.dtype() == y.tensors[i].second.dtype());
        CHECK(raw_bytes(x.tensors[i].second) == raw_bytes(y.tensors[i].second));
      }
      CHECK(x.metadata.size() == y.metadata.size());
      for (const auto& [key, value] : x.metadata)
        if (key != "seconds" && key != "history") CHECK_MESSAGE(y.metadata.at(key) == value, key);
    }
  }
  // Not kept by the checkpoint: stopped padded, resumed unpadded, the unpadded run's bits.
  CHECK(stopped_and_resumed(s, [](train::TrainOptions& o) { o.pad_vocab = 64; }) == fp32_losses);
}
