// bench_generate: generation throughput (new tokens/s) of GPT-2-shaped models with random weights
// (gpt2-124m and gpt2-medium: the book's §5.5 config, context 1024, qkv_bias), batch 1, a
// 16-token prompt, greedy: tapegrad's KV-cache route (train::generate_cached) and its uncached
// generate(), beside PyTorch running the book's GPTModel with its bonus KV cache
// (tools/kv_cache_gpt.py, PyTorch 2.x from --torch-python, else /usr/bin/python3), and beside the
// memory-bandwidth bound.
//
// The bound: a cached step reads every weight once (the blocks, ln_f, out_head's vocab × C; one
// row of wte and wpe) plus each layer's cached keys and values so far (2 × position × C floats),
// so n new tokens read Σ_i (weights + cache_i) bytes; at the bandwidth measured here (sum_rows
// streaming a buffer the size of the weights with the same threads, best of --reps) they cannot
// take less than bytes / BW.
// Past context_length (16 + 1024 > 1024) the book's loop crops the context, which moves every
// position: those steps rebuild the cache from 1024 tokens (compute, not memory); their count is
// printed, and the bound covers the cached steps only.
//
// Each measurement is the best of --reps runs; ours and PyTorch's alternate per rep so both see
// the same background load. Uncached generation costs O(T²) per sequence: it runs only where
// --uncached-max allows (default 256 new tokens, gpt2-124m). Compare numbers within one machine.
//
// usage: bench_generate [--models gpt2-124m,gpt2-medium] [--tokens 256,1024] [--threads 1,2]
//                       [--reps N] [--no-torch] [--torch-python PATH] [--uncached-max N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "nn/gpt.h"
#include "train/trainer.h"

namespace {

using namespace tg;

constexpr const char* kProg = "bench_generate";
constexpr int64_t kPrompt = 16;

nn::GPTConfig model_config(const std::string& name) {
  nn::GPTConfig c = nn::gpt_preset("gpt2-124m");  // the book's NEW_CONFIG for GPT-2 (§5.5)
  c.context_length = 1024;
  c.qkv_bias = true;
  if (name == "gpt2-medium") {
    c.emb_dim = 1024;
    c.n_layers = 24;
    c.n_heads = 16;
  } else if (name != "gpt2-124m") {
    bench::bad_option(kProg, "--models: unknown model '" + name + "' (gpt2-124m, gpt2-medium)");
  }
  return c;
}

// Bytes one cached step reads besides the cache: every block weight and bias, ln_f, out_head,
// one row each of tok_emb and pos_emb.
double weight_bytes(const nn::GPTConfig& c) {
  const double C = double(c.emb_dim), L = double(c.n_layers), V = double(c.vocab_size);
  return 4 * (L * (12 * C * C + 13 * C) + 2 * C + V * C + 2 * C);
}

// Seconds at BW bytes/s for n new tokens after a kPrompt-token prompt, counting cached steps
// only (the steps inside the context); `rebuilds` gets the number of steps past it.
double bound_seconds(const nn::GPTConfig& c, int64_t n, double bw, int64_t& rebuilds) {
  double bytes = 0;
  rebuilds = 0;
  for (int64_t i = 1; i < n; ++i) {   // step 0 is the prompt's pass
    const int64_t pos = kPrompt + i;  // tokens the step's context holds
    if (pos > c.context_length) {
      ++rebuilds;
      continue;
    }
    bytes += weight_bytes(c) + 2.0 * 4 * double(c.n_layers) * double(pos) * double(c.emb_dim);
  }
  return bytes / bw;
}

// Read bandwidth over a buffer the size of the model's weights (the same level of the memory
// hierarchy: this Xeon's 480 MB L3 holds much of gpt2-124m's 500 MB), summed by sum_rows, best
// of reps, in bytes/s.
double measure_bandwidth(double bytes, int reps) {
  const int64_t cols = int64_t(1) << 20, rows = std::max<int64_t>(1, int64_t(bytes / 4) / cols);
  std::vector<float> x(size_t(rows * cols), 1.f);
  std::vector<float> out(static_cast<size_t>(rows));
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first pass faults the pages in
    const auto t0 = std::chrono::steady_clock::now();
    kernels::sum_rows(rows, cols, x.data(), out.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return double(rows * cols) * 4 / best;
}

struct Row {
  std::string model;
  int64_t tokens = 0;
  int threads = 0;
  double cached = 0, uncached = -1, torch_cached = -1, bound = 0, bw = 0;
  int64_t rebuilds = 0;
};

// One PyTorch run's tokens/s, or -1 (with a note on stderr) when it fails.
double torch_tokens_per_s(const std::string& python, const std::string& model, int64_t tokens,
                          int threads) {
  // Run as `python -c SOURCE`: torch2-python's chroot does not see this tree.
  static const std::string source = [] {
    const std::string path = std::string(TAPEGRAD_SOURCE_ROOT) + "/tools/kv_cache_gpt.py";
    std::ifstream f(path);
    if (!f) bench::bad_option(kProg, "cannot read " + path);
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
  }();
  std::string out, err;
  long rss = 0;
  if (!bench::run_child(
          {python, "-c", source, "--model", model, "--new-tokens", std::to_string(tokens),
           "--threads", std::to_string(threads), "--reps", "1"},
          threads, out, rss, err)) {
    std::fprintf(stderr, "%s: PyTorch run failed: %s\n", kProg, err.c_str());
    return -1;
  }
  try {
    const json::Value v = json::parse(out);
    const json::Value* t = v.find("tokens_per_s");
    if (t && t->kind == json::Value::Kind::Number) return t->num;
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "%s: PyTorch printed no tokens_per_s: %s\n", kProg, out.c_str());
  return -1;
}

double ours_tokens_per_s(nn::GPTModel& model, const std::vector<int64_t>& prompt, int64_t n,
                         bool cached) {
  Generator gen;
  const auto t0 = std::chrono::steady_clock::now();
  (cached ? train::generate_cached : train::generate)(model, prompt, n, 1024, 0, 0, -1, gen, {});
  return double(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Options {
  std::vector<std::string> models = {"gpt2-124m", "gpt2-medium"};
  std::vector<int> tokens = {256, 1024}, threads = {1, 2};
  int reps = 3;
  int64_t uncached_max = 256;
  bool torch = true;
  std::string torch_python;
};

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) bench::bad_option(kProg, a + " needs a value");
      return argv[++i];
    };
    if (a == "--models") {
      o.models = split_names(value());
      for (const std::string& m : o.models) model_config(m);
    } else if (a == "--tokens") {
      o.tokens = bench::int_list(kProg, a, value(), 1, 100000);
    } else if (a == "--threads") {
      o.threads = bench::int_list(kProg, a, value(), 1, 1024);
    } else if (a == "--reps") {
      o.reps = int(bench::whole_int(kProg, a, value(), 1, 1000));
    } else if (a == "--uncached-max") {
      o.uncached_max = bench::whole_int(kProg, a, value(), 1, 100000);
    } else if (a == "--no-torch") {
      o.torch = false;
    } else if (a == "--torch-python") {
      o.torch_python = value();
    } else {
      bench::bad_option(kProg, "unknown option '" + a + "' (see the usage in bench_generate.cpp)");
    }
  }
  if (o.torch_python.empty())
    o.torch_python = access("/work/shared/tools/torch2-python", X_OK) == 0
                         ? "/work/shared/tools/torch2-python"
                         : "/usr/bin/python3";
  return o;
}

// The rows of one model at one thread count.
void measure(const Options& o, const std::string& name, int threads, std::vector<Row>& rows) {
  set_num_threads(threads);
  const nn::GPTConfig cfg = model_config(name);
  manual_seed(123);
  nn::GPTModel model(cfg);
  model.eval();
  std::vector<int64_t> prompt(kPrompt);
  randint(prompt.data(), kPrompt, 0, cfg.vocab_size);
  const double bw = measure_bandwidth(weight_bytes(cfg), o.reps);
  for (const int n : o.tokens) {
    Row r{name, n, threads};
    r.bw = bw;
    r.bound = double(n) / bound_seconds(cfg, n, bw, r.rebuilds);
    for (int rep = 0; rep < o.reps; ++rep) {
      r.cached = std::max(r.cached, ours_tokens_per_s(model, prompt, n, true));
      if (o.torch)
        r.torch_cached =
            std::max(r.torch_cached, torch_tokens_per_s(o.torch_python, name, n, threads));
    }
    if (n <= o.uncached_max && name == "gpt2-124m")
      r.uncached = ours_tokens_per_s(model, prompt, n, false);
    rows.push_back(r);
    std::printf(
        "%-12s %6d %3d %10.2f %10s %10s %10.2f %7.0f%% %8s %8.1f %6lld\n", name.c_str(), n, threads,
        r.cached, r.uncached < 0 ? "-" : std::to_string(r.uncached).substr(0, 6).c_str(),
        r.torch_cached < 0 ? "-" : std::to_string(r.torch_cached).substr(0, 6).c_str(), r.bound,
        100 * r.cached / r.bound,
        r.torch_cached > 0 ? std::to_string(r.cached / r.torch_cached).substr(0, 4).c_str() : "-",
        r.bw / 1e9, static_cast<long long>(r.rebuilds));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("bench_generate: %s (%s), ISA path %s, load average %.2f %.2f %.2f\n",
              bench::cpu_model().c_str(), bench::cache_sizes().c_str(),
              kernels::active_isa().c_str(), load[0], load[1], load[2]);
  std::printf("batch 1, prompt %lld tokens, greedy, best of %d; PyTorch: %s\n",
              static_cast<long long>(kPrompt), o.reps,
              o.torch ? o.torch_python.c_str() : "(not run)");
  std::printf("%-12s %6s %3s %10s %10s %10s %10s %8s %8s %8s %6s\n", "model", "tokens", "thr",
              "cached/s", "uncached/s", "torch kv/s", "bound/s", "of bound", "x torch", "GB/s",
              "rebuilt");
  std::vector<Row> rows;
  for (const std::string& m : o.models)
    for (const int t : o.threads) measure(o, m, t, rows);
  getloadavg(load, 3);
  std::printf("load average at the end: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  return 0;
}
