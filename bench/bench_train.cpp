// bench_train: training throughput (tokens/s) and peak RSS of a full step (forward, cross-entropy,
// backward, AdamW) for the tiny config and gpt2-124m (context 256, batch 2) at 2 threads, next to
// PyTorch running the book's GPTModel on the same batches when /usr/bin/python3 has torch.
//
// Each measurement runs in a child process (this binary with --child, or tools/
// bench_train_torch.py), so peak RSS (wait4's ru_maxrss) belongs to that run alone. Both sides
// seed 123, build the model, then draw the batches with randint, so the weights, batches and
// dropout masks are the same: the first step's losses are printed side by side as a check.
// Step 0 is a warm-up and not timed. Compare numbers within one machine only.
//
// usage: bench_train [--json] [--threads N] [--steps-tiny N] [--steps-124m N] [--no-torch]
//                    [--only tiny|gpt2-124m]
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli_args.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace {

using namespace tg;

struct Config {
  const char* name;
  nn::GPTConfig cfg;
  int64_t batch;
};

std::vector<Config> configs() {
  nn::GPTConfig tiny = nn::gpt_preset("tiny");
  tiny.vocab_size = 50257;  // the tiny reference: GPT-2 vocabulary
  return {{"tiny", tiny, 2}, {"gpt2-124m", nn::gpt_preset("gpt2-124m"), 2}};
}

// ---- child: one configuration, our engine ----
int run_child(const Config& c, int64_t steps) {
  train::keep_freed_memory();  // as `tapegrad train` does
  manual_seed(123);
  nn::GPTModel model(c.cfg);
  model.train();
  train::AdamW opt(model, 4e-4, 0.1);
  const int64_t T = c.cfg.context_length, B = c.batch;
  std::vector<int64_t> ids(size_t((steps + 1) * B * (T + 1)));
  randint(ids.data(), int64_t(ids.size()), 0, c.cfg.vocab_size);  // torch.randint's draws
  double first_loss = NAN;
  std::chrono::steady_clock::time_point t0;
  for (int64_t s = 0; s <= steps; ++s) {
    if (s == 1) t0 = std::chrono::steady_clock::now();
    std::vector<int64_t> x(size_t(B * T)), y(size_t(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const size_t base = size_t((s * B + b) * (T + 1) + t);
        x[size_t(b * T + t)] = ids[base];
        y[size_t(b * T + t)] = ids[base + 1];
      }
    opt.zero_grad();
    Tensor loss = train::calc_loss_batch(from_vector(x, {B, T}), from_vector(y, {B, T}), model);
    loss.backward();
    opt.step();
    if (s == 0) first_loss = loss.item<double>();
  }
  const double per_step =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  std::printf("%.9g %.6f\n", first_loss, per_step);
  return 0;
}

struct Result {
  bool ok = false;
  double first_loss = NAN, sec_per_step = NAN, tokens_per_s = NAN;
  long rss_kb = 0;
  std::string error;  // why ok is false
};

Result measure(const std::vector<std::string>& args, int threads, int64_t tokens_per_step) {
  Result r;
  std::string out;
  if (!bench::run_child(args, threads, out, r.rss_kb, r.error)) return r;
  std::istringstream is(out);
  if (!(is >> r.first_loss >> r.sec_per_step)) {
    r.error = args[0] + " printed no measurement";
    return r;
  }
  r.tokens_per_s = double(tokens_per_step) / r.sec_per_step;
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, torch = true;
  int threads = 2;
  int64_t steps_tiny = 20, steps_124m = 3;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_train: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--child") {
        const std::string name = next();
        const int64_t steps = bench::positive_int("bench_train", a, next(), 100000);
        for (const Config& c : configs())
          if (name == c.name) return run_child(c, steps);
        std::cerr << "bench_train: unknown config " << name << "\n";
        return 2;
      } else if (a == "--json") {
        json = true;
      } else if (a == "--no-torch") {
        torch = false;
      } else if (a == "--threads") {
        threads = int(bench::positive_int("bench_train", a, next(), 1024));
      } else if (a == "--steps-tiny") {
        steps_tiny = bench::positive_int("bench_train", a, next(), 100000);
      } else if (a == "--steps-124m") {
        steps_124m = bench::positive_int("bench_train", a, next(), 100000);
      } else if (a == "--only") {
        only = next();
        if (only != "tiny" && only != "gpt2-124m") {
          std::cerr << "bench_train: --only wants tiny or gpt2-124m, got '" << only << "'\n";
          return 2;
        }
      } else {
        std::cerr << "bench_train: unknown option " << a << "\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "bench_train: bad value for " << a << "\n";
      return 2;
    }
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::cerr << "bench_train: cannot find its own executable\n";
    return 1;
  }
  self[len] = '\0';
  const std::string script = std::string(TAPEGRAD_SOURCE_ROOT) + "/tools/bench_train_torch.py";
  if (torch) {
    std::string out, err;
    long rss;
    torch = access("/usr/bin/python3", X_OK) == 0 &&
            bench::run_child({"/usr/bin/python3", "-c", "import torch"}, 1, out, rss, err);
  }

  std::vector<std::string> rows;
  if (!json)
    std::printf("%-10s %7s %12s %12s %8s %11s %11s %11s %11s\n", "config", "threads", "ours tok/s",
                "torch tok/s", "speedup", "ours RSS", "torch RSS", "ours loss0", "torch loss0");
  int rc = 0;
  for (const Config& c : configs()) {
    if (!only.empty() && only != c.name) continue;
    const int64_t steps = std::string(c.name) == "tiny" ? steps_tiny : steps_124m;
    const int64_t tokens = c.batch * c.cfg.context_length;
    const Result ours = measure({self, "--child", c.name, std::to_string(steps)}, threads, tokens);
    Result theirs;
    if (torch)
      theirs = measure({"/usr/bin/python3", script, std::to_string(c.cfg.vocab_size),
                        std::to_string(c.cfg.context_length), std::to_string(c.cfg.emb_dim),
                        std::to_string(c.cfg.n_heads), std::to_string(c.cfg.n_layers),
                        std::to_string(c.batch), std::to_string(steps), std::to_string(threads)},
                       threads, tokens);
    if (!ours.ok) {
      std::cerr << "bench_train: our " << c.name << " run failed: " << ours.error << "\n";
      rc = 1;
    }
    if (torch && !theirs.ok)
      std::cerr << "bench_train: PyTorch's " << c.name << " run failed: " << theirs.error << "\n";
    if (json) {
      rows.push_back("{\"config\": \"" + std::string(c.name) + "\", \"threads\": " +
                     std::to_string(threads) + ", \"batch\": " + std::to_string(c.batch) +
                     ", \"context\": " + std::to_string(c.cfg.context_length) +
                     ", \"steps\": " + std::to_string(steps) +
                     ", \"ours_tokens_per_s\": " + bench::json_number(ours.tokens_per_s) +
                     ", \"ours_peak_rss_mb\": " + bench::json_number(double(ours.rss_kb) / 1024) +
                     ", \"ours_first_loss\": " + bench::json_number(ours.first_loss) +
                     ", \"torch_tokens_per_s\": " + bench::json_number(theirs.tokens_per_s) +
                     ", \"torch_peak_rss_mb\": " +
                     bench::json_number(theirs.ok ? double(theirs.rss_kb) / 1024 : NAN) +
                     ", \"torch_first_loss\": " + bench::json_number(theirs.first_loss) + "}");
    } else {
      auto mb = [](const Result& r) {
        char b[32];
        if (!r.ok) return std::string("-");
        std::snprintf(b, sizeof b, "%.0f MB", double(r.rss_kb) / 1024);
        return std::string(b);
      };
      auto num = [&](const char* fmt, double v) {
        char b[32];
        if (!theirs.ok) return std::string("-");
        std::snprintf(b, sizeof b, fmt, v);
        return std::string(b);
      };
      std::printf("%-10s %7d %12.0f %12s %8s %11s %11s %11.6f %11s\n", c.name, threads,
                  ours.tokens_per_s, num("%.1f", theirs.tokens_per_s).c_str(),
                  num("%.2fx", ours.tokens_per_s / theirs.tokens_per_s).c_str(), mb(ours).c_str(),
                  mb(theirs).c_str(), ours.first_loss, num("%.6f", theirs.first_loss).c_str());
      std::fflush(stdout);
    }
  }
  if (json) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) std::printf("%s%s", i ? ",\n " : "", rows[i].c_str());
    std::printf("]\n");
  } else if (!torch) {
    std::printf("(no PyTorch column: /usr/bin/python3 with torch not found, or --no-torch)\n");
  }
  return rc;
}
