// bench_generate: generation throughput (new tokens/s) of GPT-2-shaped models with random weights
// (gpt2-124m and gpt2-medium: the book's §5.5 config, context 1024, qkv_bias), batch 1, a
// 16-token prompt, greedy: tapegrad's KV-cache route (train::generate_cached) and its uncached
// generate(), beside PyTorch running the book's GPTModel with its bonus KV cache
// (tools/kv_cache_gpt.py; PyTorch 2.x found as bench/torch_peer.h finds it, else 1.13, or
// --torch-python's), and beside the memory-bandwidth bound. The table, or --json, names the CPU,
// our kernel path and the peer's, and gives ours over PyTorch's.
//
// The bound: a cached step reads every weight once (the blocks, ln_f, out_head's vocab × C; one
// row of wte and wpe) plus each layer's cached keys and values so far (2 × position × C values),
// so n new tokens read Σ_i (weights + cache_i) bytes, at 4 bytes a value, or 2 with --precision
// bf16 (the model converted by GPTModel::to(BFloat16), its cache in bf16 too: half the bytes); at
// the bandwidth measured here (sum_rows streaming a buffer the size of the precision's own weights
// with the same threads, once before each of --reps runs of ours, the best: on this project's VMs
// the figure moves from run to run by up to 2x, and a bf16 model's 250 MB may sit in a level of
// the hierarchy a float32 model's 500 MB does not) they cannot take less than bytes / BW. Past
// context_length (16 + 1024 > 1024) the book's loop crops the context, which moves every position:
// those steps rebuild the cache from 1024 tokens (compute, not memory); their count is printed, and
// the bound counts each at the FMA probe: the blocks over context_length tokens (2·T·12·L·C² FLOPs,
// and 2·L·T²·C for causal attention) and one row of out_head.
//
// --precision fp32,bf16: each model also converted to bfloat16 (GPTModel::to, as generate
// --precision bf16 does; its one-row linears on kernels::gemv_rows_bf16), bounded at 2 bytes a
// value; the PyTorch peer runs float32 rows only.
// Each measurement is the best of --reps runs; ours and PyTorch's alternate per rep so both see
// the same background load. Uncached generation costs O(T²) per sequence: it runs only where
// --uncached-max allows (default 256 new tokens, gpt2-124m). Compare numbers within one machine.
//
// Options: bench_generate --help (the table: bench/bench_generate_options.h).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_generate_options.h"
#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/probes.h"
#include "bench/settings.h"
#include "bench/torch_peer.h"
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
// one row each of tok_emb and pos_emb; `value` bytes each (4 float32, 2 bf16).
double weight_bytes(const nn::GPTConfig& c, double value = 4) {
  const double C = double(c.emb_dim), L = double(c.n_layers), V = double(c.vocab_size);
  return value * (L * (12 * C * C + 13 * C) + 2 * C + V * C + 2 * C);
}

// FLOPs of one rebuild: the blocks over the whole cropped context, one row of out_head.
double rebuild_flops(const nn::GPTConfig& c) {
  const double C = double(c.emb_dim), L = double(c.n_layers), T = double(c.context_length);
  return 2 * T * 12 * L * C * C + 2 * L * T * T * C + 2 * double(c.vocab_size) * C;
}

// The least time n new tokens after a kPrompt-token prompt can take: the cached steps' bytes
// (`value` bytes a weight or cached value) at BW bytes/s, the rebuilds' FLOPs at `flops` per
// second; `rebuilds` gets their count.
double bound_seconds(const nn::GPTConfig& c, int64_t n, double bw, double flops, double value,
                     int64_t& rebuilds) {
  double bytes = 0;
  rebuilds = 0;
  for (int64_t i = 1; i < n; ++i) {   // step 0 is the prompt's pass
    const int64_t pos = kPrompt + i;  // tokens the step's context holds
    if (pos > c.context_length) {
      ++rebuilds;
      continue;
    }
    bytes +=
        weight_bytes(c, value) + 2.0 * value * double(c.n_layers) * double(pos) * double(c.emb_dim);
  }
  return bytes / bw + double(rebuilds) * rebuild_flops(c) / flops;
}

// Read bandwidth over a buffer the size of the model's weights (the same level of the memory
// hierarchy: this Xeon's 480 MB L3 holds much of gpt2-124m's 500 MB), summed by sum_rows, best
// of reps, in bytes/s; or the copy probe's, when that is higher (one thread's sum_rows read
// 12.6 GB/s on the Xeon, below what the cached steps reached, so it was no bound).
double measure_bandwidth(double bytes, int reps, int threads) {
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
  return std::max(double(rows * cols) * 4 / best, bench::copy_bandwidth(threads) * 1e9);
}

struct Row {
  std::string model, precision;
  int64_t tokens = 0;
  int threads = 0;
  double cached = 0, uncached = NAN, torch_cached = NAN, bound = NAN, bw = 0;  // NaN: none
  int64_t rebuilds = 0;
};

using bench::Peer;

// One PyTorch run's tokens/s, or NaN (with a note on stderr) when it fails.
double torch_tokens_per_s(const Peer& peer, const std::string& model, int64_t tokens, int threads) {
  // Run as `python -c SOURCE`: torch2-python's chroot does not see this tree.
  static const std::string source =
      bench::source_text(kProg, TAPEGRAD_SOURCE_ROOT, "tools/kv_cache_gpt.py");
  std::vector<std::string> args = peer.torch.launcher;
  args.insert(args.end(), {"-c", source, "--model", model, "--new-tokens", std::to_string(tokens),
                           "--threads", std::to_string(threads), "--reps", "1"});
  std::string out, err;
  long rss = 0;
  if (!bench::run_child(args, threads, out, rss, err, peer.env.changes)) {
    std::fprintf(stderr, "%s: PyTorch run failed: %s\n", kProg, err.c_str());
    return NAN;
  }
  try {
    const json::Value v = json::parse(out);
    const json::Value* t = v.find("tokens_per_s");
    if (t && t->kind == json::Value::Kind::Number) return t->num;
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "%s: PyTorch printed no tokens_per_s: %s\n", kProg, out.c_str());
  return NAN;
}

double ours_tokens_per_s(nn::GPTModel& model, const std::vector<int64_t>& prompt, int64_t n,
                         bool cached) {
  Generator gen;
  const auto t0 = std::chrono::steady_clock::now();
  (cached ? train::generate_cached : train::generate)(model, prompt, n, 1024, 0, 0, -1, gen, {});
  return double(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using bench_generate::Options;

Options parse_options(int argc, char** argv) {
  Options o;
  bench::parse_command(bench_generate::command(), kProg, argc, argv, o);
  o.models = bench::name_list(kProg, "--models", o.models_list, {"gpt2-124m", "gpt2-medium"});
  o.tokens = bench::int_list(kProg, "--tokens", o.tokens_list, 1, 100000);
  o.threads = bench::int_list(kProg, "--threads", o.threads_list, 1, 1024);
  o.precision = bench::name_list(kProg, "--precision", o.precision_list, {"fp32", "bf16"});
  return o;
}

// The PyTorch peer, on the kernels beside our path (bench/torch_peer.h): --torch-python's
// interpreter (without torch: a bad option), else PyTorch 2 where torch_peer.h finds it, else
// PyTorch 1.13; none (an empty version) with --no-torch or when neither answers, with a note.
Peer choose_peer(const Options& o, std::vector<std::string>& notes) {
  return bench::choose_peer(kProg, TAPEGRAD_SOURCE_ROOT, o.no_torch, o.torch_python,
                            kernels::active_isa(), notes);
}

void print_header(const Options& o, const Peer& peer, const std::vector<std::string>& notes,
                  const std::array<double, 3>& load) {
  std::printf("%s: %s (%s; /proc/cpuinfo: %s), ISA path %s, load average %.2f %.2f %.2f\n", kProg,
              bench::cpu_model().c_str(), bench::cache_sizes().c_str(), bench::bf16_units().c_str(),
              kernels::active_isa().c_str(), load[0], load[1], load[2]);
  std::printf("batch 1, prompt %lld tokens, greedy, best of %lld\n",
              static_cast<long long>(kPrompt), static_cast<long long>(o.reps));
  if (!peer.torch.version.empty()) {
    std::printf("peer: %s (%s): %s\n", peer.torch.version.c_str(), peer.torch.launcher[0].c_str(),
                peer.kernels.c_str());
    for (const std::string& n : peer.env.notes)
      std::printf("  %s: %s\n", peer.torch.version.c_str(), n.c_str());
  }
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("%-12s %-4s %6s %3s %10s %10s %10s %10s %8s %8s %8s %6s\n", "model", "prec", "tokens",
              "thr", "cached/s", "uncached/s", "torch kv/s", "bound/s", "of bound", "x torch",
              "GB/s", "rebuilt");
}

void print_row(const Row& r) {
  std::printf("%-12s %-4s %6lld %3d %10.2f %10s %10s %10s %8s %8s %8.1f %6lld\n", r.model.c_str(),
              r.precision.c_str(), static_cast<long long>(r.tokens), r.threads, r.cached,
              bench::cell("%.2f", r.uncached).c_str(), bench::cell("%.2f", r.torch_cached).c_str(),
              bench::cell("%.2f", r.bound).c_str(),
              bench::cell("%.0f%%", 100 * r.cached / r.bound).c_str(),
              bench::cell("%.2f", r.cached / r.torch_cached).c_str(), r.bw / 1e9,
              static_cast<long long>(r.rebuilds));
  std::fflush(stdout);
}

// The rows of one model at one thread count and precision (printed as they come, without
// --json), each beside the bandwidth measured before each of its reps. The model is made afresh
// under the same seed for each precision (bf16: then converted, as generate --precision bf16
// converts it), so both run the same weights.
void measure_precision(const Options& o, const Peer& peer, const std::string& name, int threads,
                       const std::string& precision, std::vector<Row>& rows) {
  const bool bf16 = precision == "bf16";
  const nn::GPTConfig cfg = model_config(name);
  manual_seed(123);
  nn::GPTModel model(cfg);
  model.eval();
  if (bf16) model.to(DType::BFloat16);
  std::vector<int64_t> prompt(kPrompt);
  randint(prompt.data(), kPrompt, 0, cfg.vocab_size);
  // Rebuilds are GEMMs: bf16's run at the bf16 unit's rate where there is one.
  const double flops = bench::probe_peak(threads, bf16) * 1e9;
  for (const int n : o.tokens) {
    Row r{name, precision, n, threads};
    for (int64_t rep = 0; rep < o.reps; ++rep) {
      r.bw = std::max(r.bw, measure_bandwidth(weight_bytes(cfg, bf16 ? 2 : 4), 1, threads));
      r.cached = std::max(r.cached, ours_tokens_per_s(model, prompt, n, true));
      // The peer runs float32 only (tools/kv_cache_gpt.py); fmax: NaN (a failed run) is no
      // better than none.
      if (!peer.torch.version.empty() && !bf16)
        r.torch_cached = std::fmax(r.torch_cached, torch_tokens_per_s(peer, name, n, threads));
    }
    const double bound_s = bound_seconds(cfg, n, r.bw, flops, bf16 ? 2 : 4, r.rebuilds);
    r.bound = bound_s > 0 ? double(n) / bound_s : NAN;  // NaN: no cached step to bound
    if (n <= o.uncached_max && name == "gpt2-124m")
      r.uncached = ours_tokens_per_s(model, prompt, n, false);
    rows.push_back(r);
    if (!o.json) print_row(r);
  }
}

// Every precision's rows of one model at one thread count.
void measure(const Options& o, const Peer& peer, const std::string& name, int threads,
             std::vector<Row>& rows) {
  set_num_threads(threads);
  for (const std::string& precision : o.precision)
    measure_precision(o, peer, name, threads, precision, rows);
}

std::string json_numbers(const std::array<double, 3>& v) {
  return "[" + bench::json_number(v[0]) + ", " + bench::json_number(v[1]) + ", " +
         bench::json_number(v[2]) + "]";
}

std::string json_row(const Row& r) {
  return json::ObjectWriter()
      .add_string("model", r.model)
      .add_string("precision", r.precision)
      .add_int("tokens", r.tokens)
      .add_int("threads", r.threads)
      .add_number("cached_tokens_per_s", r.cached)
      .add_number("uncached_tokens_per_s", r.uncached)
      .add_number("torch_cached_tokens_per_s", r.torch_cached)
      .add_number("cached_over_torch", r.cached / r.torch_cached)
      .add_number("bound_tokens_per_s", r.bound)
      .add_number("cached_over_bound", r.cached / r.bound)
      .add_number("bandwidth_gb_per_s", r.bw / 1e9)
      .add_int("rebuilt_steps", r.rebuilds)
      .str();
}

// One JSON object: the machine, the peer (null without one), the notes and every row.
void print_json(const Options& o, const Peer& peer, const std::vector<std::string>& notes,
                const std::vector<Row>& rows, const std::array<double, 3>& load,
                const std::array<double, 3>& load_end) {
  const std::string peer_json = peer.torch.version.empty()
                                    ? "null"
                                    : json::object({{"version", json::quote(peer.torch.version)},
                                                    {"python", json::quote(peer.torch.launcher[0])},
                                                    {"kernels", json::quote(peer.kernels)},
                                                    {"env", bench::json_strings(peer.env.notes)}});
  std::string rows_json;
  for (const Row& r : rows) rows_json += (rows_json.empty() ? "" : ",\n  ") + json_row(r);
  std::printf("%s\n", json::object({{"cpu", json::quote(bench::cpu_model())},
                                    {"caches", json::quote(bench::cache_sizes())},
                                    {"bf16_units", json::quote(bench::bf16_units())},
                                    {"isa", json::quote(kernels::active_isa())},
                                    {"prompt_tokens", std::to_string(kPrompt)},
                                    {"reps", std::to_string(o.reps)},
                                    {"load_average", json_numbers(load)},
                                    {"load_average_end", json_numbers(load_end)},
                                    {"peer", peer_json},
                                    {"notes", bench::json_strings(notes)},
                                    {"rows", "[" + rows_json + "]"}})
                          .c_str());
}

std::array<double, 3> load_average() {
  std::array<double, 3> load{0, 0, 0};
  getloadavg(load.data(), 3);
  return load;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  bench::check_settings(kProg);
  std::vector<std::string> notes;
  const Peer peer = choose_peer(o, notes);
  const std::array<double, 3> load = load_average();
  if (!o.json) print_header(o, peer, notes, load);
  std::vector<Row> rows;
  for (const std::string& m : o.models)
    for (const int t : o.threads) measure(o, peer, m, t, rows);
  const std::array<double, 3> end = load_average();
  if (o.json)
    print_json(o, peer, notes, rows, load, end);
  else
    std::printf("load average at the end: %.2f %.2f %.2f\n", end[0], end[1], end[2]);
  return 0;
}
