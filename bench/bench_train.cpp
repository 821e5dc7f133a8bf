// bench_train: training throughput (tokens/s) and peak RSS of a full step (forward, cross-entropy,
// backward, AdamW) for the tiny config, gpt2-124m (context 256, batch 2) and, when asked for,
// gpt2-124m at context 1024 (batch 2), at 2 threads, next to PyTorch running the book's GPTModel
// on the same batches: PyTorch 1.13 (/usr/bin/python3) and PyTorch 2.x (torch2-python, see
// bench/torch_peer.h; also with the model's attention core through
// F.scaled_dot_product_attention, as a PyTorch 2 user would write it), each skipped with a note
// when absent. Ours runs once per attention route (--attention: the fused
// scaled_dot_product_attention, the book's op-by-op MultiHeadAttention). The speedup is ours over
// the fastest PyTorch side.
//
// PyTorch runs the kernels of our path's width (bench/torch_peer.h): the header names what it
// loaded (ATen's capability, OpenBLAS's kernel set) and every environment variable set or
// removed for it, and why.
//
// --precision fp32,bf16: ours also under AutocastGuard (core/ops.h, torch.autocast's CPU rule, as
// `tapegrad train --precision bf16` runs TrainLoop::autocast: each forward and the loss inside the
// scope, backward and AdamW outside it on float32 weights), beside PyTorch 2 with the book's
// forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) and with its model in
// bfloat16 (bf16-pure: model.to(torch.bfloat16), as the book's ch05/10_llm-training-speed does,
// and ours as `tapegrad train --precision bf16-pure`: the model and AdamW's moments in bf16).
// PyTorch 1.13 runs float32 only.
//
// --pad-vocab N: ours also with out_head's rows padded to a multiple of N (`tapegrad train
// --pad-vocab N`, the book's ch05/10 50257 -> 50304), as rows of their own ("tapegrad fused
// pad64") beside the unpadded ones, taking turns with them. The padded model computes the same
// losses (loss0 equal) on wider GEMMs; its bound is the unpadded model's, the work asked for.
//
// Beside every figure, the step's bound: its GEMM FLOPs at the FMA probe (bf16 rows: the path's
// bf16 probe, vdpbf16ps; the FMA probe where the path widens bf16 to float32) plus the bytes the
// optimizer and the embeddings move at the copy probe's bandwidth, and our fraction of it. The
// probes run at --threads before the first configuration and after each one, and each keeps its
// best: on a shared machine one probe under a neighbour's load would set the bound too low (of
// bound read 104-140% so). The load average is printed at the start and the end, with a warning
// on stderr when it is above 0.5 at the start.
//
// Each measurement runs in a child process (this binary with --child, or tools/
// bench_train_torch.py), so peak RSS (wait4's ru_maxrss) belongs to that run alone. Every side
// seeds 123, builds the model, then draws the batches with randint, so the weights, batches and
// dropout masks are the same: the first step's losses are printed side by side as a check.
// Step 0 is a warm-up and not timed; each child prints every timed step's seconds. A run counts
// as its median step (one slow step from a neighbour's burst does not move it), and the table
// shows the best of --reps runs per side, the sides taking turns so that all see the same
// background load; the mean step of every run is in --json. Compare numbers within one machine.
//
// Options: bench_train --help (the table: bench/bench_train_options.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_train_options.h"
#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/probes.h"
#include "bench/settings.h"
#include "bench/torch_peer.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/plot.h"
#include "train/session.h"
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
int run_child(Config c, int64_t steps, const std::string& attention, const std::string& precision,
              int64_t pad_vocab) {
  train::keep_freed_memory();  // as `tapegrad train` does
  c.cfg.attention = attention;
  c.cfg.pad_vocab = pad_vocab;
  c.cfg.validate();
  manual_seed(123);
  nn::GPTModel model(c.cfg);
  model.train();
  train::AdamW opt(model, 4e-4, 0.1);
  if (precision == "bf16-pure") {  // as tapegrad train --precision bf16-pure
    model.to(DType::BFloat16);
    opt.to(DType::BFloat16);
  }
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
    Tensor loss;
    {
      AutocastGuard autocast(precision == "bf16");  // TrainLoop::autocast's scope
      loss = train::calc_loss_batch(from_vector(x, {B, T}), from_vector(y, {B, T}), model);
    }
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
int child_main(const Config& c, int64_t steps, const std::string& route,
               const std::string& precision, int64_t pad_vocab) {
  Config checked = c;
  checked.cfg.attention = route;
  checked.cfg.validate();  // throws std::invalid_argument: parse_options reports it
  try {
    return run_child(c, steps, route, precision, pad_vocab);
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
             int64_t tokens_per_step, const std::vector<bench::EnvChange>& env) {
  std::string out, error;
  long rss_kb = 0;
  if (!bench::run_child(args, threads, out, rss_kb, error, env)) return fail(r, error);
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

// --isa NAME: our runs take that path (TAPEGRAD_ISA, inherited by our children).
void select_isa(const std::string& isa) {
  const std::vector<std::string> have = tg::kernels::available_isas();
  if (std::find(have.begin(), have.end(), isa) == have.end()) {
    std::string names;
    for (const std::string& h : have) names += (names.empty() ? "" : ", ") + h;
    bench::bad_option("bench_train",
                      "--isa " + isa + " is not available on this machine (it has " + names + ")");
  }
  setenv("TAPEGRAD_ISA", isa.c_str(), 1);
  tg::kernels::set_isa(isa);  // the probes below run on it too
}

using bench_train::Options;

// --child NAME STEPS ROUTE PRECISION PAD: a route the model refuses is a bad option (exit 2).
[[noreturn]] void child(char** argv) {
  const std::string name = argv[0];
  const int64_t steps = bench::whole_int("bench_train", "--child steps", argv[1], 1, 100000);
  bench::name_list("bench_train", "--child precision", argv[3], bench_train::precisions());
  const int64_t pad =
      bench::whole_int("bench_train", "--child pad", argv[4], 1, long(nn::kMaxPadVocab));
  for (const Config& c : configs())
    if (name == c.name) {
      try {
        std::exit(child_main(c, steps, argv[2], argv[3], pad));
      } catch (const std::invalid_argument& e) {
        bench::bad_option("bench_train", std::string("bad value for --child: ") + e.what());
      }
    }
  bench::bad_option("bench_train", "unknown config " + name);
}

Options parse_options(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--child") child(argv + 2);
  Options o;
  bench::parse_command(bench_train::command(), "bench_train", argc, argv, o);
  o.only = bench::name_list("bench_train", "--only", o.only_list,
                            {"tiny", "gpt2-124m", "gpt2-124m-1024"});
  o.routes = bench::name_list("bench_train", "--attention", o.routes_list,
                              {nn::kAttentionRoutes.begin(), nn::kAttentionRoutes.end()});
  o.precision =
      bench::name_list("bench_train", "--precision", o.precision_list, bench_train::precisions());
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

// ---- the machine: its CPU, our path, the probes (each the best over the run) and the load ----

struct Machine {
  std::string cpu, caches, isa;
  bool avx512_bf16 = false, amx_bf16 = false;            // /proc/cpuinfo's flags
  bool bf16_unit = false;                                // our path has a bf16 probe (vdpbf16ps)
  double gflops = 0, bf16_gflops = 0, gbytes_per_s = 0;  // FMA, bf16 and copy probes, best
  int probe_rounds = 0;
  std::string load_start, load_end;  // /proc/loadavg's three figures
};

Machine machine() {
  Machine m;
  m.cpu = bench::cpu_model();
  m.caches = bench::cache_sizes();
  m.isa = tg::kernels::active_isa();
  m.avx512_bf16 = bench::cpu_has_flag("avx512_bf16");
  m.amx_bf16 = bench::cpu_has_flag("amx_bf16");
  m.bf16_unit = tg::kernels::active_table().bf16_probe != nullptr;
  double one_minute = 0;
  m.load_start = bench::load_average(one_minute);
  if (one_minute > 0.5)
    std::fprintf(stderr,
                 "bench_train: warning: load average %s at the start (above 0.5): other work "
                 "shares the cores, the figures are indicative only\n",
                 m.load_start.c_str());
  return m;
}

// One more round of the probes at --threads; each keeps its best over the run.
void reprobe(Machine& m, const Options& o) {
  const int threads = int(o.threads);
  m.gflops = std::max(m.gflops, bench::probe_peak(threads));
  if (m.bf16_unit && o.precision != std::vector<std::string>{"fp32"})  // a bf16 row bounds by it
    m.bf16_gflops = std::max(m.bf16_gflops, bench::probe_peak(threads, true));
  m.gbytes_per_s = std::max(m.gbytes_per_s, bench::copy_bandwidth(threads));
  ++m.probe_rounds;
}

// ---- the bound: a step can go no faster than its GEMMs at the FMA probe (bf16: the bf16 probe)
// plus the bytes the optimizer and the embeddings must move at the copy probe's bandwidth ----

struct Bound {
  double params = 0, gemm_flops = 0, bytes = 0;  // per step
  double gflops = 0, gemm_s = 0, mem_s = 0, tokens_per_s = 0;
  std::string probe;  // which probe bounds the GEMMs
};

Bound step_bound(const Config& c, double gflops, double gbytes_per_s) {
  const double V = double(c.cfg.vocab_size), T = double(c.cfg.context_length);
  const double C = double(c.cfg.emb_dim), L = double(c.cfg.n_layers), B = double(c.batch);
  Bound b;
  // Token and position tables, per block W_q, W_k, W_v, out_proj (+ bias), the feed-forward's
  // two layers (+ biases) and two LayerNorms, the final LayerNorm and the untied head.
  b.params = V * C + T * C + L * (4 * C * C + C + 8 * C * C + 5 * C + 4 * C) + 2 * C + C * V;
  // Forward: per token 2·(3C² + C² + 8C²) per block and 2·C·V for the head; per sequence and
  // block the causal half of q·kᵀ and of p·v, 2·T²·C. Backward: twice the forward.
  const double fwd = B * T * (L * 24 * C * C + 2 * C * V) + L * B * 2 * T * T * C;
  b.gemm_flops = 3 * fwd;
  // AdamW reads p, g, m, v and writes p, m, v; zero_grad writes g: 32 bytes per parameter. The
  // embeddings per token: the forward reads two rows and writes one, the backward reads the
  // gradient row and reads and writes a row of each table's gradient: 8 rows of C floats.
  // (bf16 keeps float32 weights and moments: the same bytes; its casts are left out, so the
  // bound stays an upper one.)
  b.bytes = 32 * b.params + 8 * B * T * C * 4;
  b.gflops = gflops;
  b.gemm_s = b.gemm_flops / (gflops * 1e9);
  b.mem_s = b.bytes / (gbytes_per_s * 1e9);
  b.tokens_per_s = B * T / (b.gemm_s + b.mem_s);
  return b;
}

// The bound of a row at `precision` (bf16-pure, PyTorch's, is bounded as bf16).
Bound bound_of(const Config& c, const Machine& m, const std::string& precision) {
  const bool bf16 = precision != "fp32";
  Bound b = step_bound(c, bf16 && m.bf16_unit ? m.bf16_gflops : m.gflops, m.gbytes_per_s);
  b.probe = !bf16         ? "FMA probe"
            : m.bf16_unit ? "bf16 probe"
                          : "FMA probe: no bf16 unit on the " + m.isa + " path";
  return b;
}

// ---- the sides of a configuration: ours on each attention route and precision, each PyTorch on
// the book's model and (PyTorch 2) on its scaled_dot_product_attention, in float32 and (PyTorch
// 2) under autocast and with its model in bf16 ----

using bench::Peer;

struct Side {
  std::string name;       // "tapegrad fused", "torch 2.6.0 sdpa"
  const Peer* peer;       // null: ours
  std::string route;      // ours: fused / book; PyTorch: book / sdpa
  std::string precision;  // fp32, bf16; PyTorch also bf16-pure
  int64_t pad_vocab = 1;  // ours: out_head padded to a multiple of it (--pad-vocab)
  Result result;
};

bool torch1(const Peer& p) { return p.torch.version.rfind("torch 1.", 0) == 0; }

std::vector<Side> sides_of(const Options& o, const std::vector<Peer>& peers) {
  std::vector<Side> v;
  for (const std::string& prec : o.precision) {
    for (const std::string& r : o.routes) {
      v.push_back({"tapegrad " + r, nullptr, r, prec, 1, {}});
      if (o.pad_vocab > 1) {
        const std::string label = "tapegrad " + r + " pad" + std::to_string(o.pad_vocab);
        v.push_back({label, nullptr, r, prec, o.pad_vocab, {}});
      }
    }
    for (const Peer& p : peers) {
      if (prec != "fp32" && torch1(p)) continue;
      for (const char* r : {"book", "sdpa"})
        if (r == std::string("book") || !torch1(p))
          v.push_back({p.torch.version + " " + r, &p, r, prec, 1, {}});
    }
  }
  return v;
}

std::vector<std::string> side_command(const Side& s, const Config& c, int64_t steps,
                                      const Options& o, const std::string& self) {
  if (s.peer == nullptr) {
    const std::string pad = std::to_string(s.pad_vocab);
    return {self, "--child", c.name, std::to_string(steps), s.route, s.precision, pad};
  }
  // The script with -c and the book's classes as its last argument (bench/torch_peer.h).
  static const std::string script =
      bench::source_text("bench_train", TAPEGRAD_SOURCE_ROOT, "tools/bench_train_torch.py");
  static const std::string book =
      bench::source_text("bench_train", TAPEGRAD_SOURCE_ROOT, "tests/golden/book_gpt.py");
  std::vector<std::string> cmd = s.peer->torch.launcher;
  const std::vector<std::string> args = {"-c",
                                         script,
                                         std::to_string(c.cfg.vocab_size),
                                         std::to_string(c.cfg.context_length),
                                         std::to_string(c.cfg.emb_dim),
                                         std::to_string(c.cfg.n_heads),
                                         std::to_string(c.cfg.n_layers),
                                         std::to_string(c.batch),
                                         std::to_string(steps),
                                         std::to_string(o.threads),
                                         s.route,
                                         s.precision,
                                         book};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

// Every side's runs of configuration c, the sides taking turns (each round starting one side
// later) so that all see the same background load. A failed run stops the benchmark: one line
// naming the side, exit status 1.
void run_sides(const Config& c, const Options& o, const std::string& self,
               std::vector<Side>& sides) {
  const int64_t steps = std::string(c.name) == "tiny" ? o.steps_tiny : o.steps_124m;
  const int64_t tokens = c.batch * c.cfg.context_length;
  const size_t n = sides.size();
  for (int64_t r = 0; r < o.reps; ++r)
    for (size_t k = 0; k < n; ++k) {
      Side& s = sides[(k + size_t(r)) % n];
      const std::vector<bench::EnvChange> env =
          s.peer ? s.peer->env.changes : std::vector<bench::EnvChange>{};
      if (!measure(s.result, side_command(s, c, steps, o, self), o.threads, steps, tokens, env)) {
        std::cerr << "bench_train: " << s.name << " (" << s.precision << ") on " << c.name
                  << " failed: " << s.result.error << "\n";
        std::exit(1);
      }
    }
}

// The fastest PyTorch side of a configuration (any precision), or null.
const Side* fastest_torch(const std::vector<Side>& sides) {
  const Side* best = nullptr;
  for (const Side& s : sides)
    if (s.peer && (!best || s.result.tokens_per_s > best->result.tokens_per_s)) best = &s;
  return best;
}

// A configuration's sides after their runs.
struct ConfigRun {
  Config config;
  std::vector<Side> sides;
};

// ---- output ----

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_header(const Options& o, const Machine& m, const std::vector<Peer>& peers,
                  const std::vector<std::string>& notes) {
  std::printf("cpu: %s (%s); /proc/cpuinfo: avx512_bf16 %s, amx_bf16 %s\n", m.cpu.c_str(),
              m.caches.c_str(), yes_no(m.avx512_bf16), yes_no(m.amx_bf16));
  std::printf("load average: %s at the start, %s at the end\n", m.load_start.c_str(),
              m.load_end.c_str());
  std::printf(
      "ours: %s path, %d thread(s); probes, best of %d rounds over the run: FMA %.1f "
      "GFLOP/s",
      m.isa.c_str(), int(o.threads), m.probe_rounds, m.gflops);
  if (m.bf16_gflops > 0) std::printf(", bf16 (vdpbf16ps) %.1f GFLOP/s", m.bf16_gflops);
  std::printf(", copy %.1f GB/s\n", m.gbytes_per_s);
  for (const Peer& p : peers) {
    std::printf("peer: %s (%s): %s\n", p.torch.version.c_str(), p.torch.launcher[0].c_str(),
                p.kernels.c_str());
    for (const std::string& n : p.env.notes)
      std::printf("  %s: %s\n", p.torch.version.c_str(), n.c_str());
  }
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("%-14s %-22s %-9s %11s %8s %9s %-40s %8s\n", "config", "side", "precision", "tok/s",
              "RSS", "loss0", "vs fastest PyTorch", "of bound");
}

void print_config(const ConfigRun& run, const Options& o, const Machine& m) {
  const Config& c = run.config;
  const Side* fastest = fastest_torch(run.sides);
  for (const Side& s : run.sides) {
    const Result& r = s.result;
    char vs[96] = "", of[16] = "";
    if (!s.peer && fastest)
      std::snprintf(vs, sizeof vs, "%6.2fx (%s %s)", r.tokens_per_s / fastest->result.tokens_per_s,
                    fastest->name.c_str(), fastest->precision.c_str());
    if (!s.peer)
      std::snprintf(of, sizeof of, "%7.1f%%",
                    100 * r.tokens_per_s / bound_of(c, m, s.precision).tokens_per_s);
    std::printf("%-14s %-22s %-9s %11.1f %5.0f MB %9.6f %-40s %8s\n", c.name, s.name.c_str(),
                s.precision.c_str(), r.tokens_per_s, double(r.rss_kb) / 1024, r.first_loss, vs, of);
  }
  for (const std::string& prec : o.precision) {
    const Bound b = bound_of(c, m, prec);
    std::printf(
        "%-14s bound %s %.0f tok/s: GEMMs %.3g GFLOP/step at %.1f GFLOP/s (%s) = %.1f ms, "
        "optimizer and embeddings %.3g GB at %.1f GB/s = %.1f ms (%.4g M parameters)\n",
        c.name, prec.c_str(), b.tokens_per_s, b.gemm_flops * 1e-9, b.gflops, b.probe.c_str(),
        b.gemm_s * 1e3, b.bytes * 1e-9, m.gbytes_per_s, b.mem_s * 1e3, b.params * 1e-6);
  }
  std::fflush(stdout);
}

// One side of a configuration in --json; ours with its bound, its fraction of it and its ratio
// to the fastest PyTorch side.
std::string json_side(const Side& s, const Config& c, const Machine& m, const Side* fastest) {
  const Result& r = s.result;
  std::string out =
      "{\"side\": " + json::quote(s.name) + ", \"precision\": " + json::quote(s.precision) +
      ", \"pad_vocab\": " + std::to_string(s.pad_vocab) +
      ", \"kernels\": " + json::quote(s.peer ? s.peer->kernels : m.isa) + ", \"peer_env\": " +
      bench::json_strings(s.peer ? s.peer->env.notes : std::vector<std::string>{}) +
      ", \"tokens_per_s\": " + bench::json_number(r.tokens_per_s) +
      ", \"run_median_s\": " + json_list(r.run_medians) +
      ", \"run_mean_s\": " + json_list(r.run_means) +
      ", \"peak_rss_mb\": " + bench::json_number(double(r.rss_kb) / 1024) +
      ", \"first_loss\": " + bench::json_number(r.first_loss);
  if (!s.peer && fastest)
    out += ", \"speedup_vs_fastest_torch\": " +
           bench::json_number(r.tokens_per_s / fastest->result.tokens_per_s) +
           ", \"fastest_torch\": " + json::quote(fastest->name + " " + fastest->precision);
  if (!s.peer) {
    const Bound b = bound_of(c, m, s.precision);
    out += ", \"bound_tokens_per_s\": " + bench::json_number(b.tokens_per_s) +
           ", \"bound_probe\": " + json::quote(b.probe) +
           ", \"bound_fraction\": " + bench::json_number(r.tokens_per_s / b.tokens_per_s);
  }
  return out + "}";
}

std::string json_config(const ConfigRun& run, const Options& o, const Machine& m) {
  const Config& c = run.config;
  const Bound b = bound_of(c, m, "fp32");
  std::string out =
      "{\"config\": " + json::quote(c.name) + ", \"cpu\": " + json::quote(m.cpu) +
      ", \"caches\": " + json::quote(m.caches) + ", \"isa\": " + json::quote(m.isa) +
      ", \"cpu_avx512_bf16\": " + (m.avx512_bf16 ? "true" : "false") +
      ", \"cpu_amx_bf16\": " + (m.amx_bf16 ? "true" : "false") +
      ", \"threads\": " + std::to_string(o.threads) + ", \"batch\": " + std::to_string(c.batch) +
      ", \"context\": " + std::to_string(c.cfg.context_length) +
      ", \"reps\": " + std::to_string(o.reps) +
      ", \"probe_rounds\": " + std::to_string(m.probe_rounds) +
      ", \"fma_probe_gflops\": " + bench::json_number(m.gflops) +
      ", \"bf16_probe_gflops\": " + bench::json_number(m.bf16_gflops > 0 ? m.bf16_gflops : NAN) +
      ", \"copy_probe_gbs\": " + bench::json_number(m.gbytes_per_s) +
      ", \"params\": " + bench::json_number(b.params) +
      ", \"gemm_flops\": " + bench::json_number(b.gemm_flops) +
      ", \"bytes\": " + bench::json_number(b.bytes) +
      ", \"bound_tokens_per_s\": " + bench::json_number(b.tokens_per_s) + ", \"sides\": [";
  const Side* fastest = fastest_torch(run.sides);
  for (size_t i = 0; i < run.sides.size(); ++i)
    out += std::string(i ? ", " : "") + json_side(run.sides[i], c, m, fastest);
  return out + "]}";
}

// --svg: a panel per configuration, tokens/s per side, each side's bound as a line.
void write_svg(const std::string& path, const std::vector<ConfigRun>& runs, const Machine& m,
               const Options& o) {
  std::vector<tg::train::BarPanel> panels;
  for (const ConfigRun& run : runs) {
    tg::train::BarPanel p;
    p.title = std::string(run.config.name) + ", " + std::to_string(o.threads) + " thread(s)";
    p.y_label = "tokens/s";
    p.bars = {{"tokens/s", {}}};
    p.line.name =
        "bound (GEMMs at the FMA probe, bf16: the bf16 probe; optimizer and embeddings at the copy "
        "probe)";
    for (const Side& s : run.sides) {
      p.categories.push_back(s.name + (o.precision.size() > 1 ? " " + s.precision : ""));
      p.bars[0].values.push_back(s.result.tokens_per_s);
      p.line.values.push_back(bound_of(run.config, m, s.precision).tokens_per_s);
    }
    panels.push_back(p);
  }
  try {
    tg::train::plot_bars(path, "training step, tokens/s, best of " + std::to_string(o.reps), panels,
                         m.cpu + "; ours on " + m.isa);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: --svg %s\n", e.what());
    std::exit(1);
  }
}

// The PyTorch peers that answer, each with its environment beside our path and its kernels.
std::vector<Peer> find_peers(const Options& o, const std::string& isa,
                             std::vector<std::string>& notes) {
  std::vector<Peer> peers;
  if (o.no_torch) {
    notes.push_back("no PyTorch peers (--no-torch)");
    return peers;
  }
  const std::vector<std::pair<std::string, std::string>> where = {
      {"/usr/bin/python3", "PyTorch 1.13"},
      {bench::torch2_python(TAPEGRAD_SOURCE_ROOT), "PyTorch 2 (TAPEGRAD_TORCH2_PYTHON)"}};
  for (const auto& [launcher, what] : where) {
    Peer p = bench::find_peer(launcher, what, isa);
    if (p.torch.version.empty())
      notes.push_back("skipped " + p.torch.why_not);
    else
      peers.push_back(p);
  }
  if (o.precision != std::vector<std::string>{"fp32"} && !peers.empty())
    notes.push_back(
        "bf16: PyTorch 2 with the book's forward and loss under torch.autocast(\"cpu\", "
        "dtype=torch.bfloat16); bf16-pure: model.to(torch.bfloat16), AdamW on bfloat16 "
        "parameters, as the book's ch05/10_llm-training-speed (ours: --precision bf16-pure); "
        "PyTorch 1.13 runs fp32 only");
  return peers;
}

void report(const Options& o, const Machine& m, const std::vector<Peer>& peers,
            const std::vector<std::string>& notes, const std::vector<ConfigRun>& runs) {
  if (o.json) {
    std::printf(
        "{\"notes\": %s, \"load_average_start\": %s, \"load_average_end\": %s, "
        "\"configs\": [",
        bench::json_strings(notes).c_str(), json::quote(m.load_start).c_str(),
        json::quote(m.load_end).c_str());
    for (size_t i = 0; i < runs.size(); ++i)
      std::printf("%s%s", i ? ",\n " : "", json_config(runs[i], o, m).c_str());
    std::printf("]}\n");
  } else {
    print_header(o, m, peers, notes);
    for (const ConfigRun& run : runs) print_config(run, o, m);
  }
  if (!o.svg.empty()) write_svg(o.svg, runs, m, o);
}

}  // namespace

// The table comes at the end, when the probes have had every round (each keeps its best).
int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  bench::check_settings("bench_train");
  const std::string self = self_executable();
  if (!o.isa.empty()) select_isa(o.isa);
  Machine m = machine();
  std::vector<std::string> notes;
  std::vector<Peer> peers = find_peers(o, m.isa, notes);
  tg::set_num_threads(o.threads);
  reprobe(m, o);
  std::vector<ConfigRun> runs;
  for (const Config& c : configs()) {
    if (std::find(o.only.begin(), o.only.end(), c.name) == o.only.end()) continue;
    runs.push_back({c, sides_of(o, peers)});
    run_sides(c, o, self, runs.back().sides);
    reprobe(m, o);
  }
  double one_minute = 0;
  m.load_end = bench::load_average(one_minute);
  report(o, m, peers, notes, runs);
  return 0;
}
