// bench_train: training throughput (tokens/s) and peak RSS of a full step (forward, cross-entropy,
// backward, AdamW) for the tiny config, gpt2-124m (context 256, batch 2) and, when asked for,
// gpt2-124m at context 1024 (batch 2), at 2 threads, next to PyTorch running the book's GPTModel
// on the same batches when /usr/bin/python3 has torch. Ours runs once per attention route
// (--attention: the fused scaled_dot_product_attention, the book's op-by-op MultiHeadAttention).
//
// Each measurement runs in a child process (this binary with --child, or tools/
// bench_train_torch.py), so peak RSS (wait4's ru_maxrss) belongs to that run alone. Both sides
// seed 123, build the model, then draw the batches with randint, so the weights, batches and
// dropout masks are the same: the first step's losses are printed side by side as a check.
// Step 0 is a warm-up and not timed; each child prints every timed step's seconds. A run counts
// as its median step (one slow step from a neighbour's burst does not move it), and the table
// shows the best of --reps runs per side, ours and PyTorch's alternating so both see the same
// background load; the mean step of every run is in --json. Compare numbers within one machine.
//
// usage: bench_train [--json] [--threads N] [--steps-tiny N] [--steps-124m N] [--reps N]
//                    [--no-torch] [--only tiny,gpt2-124m,gpt2-124m-1024] [--attention fused,book]
//                    [--isa NAME]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/settings.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
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
  nn::GPTConfig long_ctx = nn::gpt_preset("gpt2-124m");
  long_ctx.context_length = 1024;  // GPT-2's own context
  return {{"tiny", tiny, 2},
          {"gpt2-124m", nn::gpt_preset("gpt2-124m"), 2},
          {"gpt2-124m-1024", long_ctx, 2}};
}

// ---- child: one configuration, our engine ----
int run_child(Config c, int64_t steps, const std::string& attention) {
  train::keep_freed_memory();  // as `tapegrad train` does
  c.cfg.attention = attention;
  c.cfg.validate();
  manual_seed(123);
  nn::GPTModel model(c.cfg);
  model.train();
  train::AdamW opt(model, 4e-4, 0.1);
  const int64_t T = c.cfg.context_length, B = c.batch;
  std::vector<int64_t> ids(size_t((steps + 1) * B * (T + 1)));
  randint(ids.data(), int64_t(ids.size()), 0, c.cfg.vocab_size);  // torch.randint's draws
  double first_loss = NAN;
  std::vector<double> seconds;
  for (int64_t s = 0; s <= steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
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
    if (s == 0)
      first_loss = loss.item<double>();
    else
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%.9g", first_loss);
  for (double t : seconds) std::printf(" %.6f", t);
  std::printf("\n");
  return 0;
}

// --child: a route the model refuses is a bad option (exit 2); what stops a run once it is built
// (memory) is one line and exit status 1, for the parent to report.
int child_main(const Config& c, int64_t steps, const std::string& route) {
  Config checked = c;
  checked.cfg.attention = route;
  checked.cfg.validate();  // throws std::invalid_argument: parse_options reports it
  try {
    return run_child(c, steps, route);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_train: out of memory in %s\n", c.name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
  }
  return 1;
}

// One side's runs of one configuration. A side with a failed run reports nothing but the error.
struct Result {
  bool ok = false;
  double first_loss = NAN;
  double tokens_per_s = NAN;                   // from the best run's median step
  std::vector<double> run_medians, run_means;  // seconds per step, one per run
  long rss_kb = 0;                             // the largest peak over the runs
  std::string error;                           // why ok is false
};

bool fail(Result& r, std::string why) {
  r = Result{};
  r.error = std::move(why);
  return false;
}

// Runs the child once more and folds it into r; false (r cleared, with r.error) when it failed.
bool measure(Result& r, const std::vector<std::string>& args, int threads, int64_t steps,
             int64_t tokens_per_step) {
  std::string out, error;
  long rss_kb = 0;
  if (!bench::run_child(args, threads, out, rss_kb, error)) return fail(r, error);
  std::istringstream is(out);
  std::string loss_text;  // strtod, unlike >>, reads a diverged run's "nan"
  is >> loss_text;
  char* end = nullptr;
  const double loss = std::strtod(loss_text.c_str(), &end);
  bool parsed = !loss_text.empty() && *end == '\0';
  std::vector<double> t(static_cast<size_t>(steps));
  for (double& x : t) parsed = parsed && (is >> x) && x > 0;
  std::string extra;
  if (!parsed || is >> extra)
    return fail(r, args[0] + " did not print a loss and " + std::to_string(steps) + " step times");
  // Same seed, same batches: every run must start from the same loss (NaN included).
  if (!r.run_medians.empty() &&
      !(loss == r.first_loss || (std::isnan(loss) && std::isnan(r.first_loss))))
    return fail(r, args[0] + " began with loss " + loss_text + " after " +
                       std::to_string(r.first_loss) + " in an earlier run");
  double mean = 0;
  for (double x : t) mean += x / double(steps);
  std::sort(t.begin(), t.end());
  const double median =
      steps % 2 ? t[size_t(steps / 2)] : (t[size_t(steps / 2 - 1)] + t[size_t(steps / 2)]) / 2;
  r.run_medians.push_back(median);
  r.run_means.push_back(mean);
  r.first_loss = loss;
  r.rss_kb = std::max(r.rss_kb, rss_kb);
  r.tokens_per_s =
      double(tokens_per_step) / *std::min_element(r.run_medians.begin(), r.run_medians.end());
  return r.ok = true;
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + bench::json_number(v[i]);
  return s + "]";
}

// --isa NAME: our runs take that path (TAPEGRAD_ISA, inherited by the children). On avx2 PyTorch
// does too, so that the peer has the same vector width: ATen's AVX2 kernels and OpenBLAS's
// Haswell ones (Debian's OpenBLAS is built for every core and honours OPENBLAS_CORETYPE).
void select_isa(const std::string& isa) {
  const std::vector<std::string> have = tg::kernels::available_isas();
  if (std::find(have.begin(), have.end(), isa) == have.end()) {
    std::string names;
    for (const std::string& h : have) names += (names.empty() ? "" : ", ") + h;
    bench::bad_option("bench_train",
                      "--isa " + isa + " is not available on this machine (it has " + names + ")");
  }
  setenv("TAPEGRAD_ISA", isa.c_str(), 1);
  if (isa == "avx2") {
    setenv("ATEN_CPU_CAPABILITY", "avx2", 1);
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  }
}

// The header's second line: which vector path each side runs.
std::string isa_line(const std::string& isa) {
  const char* aten = std::getenv("ATEN_CPU_CAPABILITY");
  const char* blas = std::getenv("OPENBLAS_CORETYPE");
  return "ours " + (isa.empty() ? tg::kernels::active_isa() : isa) +
         "; PyTorch ATEN_CPU_CAPABILITY=" + (aten ? aten : "(its best)") +
         ", OPENBLAS_CORETYPE=" + (blas ? blas : "(its best)");
}

// The command line. --child runs one measurement in this process instead (see run_child).
struct Options {
  bool json = false, torch = true;
  int threads = 2;
  int64_t steps_tiny = 20, steps_124m = 3, reps = 3;
  std::vector<std::string> only = {"tiny", "gpt2-124m"}, routes = {"fused", "book"};
  std::string isa;  // empty: the fastest path this machine has
};

// A comma-separated list whose items must be among `allowed`.
std::vector<std::string> name_list(const std::string& s, const std::vector<std::string>& allowed,
                                   const std::string& option) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      bench::bad_option("bench_train",
                        option + " wants a list of " + names + ", got '" + item + "'");
    }
    v.push_back(item);
  }
  if (v.empty()) bench::bad_option("bench_train", option + " needs a value");
  return v;
}

// One option at argv[i] (and its value, taking i past it) into o. --child runs and exits.
void parse_option(int argc, char** argv, int& i, Options& o) {
  const std::string a = argv[i];
  auto next = [&]() -> std::string {
    if (i + 1 >= argc) bench::bad_option("bench_train", a + " needs a value");
    return argv[++i];
  };
  if (a == "--child") {
    const std::string name = next();
    const int64_t steps = bench::positive_int("bench_train", a, next(), 100000);
    const std::string route = next();
    for (const Config& c : configs())
      if (name == c.name) std::exit(child_main(c, steps, route));
    bench::bad_option("bench_train", "unknown config " + name);
  } else if (a == "--json") {
    o.json = true;
  } else if (a == "--no-torch") {
    o.torch = false;
  } else if (a == "--threads") {
    o.threads = int(bench::positive_int("bench_train", a, next(), 1024));
  } else if (a == "--steps-tiny") {
    o.steps_tiny = bench::positive_int("bench_train", a, next(), 100000);
  } else if (a == "--steps-124m") {
    o.steps_124m = bench::positive_int("bench_train", a, next(), 100000);
  } else if (a == "--reps") {
    o.reps = bench::positive_int("bench_train", a, next(), 100);
  } else if (a == "--only") {
    o.only = name_list(next(), {"tiny", "gpt2-124m", "gpt2-124m-1024"}, a);
  } else if (a == "--attention") {
    o.routes = name_list(next(), {"fused", "book"}, a);
  } else if (a == "--isa") {
    o.isa = next();
    if (o.isa.empty()) bench::bad_option("bench_train", "--isa needs a path name");
  } else {
    bench::bad_option("bench_train", "unknown option " + a);
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    try {
      parse_option(argc, argv, i, o);
    } catch (const std::exception& e) {
      bench::bad_option("bench_train", "bad value for " + a + ": " + e.what());
    }
  }
  return o;
}

std::string self_executable() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::cerr << "bench_train: cannot find its own executable\n";
    std::exit(1);
  }
  self[len] = '\0';
  return self;
}

bool have_torch() {
  std::string out, err;
  long rss;
  return access("/usr/bin/python3", X_OK) == 0 &&
         bench::run_child({"/usr/bin/python3", "-c", "import torch"}, 1, out, rss, err);
}

// One row of the table: a configuration on one route, beside PyTorch's runs of it.
struct Row {
  const Config* config;
  std::string route;
  Result ours, theirs;
};

std::string json_row(const Row& w, const Options& o, int64_t steps) {
  const Config& c = *w.config;
  auto side = [&](const char* who, const Result& r) {
    const std::string p = std::string(", \"") + who;
    return p + "_tokens_per_s\": " + bench::json_number(r.tokens_per_s) + p +
           "_run_median_s\": " + json_list(r.run_medians) + p +
           "_run_mean_s\": " + json_list(r.run_means) + p +
           "_peak_rss_mb\": " + bench::json_number(r.ok ? double(r.rss_kb) / 1024 : NAN) + p +
           "_first_loss\": " + bench::json_number(r.first_loss);
  };
  return "{\"config\": \"" + std::string(c.name) + "\", \"attention\": \"" + w.route +
         "\", \"cpu\": " + json::quote(bench::cpu_model()) +
         ", \"isa\": " + json::quote(isa_line(o.isa)) +
         ", \"threads\": " + std::to_string(o.threads) + ", \"batch\": " + std::to_string(c.batch) +
         ", \"context\": " + std::to_string(c.cfg.context_length) +
         ", \"steps\": " + std::to_string(steps) + ", \"reps\": " + std::to_string(o.reps) +
         side("ours", w.ours) + side("torch", w.theirs) + "}";
}

void print_row(const Row& w, const Options& o) {
  auto num = [](const Result& r, const char* fmt, double v) {
    char b[32];
    if (!r.ok) return std::string("-");
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  auto mb = [&](const Result& r) { return num(r, "%.0f MB", double(r.rss_kb) / 1024); };
  const Result &ours = w.ours, &theirs = w.theirs;
  const bool both = ours.ok && theirs.ok;
  std::printf("%-14s %-6s %7d %12s %12s %8s %11s %11s %11s %11s\n", w.config->name, w.route.c_str(),
              o.threads, num(ours, "%.0f", ours.tokens_per_s).c_str(),
              num(theirs, "%.1f", theirs.tokens_per_s).c_str(),
              both ? num(theirs, "%.2fx", ours.tokens_per_s / theirs.tokens_per_s).c_str() : "-",
              mb(ours).c_str(), mb(theirs).c_str(), num(ours, "%.6f", ours.first_loss).c_str(),
              num(theirs, "%.6f", theirs.first_loss).c_str());
  std::fflush(stdout);
}

// PyTorch's command for configuration c: tools/bench_train_torch.py with the model's sizes.
std::vector<std::string> torch_command(const Config& c, int64_t steps, int threads) {
  return {"/usr/bin/python3",
          std::string(TAPEGRAD_SOURCE_ROOT) + "/tools/bench_train_torch.py",
          std::to_string(c.cfg.vocab_size),
          std::to_string(c.cfg.context_length),
          std::to_string(c.cfg.emb_dim),
          std::to_string(c.cfg.n_heads),
          std::to_string(c.cfg.n_layers),
          std::to_string(c.batch),
          std::to_string(steps),
          std::to_string(threads)};
}

// Configuration c on each route; PyTorch runs beside the first route only (its model has one
// route). Ours and theirs alternate, starting with ours and swapping each run, until a side
// fails. Returns false when a run failed.
bool run_config(const Config& c, const Options& o, const std::string& self,
                std::vector<std::string>& json_rows) {
  const int64_t steps = std::string(c.name) == "tiny" ? o.steps_tiny : o.steps_124m;
  const int64_t tokens = c.batch * c.cfg.context_length;
  bool ok = true;
  Result theirs;
  for (size_t ri = 0; ri < o.routes.size(); ++ri) {
    Row w{&c, o.routes[ri], {}, {}};
    const std::vector<std::string> our_args = {self, "--child", c.name, std::to_string(steps),
                                               w.route};
    bool ours_alive = true, theirs_alive = o.torch && ri == 0;
    for (int64_t r = 0; r < o.reps && (ours_alive || theirs_alive); ++r)
      for (int side = 0; side < 2; ++side) {
        if ((side == r % 2) && ours_alive)
          ours_alive = measure(w.ours, our_args, o.threads, steps, tokens);
        else if ((side != r % 2) && theirs_alive)
          theirs_alive =
              measure(theirs, torch_command(c, steps, o.threads), o.threads, steps, tokens);
      }
    w.theirs = theirs;
    // A failed child stops the benchmark: one line naming it, exit status 1.
    if (!w.ours.ok) {
      std::cerr << "bench_train: our " << c.name << " (" << w.route
                << ") run failed: " << w.ours.error << "\n";
      std::exit(1);
    }
    if (o.torch && !theirs.ok && ri == 0) {  // PyTorch is there but failed: no peer
      std::cerr << "bench_train: PyTorch's " << c.name << " run failed: " << theirs.error << "\n";
      std::exit(1);
    }
    if (o.json)
      json_rows.push_back(json_row(w, o, steps));
    else
      print_row(w, o);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  bench::check_settings("bench_train");
  const std::string self = self_executable();
  if (!o.isa.empty()) select_isa(o.isa);
  if (o.torch) o.torch = have_torch();
  if (!o.json) {
    std::printf("cpu: %s (%s)\n", bench::cpu_model().c_str(), bench::cache_sizes().c_str());
    std::printf("isa: %s\n", isa_line(o.isa).c_str());
    std::printf("%-14s %-6s %7s %12s %12s %8s %11s %11s %11s %11s\n", "config", "route", "threads",
                "ours tok/s", "torch tok/s", "speedup", "ours RSS", "torch RSS", "ours loss0",
                "torch loss0");
  }
  std::vector<std::string> json_rows;
  int rc = 0;
  for (const Config& c : configs())
    if (std::find(o.only.begin(), o.only.end(), c.name) != o.only.end())
      if (!run_config(c, o, self, json_rows)) rc = 1;
  if (o.json) {
    std::printf("[");
    for (size_t i = 0; i < json_rows.size(); ++i)
      std::printf("%s%s", i ? ",\n " : "", json_rows[i].c_str());
    std::printf("]\n");
  } else if (!o.torch) {
    std::printf("(no PyTorch column: /usr/bin/python3 with torch not found, or --no-torch)\n");
  }
  return rc;
}
