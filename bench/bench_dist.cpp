// bench_dist: data-parallel training throughput (tokens/s) on one machine, the tiny config and
// gpt2-124m (context 256) at a global batch of 8: one process × 2 threads (the book's step)
// against 2 ranks × 1 thread under mpirun (train/data_parallel.h: micro-batch gradients summed in
// rank order, ZeRO-1 AdamW), over shared memory (btl vader) and over TCP on loopback, beside
// PyTorch's DistributedDataParallel on gloo (2 processes × 1 thread, the book's GPTModel,
// tools/bench_ddp_torch.py) with PyTorch 1.13 (/usr/bin/python3) and 2.x (torch2-python).
//
// Each run is a child process: this binary with --child under mpirun (or alone), or the PyTorch
// script. All seed 123, build the model and draw the batches with randint, so the first losses
// agree (a check printed beside the speed). Step 0 is a warm-up; a run counts as its median step,
// and the table shows the best of --reps runs per setup, the setups taking turns within a rep so
// all see the same background load. Ranks report their own peak RSS (getrusage), the largest is
// shown; "AdamW/rank" is the optimizer state a rank keeps (ZeRO-1: 1/N of the moments).
// "comm ms" is the communication thread's time per step in the gradient exchange (and its sums),
// "hidden" the share of it the training thread did not wait for after backward (the engine's
// counters, dist/bucket_exchange.h). Compare numbers within one run.
//
// Options: bench_dist --help (the table: bench/bench_dist_options.h).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_dist_options.h"
#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/settings.h"
#include "bench/torch_peer.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/rng.h"
#include "dist/bucket_exchange.h"
#include "dist/dist.h"
#include "nn/gpt.h"
#include "train/data_parallel.h"
#include "train/optim.h"
#include "train/session.h"
#include "train/trainer.h"

namespace {

using namespace tg;

constexpr int64_t kGlobalBatch = 8;
constexpr const char* kProg = "bench_dist";

struct Config {
  const char* name;
  nn::GPTConfig cfg;
};

std::vector<Config> configs() {
  nn::GPTConfig tiny = nn::gpt_preset("tiny");
  tiny.vocab_size = 50257;  // as bench_train: GPT-2's vocabulary
  return {{"tiny", tiny}, {"gpt2-124m", nn::gpt_preset("gpt2-124m")}};
}

// ---- child: one run of ours, alone or as one rank of mpirun ----

data::Batch batch_of(const std::vector<int64_t>& ids, int64_t s, int64_t B, int64_t T) {
  data::Batch b;
  b.batch_size = B, b.max_length = T;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < T; ++t) {
      const size_t base = size_t((s * B + r) * (T + 1) + t);
      b.inputs.push_back(ids[base]);
      b.targets.push_back(ids[base + 1]);
    }
  return b;
}

// Prints, on rank 0: "comm <exchange s> <wait s>" per timed step (with the overlapped exchange),
// "<first loss> <step seconds>...", "rss <KB per rank>..." and "adamw <bytes per rank>...".
int run_child(const Config& c, int64_t steps) {
  dist::init();
  train::keep_freed_memory();
  manual_seed(123);
  nn::GPTModel model(c.cfg);
  model.train();
  train::AdamW opt(model, 4e-4, 0.1);
  const int64_t T = c.cfg.context_length, B = kGlobalBatch;
  std::vector<int64_t> ids(size_t((steps + 1) * B * (T + 1)));
  randint(ids.data(), int64_t(ids.size()), 0, c.cfg.vocab_size);  // torch.randint's draws
  std::unique_ptr<train::DataParallelStep> ranks;
  if (dist::size() > 1) {
    ranks = std::make_unique<train::DataParallelStep>(model, dist::size(), false);
    ranks->take_moments(opt);
  }
  double first_loss = NAN, exchange0 = 0, wait0 = 0;
  std::vector<double> seconds;
  for (int64_t s = 0; s <= steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const data::Batch batch = batch_of(ids, s, B, T);
    opt.zero_grad();
    double loss = 0;
    if (ranks) {
      loss = ranks->loss_and_backward(batch, model);
      ranks->update(opt);
    } else {
      Tensor l = train::calc_loss_batch(from_vector(batch.inputs, {B, T}),
                                        from_vector(batch.targets, {B, T}), model);
      l.backward();
      opt.step();
      loss = l.item<double>();
    }
    if (s == 0) {
      first_loss = loss;
      if (ranks && ranks->overlap())
        exchange0 = ranks->overlap()->exchange_seconds, wait0 = ranks->overlap()->wait_seconds;
    } else {
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (ranks && ranks->overlap() && dist::rank() == 0)  // the timed steps' exchange, per step
    std::printf("comm %.6f %.6f\n",
                (ranks->overlap()->exchange_seconds - exchange0) / double(steps),
                (ranks->overlap()->wait_seconds - wait0) / double(steps));
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  int64_t adamw = 0;
  for (const Tensor& t : opt.exp_avg) adamw += t.defined() ? t.numel() * 8 : 0;
  if (ranks) adamw = ranks->moment_bytes();
  const int n = dist::size();
  std::vector<int64_t> mine = {int64_t(ru.ru_maxrss), adamw}, all(size_t(2 * n));
  std::vector<size_t> bytes(size_t(n), sizeof mine[0] * 2), offsets;
  for (int r = 0; r < n; ++r) offsets.push_back(size_t(r) * bytes[0]);
  dist::gather(mine.data(), all.data(), bytes, offsets);
  if (dist::rank() != 0) return 0;
  std::printf("%.9g", first_loss);
  for (double t : seconds) std::printf(" %.6f", t);
  std::printf("\nrss");
  for (int r = 0; r < n; ++r) std::printf(" %lld", static_cast<long long>(all[size_t(2 * r)]));
  std::printf("\nadamw");
  for (int r = 0; r < n; ++r) std::printf(" %lld", static_cast<long long>(all[size_t(2 * r + 1)]));
  std::printf("\n");
  return 0;
}

// ---- parent: setups, runs, the table ----

// One way of training a config: ours alone or under mpirun, or PyTorch DDP.
struct Setup {
  std::string key, label;
  int ranks, threads;
};

const std::vector<Setup>& all_setups() {
  static const std::vector<Setup> s = {{"1x2", "ours 1 process x 2 threads", 1, 2},
                                       {"sm", "ours 2 ranks x 1 thread, shared memory", 2, 1},
                                       {"tcp", "ours 2 ranks x 1 thread, TCP loopback", 2, 1},
                                       {"torch1", "PyTorch 1.13 DDP gloo 2 x 1", 2, 1},
                                       {"torch2", "PyTorch 2.x DDP gloo 2 x 1", 2, 1}};
  return s;
}

struct Result {
  bool ok = false;
  double first_loss = NAN, tokens_per_s = NAN;
  std::vector<double> run_medians;    // seconds per step, one per run
  long rss_kb = 0;                    // the largest peak of any rank over the runs
  int64_t adamw_bytes = -1;           // per rank, ours only
  double comm_s = NAN, wait_s = NAN;  // per step, of the best run: exchange, and its unhidden wait
  std::string error;
};

double best_step(const Result& r) {
  return r.run_medians.empty() ? NAN
                               : *std::min_element(r.run_medians.begin(), r.run_medians.end());
}

// The numbers after `tag` on the line that starts with it ("rss 1 2" -> {1, 2}).
std::vector<double> tagged(const std::string& out, const std::string& tag) {
  std::istringstream lines(out);
  std::vector<double> v;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(tag + " ", 0) != 0) continue;
    std::istringstream is(line.substr(tag.size()));
    for (double x; is >> x;) v.push_back(x);
  }
  return v;
}

// Folds one run's output into r; false (r.error set) when it is not what a child prints.
bool fold_run(Result& r, const std::string& out, int64_t steps, int64_t tokens) {
  std::istringstream is(out.substr(out.rfind("comm ", 0) == 0 ? out.find('\n') + 1 : 0));
  std::string loss_text;
  is >> loss_text;
  char* end = nullptr;
  const double loss = std::strtod(loss_text.c_str(), &end);
  std::vector<double> t(static_cast<size_t>(steps));
  bool parsed = !loss_text.empty() && *end == '\0';
  for (double& x : t) parsed = parsed && (is >> x) && x > 0;
  const std::vector<double> rss = tagged(out, "rss"), adamw = tagged(out, "adamw");
  if (!parsed || rss.empty()) {
    r.ok = false;
    r.error = "printed no loss, " + std::to_string(steps) + " step times and peak RSS";
    return false;
  }
  std::sort(t.begin(), t.end());
  const double median =
      steps % 2 ? t[size_t(steps / 2)] : (t[size_t(steps / 2 - 1)] + t[size_t(steps / 2)]) / 2;
  const std::vector<double> comm = tagged(out, "comm");
  if (comm.size() == 2 && (r.run_medians.empty() || median < best_step(r)))
    r.comm_s = comm[0], r.wait_s = comm[1];
  r.run_medians.push_back(median);
  r.first_loss = loss;
  r.rss_kb = std::max(r.rss_kb, long(*std::max_element(rss.begin(), rss.end())));
  if (!adamw.empty()) r.adamw_bytes = int64_t(*std::max_element(adamw.begin(), adamw.end()));
  r.tokens_per_s = double(tokens) / *std::min_element(r.run_medians.begin(), r.run_medians.end());
  return r.ok = true;
}

using bench_dist::Options;

std::string self_executable() {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.empty()) {
    std::cerr << kProg << ": cannot find its own executable\n";
    std::exit(1);
  }
  return self;
}

// mpirun as root needs both variables (the ranks' processes otherwise refuse to start).
void allow_mpirun_as_root() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}

// PyTorch 2.x runs in a chroot (bench/torch_peer.h's torch2-python): the script and book_gpt.py
// are copied into it. Empty when that tool is missing or has no torch.
std::string find_torch2() {
  const std::string t = bench::torch2_python(TAPEGRAD_SOURCE_ROOT);
  if (access(t.c_str(), X_OK) != 0) return "";
  std::string out, err;
  long rss = 0;
  if (!bench::run_child({t, "--root"}, 1, out, rss, err)) return "";
  const std::string root = out.substr(0, out.find('\n'));
  const std::filesystem::path dir = std::filesystem::path(root) / "tmp" / "tapegrad_bench_dist";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const char* f : {"tools/bench_ddp_torch.py", "tests/golden/book_gpt.py"})
    std::filesystem::copy_file(std::filesystem::path(TAPEGRAD_SOURCE_ROOT) / f,
                               dir / std::filesystem::path(f).filename(),
                               std::filesystem::copy_options::overwrite_existing, ec);
  return ec ? "" : t;
}

// The command line of one run of setup s on config c.
std::vector<std::string> command(const Setup& s, const Config& c, int64_t steps,
                                 const std::string& self, const Options& o) {
  const std::vector<std::string> ours = {self, "--child", c.name, std::to_string(steps)};
  std::vector<std::string> mpirun = {"/usr/bin/mpirun", "-np", std::to_string(s.ranks), "--bind-to",
                                     "none"};
  if (s.key == "1x2") return ours;
  if (s.key == "sm" || s.key == "tcp") {
    const std::vector<std::string> btl =
        s.key == "sm" ? std::vector<std::string>{"--mca", "btl", "vader,self"}
                      : std::vector<std::string>{
                            "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"};
    mpirun.insert(mpirun.end(), btl.begin(), btl.end());
    mpirun.insert(mpirun.end(), ours.begin(), ours.end());
    return mpirun;
  }
  const bool two = s.key == "torch2";
  std::vector<std::string> py = {
      two ? o.torch2 : o.torch1,
      two ? "/tmp/tapegrad_bench_dist/bench_ddp_torch.py"
          : std::string(TAPEGRAD_SOURCE_ROOT) + "/tools/bench_ddp_torch.py"};
  for (int64_t v : {c.cfg.vocab_size, c.cfg.context_length, c.cfg.emb_dim, c.cfg.n_heads,
                    c.cfg.n_layers, kGlobalBatch, steps, int64_t(s.threads), int64_t(s.ranks)})
    py.push_back(std::to_string(v));
  return py;
}

bool python_has_torch(const std::string& python) {
  std::string out, err;
  long rss = 0;
  return access(python.c_str(), X_OK) == 0 &&
         bench::run_child({python, "-c", "import torch"}, 1, out, rss, err);
}

bool available(const Setup& s, const Options& o) {
  if (s.key == "torch1") return !o.torch1.empty();
  if (s.key == "torch2") return !o.torch2.empty();
  return s.ranks == 1 || dist::built_with_mpi();
}

// ---- the runs and the table ----

struct Row {
  const Config* config;
  const Setup* setup;
  Result result;
};

// Every available setup of config c, --reps times, the setups taking turns (rep r starts at
// setup r). A failed setup is not run again.
std::vector<Row> run_config(const Config& c, const Options& o, const std::string& self) {
  const int64_t steps = std::string(c.name) == "tiny" ? o.steps_tiny : o.steps_124m;
  const int64_t tokens = kGlobalBatch * c.cfg.context_length;
  std::vector<Row> rows;
  for (const Setup& s : all_setups())
    if (std::find(o.setups.begin(), o.setups.end(), s.key) != o.setups.end() && available(s, o))
      rows.push_back({&c, &s, {}});
  for (int64_t rep = 0; rep < o.reps; ++rep)
    for (size_t i = 0; i < rows.size(); ++i) {
      Row& w = rows[(i + size_t(rep)) % rows.size()];
      if (rep > 0 && !w.result.ok) continue;
      std::string out, err;
      long rss = 0;
      if (!bench::run_child(command(*w.setup, c, steps, self, o), w.setup->threads, out, rss, err))
        w.result.error = err;
      else if (fold_run(w.result, out, steps, tokens))
        continue;
      w.result.ok = false;
      std::cerr << kProg << ": " << c.name << ", " << w.setup->label
                << ": run failed: " << w.result.error << "\n";
    }
  return rows;
}

const Result* find(const std::vector<Row>& rows, const std::string& key) {
  for (const Row& w : rows)
    if (w.setup->key == key && w.result.ok) return &w.result;
  return nullptr;
}

// The share of the exchange the training thread did not wait for.
double hidden(const Result& r) { return r.comm_s > 0 ? 1 - r.wait_s / r.comm_s : NAN; }

void print_rows(const std::vector<Row>& rows) {
  const Result* base = find(rows, "1x2");
  for (const Row& w : rows) {
    const Result& r = w.result;
    std::printf(
        "%-10s %-40s %9s %7s %8s %7s %9s %10s %10s\n", w.config->name, w.setup->label.c_str(),
        r.ok ? bench::cell("%.0f", r.tokens_per_s).c_str() : "failed",
        base && r.ok ? bench::cell("%.2fx", r.tokens_per_s / base->tokens_per_s).c_str() : "-",
        bench::cell("%.0f", 1e3 * r.comm_s).c_str(), bench::cell("%.0f%%", 100 * hidden(r)).c_str(),
        r.ok ? bench::cell("%.0f MB", double(r.rss_kb) / 1024).c_str() : "-",
        r.adamw_bytes >= 0 ? bench::cell("%.0f MB", double(r.adamw_bytes) / 1e6).c_str() : "-",
        bench::cell("%.6f", r.first_loss).c_str());
  }
  std::fflush(stdout);
}

// The targets for gpt2-124m, reported (not asserted): 2 ranks x 1 thread >= 0.9x one
// process x 2 threads, and >= 3x PyTorch DDP gloo 2 x 1.
void print_targets(const std::vector<Row>& rows) {
  const Result *base = find(rows, "1x2"), *sm = find(rows, "sm"), *tcp = find(rows, "tcp");
  const Result* ours = sm && (!tcp || sm->tokens_per_s >= tcp->tokens_per_s) ? sm : tcp;
  if (ours && base)
    std::printf("target %s: 2 ranks x 1 thread / 1 process x 2 threads = %.2fx (target >= 0.9x)\n",
                rows[0].config->name, ours->tokens_per_s / base->tokens_per_s);
  for (const char* key : {"torch1", "torch2"})
    if (const Result* t = find(rows, key); t && ours)
      std::printf("target %s: ours 2 x 1 / %s = %.2fx (target >= 3x)\n", rows[0].config->name, key,
                  ours->tokens_per_s / t->tokens_per_s);
}

std::string json_row(const Row& w, const Options& o) {
  const Result& r = w.result;
  std::string medians = "[";
  for (size_t i = 0; i < r.run_medians.size(); ++i)
    medians += (i ? ", " : "") + bench::json_number(r.run_medians[i]);
  return "{\"config\": \"" + std::string(w.config->name) + "\", \"setup\": \"" + w.setup->key +
         "\", \"label\": " + json::quote(w.setup->label) +
         ", \"cpu\": " + json::quote(bench::cpu_model()) +
         ", \"isa\": " + json::quote(kernels::active_isa()) +
         ", \"ranks\": " + std::to_string(w.setup->ranks) +
         ", \"threads_per_rank\": " + std::to_string(w.setup->threads) +
         ", \"global_batch\": " + std::to_string(kGlobalBatch) +
         ", \"context\": " + std::to_string(w.config->cfg.context_length) +
         ", \"reps\": " + std::to_string(o.reps) + ", \"ok\": " + (r.ok ? "true" : "false") +
         ", \"tokens_per_s\": " + bench::json_number(r.tokens_per_s) +
         ", \"run_median_s\": " + medians + "]" +
         ", \"comm_s_per_step\": " + bench::json_number(r.comm_s) +
         ", \"wait_s_per_step\": " + bench::json_number(r.wait_s) +
         ", \"hidden_fraction\": " + bench::json_number(hidden(r)) +
         ", \"peak_rss_mb_max_rank\": " + bench::json_number(r.ok ? double(r.rss_kb) / 1024 : NAN) +
         ", \"adamw_mb_per_rank\": " +
         bench::json_number(r.adamw_bytes >= 0 ? double(r.adamw_bytes) / 1e6 : NAN) +
         ", \"first_loss\": " + bench::json_number(r.first_loss) + "}";
}

// The command line; --child NAME STEPS (internal, first: one run, alone or as a rank of mpirun)
// runs in this process and exits.
Options parse_options(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") {
    const int64_t steps = bench::whole_int(kProg, "--child", argv[3], 1, 100000);
    for (const Config& c : configs())
      if (argv[2] == std::string(c.name)) std::exit(run_child(c, steps));
    bench::bad_option(kProg, std::string("--child: unknown config ") + argv[2]);
  }
  Options o;
  bench::parse_command(bench_dist::command(), kProg, argc, argv, o);
  std::vector<std::string> names, keys;
  for (const Config& c : configs()) names.push_back(c.name);
  for (const Setup& s : all_setups()) keys.push_back(s.key);
  o.only = bench::name_list(kProg, "--only", o.only_list, names);
  o.setups = bench::name_list(kProg, "--setups", o.setups_list, keys);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  bench::check_settings(kProg);
  const std::string self = self_executable();
  allow_mpirun_as_root();
  if (python_has_torch("/usr/bin/python3")) o.torch1 = "/usr/bin/python3";
  o.torch2 = find_torch2();
  if (!o.json) {
    std::printf("cpu: %s (%s), isa %s\n", bench::cpu_model().c_str(), bench::cache_sizes().c_str(),
                kernels::active_isa().c_str());
    std::printf("global batch %lld; best of %lld runs, each its median step\n",
                static_cast<long long>(kGlobalBatch), static_cast<long long>(o.reps));
    std::printf("%-10s %-40s %9s %7s %8s %7s %9s %10s %10s\n", "config", "setup", "tok/s", "vs 1x2",
                "comm ms", "hidden", "RSS/rank", "AdamW/rank", "loss0");
  }
  std::vector<std::string> json_rows;
  for (const Config& c : configs()) {
    if (std::find(o.only.begin(), o.only.end(), c.name) == o.only.end()) continue;
    const std::vector<Row> rows = run_config(c, o, self);
    if (rows.empty()) continue;
    if (!o.json) {
      print_rows(rows);
      print_targets(rows);
    }
    for (const Row& w : rows) json_rows.push_back(json_row(w, o));
  }
  if (o.json) {
    std::printf("[");
    for (size_t i = 0; i < json_rows.size(); ++i)
      std::printf("%s%s", i ? ",\n " : "", json_rows[i].c_str());
    std::printf("]\n");
  }
  if (!dist::built_with_mpi()) std::printf("(no MPI rows: this build has no MPI)\n");
  return 0;
}
