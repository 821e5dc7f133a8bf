// bench_attention --notebook: the bonus notebook "Comparing Efficient Multi-Head Attention
// Implementations" (rasbt/LLMs-from-scratch @28c65cdfbc, ch03/02_bonus_efficient-multihead-
// attention/mha-implementations.ipynb), its sections 10-11: each of its implementations at its
// sizes (batch 8, 1024 tokens, embed_dim 768, 12 heads, dropout 0), forward and forward+backward
// (output.sum().backward(), as its section 11.3), ours (nn/, under the notebook's class names)
// beside PyTorch 2 running the notebook's own classes (tools/notebook_mha_torch.py, fed the code
// cells of --notebook-file), at each --threads count, with its bar charts (--svg).
//
// Every measurement runs in its own child process (bench_attention --notebook --child, or
// PyTorch 2's python), so its peak RSS belongs to one implementation: the SDPA-based ones
// allocate nothing of size context_len x context_len, which that column shows. Times are the best
// of --reps runs after one untimed run; each child prints the sum of its output, the same for
// both sides where both draw the same weights and input after manual_seed(123).
//
// Where an implementation is missing: a row for each of the notebook's nine, "-" where a side
// has none. MHAPyTorchFlexAttention (section 9) is PyTorch's only until nn/ has it; its row in
// kImpls below takes our class in one line (the `ours` lambda, written there) and one #include.
//
// Not here: the notebook's GPU figures and torch.compile (its section 11.4); its mean and standard
// deviation over many runs (the best of --reps instead, as every benchmark here reports).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_notebook_mha_options.h"
#include "bench/charts.h"
#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/settings.h"
#include "bench/torch_peer.h"
#include "core/autograd.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/mha_combined_qkv.h"
#include "nn/mha_einsum.h"
#include "nn/mha_flex_attention.h"
#include "nn/mha_pytorch_class.h"
#include "nn/notebook_ch03_mha.h"
#include "nn/sdpa_attention.h"

namespace bench_notebook_mha {
namespace {

using namespace tg;
const char* kProg = "bench_attention";

// The notebook's sizes: embed_dim, num_heads, context_len.
struct Dims {
  int64_t d, h, t;
};
using Factory = std::unique_ptr<nn::Module> (*)(Dims);
template <class M, class... A>
std::unique_ptr<nn::Module> make(A... args) {
  return std::make_unique<M>(args...);
}

// The notebook's implementations in its order: --only's key, the class (and argument) as the
// notebook writes it, its label in section 11's charts (shortened where long, to fit under a
// bar), and our module with the notebook's arguments (its instantiations, dropout 0; null: we
// have none yet).
struct Impl {
  const char *key, *name, *label;
  Factory ours;
};

const Impl kImpls[] = {
    {"wrapper", "Ch03_MHA_Wrapper", "1) MHA wrapper class",
     [](Dims s) { return make<nn::Ch03_MHA_Wrapper>(s.d, s.d / s.h, s.t, 0.0, s.h); }},
    {"ch03", "Ch03_MHA", "2) MHA Ch03",
     [](Dims s) { return make<nn::Ch03_MHA>(s.d, s.d, s.t, 0.0, s.h); }},
    {"combined-qkv", "MultiHeadAttentionCombinedQKV", "3) MHA with combined QKV weights",
     [](Dims s) { return make<nn::MultiHeadAttentionCombinedQKV>(s.d, s.d, s.h, s.t, 0.0); }},
    {"einsum", "MHAEinsum", "4) MHA with Einsum",
     [](Dims s) { return make<nn::MHAEinsum>(s.d, s.d, s.t, 0.0, s.h); }},
    {"sdpa", "MHAPyTorchScaledDotProduct", "5) MHA with PyTorch SDPA",
     [](Dims s) { return make<nn::MHAPyTorchScaledDotProduct>(s.d, s.d, s.h, s.t, 0.0); }},
    {"sdpa-no-flash", "MHAPyTorchSDPAWithoutFlash", "6) SDPA, no FlashAttention",
     [](Dims s) { return make<nn::MHAPyTorchSDPAWithoutFlash>(s.d, s.d, s.h, s.t, 0.0); }},
    {"class", "MHAPyTorchClass", "7) PyTorch MHA class defaults",
     [](Dims s) { return make<nn::MHAPyTorchClass>(s.d, s.d, s.h, s.t, 0.0); }},
    {"class-no-weights", "MHAPyTorchClass need_weights=False", "8) MHA class, need_weights=False",
     [](Dims s) { return make<nn::MHAPyTorchClass>(s.d, s.d, s.h, s.t, 0.0, false, false); }},
    {"flex", "MHAPyTorchFlexAttention", "9) PyTorch's FlexAttention",
     [](Dims s) { return make<nn::MHAPyTorchFlexAttention>(s.d, s.d, s.h, s.t, 0.0); }},
};

const Impl& impl_named(const std::string& name) {
  for (const Impl& i : kImpls)
    if (name == i.name) return i;
  bench::bad_option(kProg, "--child: no implementation '" + name + "'");
}

// ---- child: one implementation of ours in this process ----

// The best of `reps` runs of fn, in ms, after one untimed run.
template <class F>
double best_ms(int reps, F fn) {
  fn();
  double best = INFINITY;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// As tools/notebook_mha_torch.py: the input first after the seed (the notebook's cell 3), then
// the module; forward with the tape recording, as the notebook's %timeit.
int run_child(const std::string& name, int64_t B, int64_t T, int64_t D, int64_t H, int reps) {
  manual_seed(123);
  const Tensor embeddings = randn({B, T, D});
  const Impl& impl = impl_named(name);
  if (!impl.ours) bench::bad_option(kProg, "--child: no class of ours for " + name);
  std::unique_ptr<nn::Module> m = impl.ours({D, H, T});
  const long base = bench::self_peak_rss_kb();
  const double fwd = best_ms(reps, [&] { (*m)(embeddings); });
  const double fwd_bwd = best_ms(reps, [&] {
    m->zero_grad();
    (*m)(embeddings).sum().backward();
  });
  NoGradGuard no_grad;
  const double checksum = (*m)(embeddings).to(DType::Float64).sum().item<double>();
  std::printf("%.3f %.3f %.9g %ld\n", fwd, fwd_bwd, checksum, base);
  return 0;
}

// --child IMPL B T D H REPS: one measurement; what stops it (a size too big for memory) is one
// line and exit status 1, for the parent to report.
int child_main(char** a) {
  try {
    return run_child(a[0], std::atoll(a[1]), std::atoll(a[2]), std::atoll(a[3]), std::atoll(a[4]),
                     std::atoi(a[5]));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory for %s at batch %s, context_len %s\n", kProg, a[0],
                 a[1], a[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProg, e.what());
  }
  return 1;
}

// ---- the parent ----

// One side's measurement of one implementation (NaN: not measured).
struct Timing {
  double fwd_ms = NAN, fwd_bwd_ms = NAN, checksum = NAN;
  long base_kb = 0, peak_kb = 0;  // RSS once input and module exist, and the run's peak
  std::string error;              // PyTorch's side: why it did not run (the row goes on)
  double peak_mb() const { return peak_kb ? peak_kb / 1024.0 : NAN; }
  double extra_mb() const { return peak_kb ? (peak_kb - base_kb) / 1024.0 : NAN; }
};

struct Row {
  const Impl* impl;
  int threads;
  Timing ours, torch;
};

struct Setup {
  Options o;
  std::string self;
  bench::Peer peer;                   // PyTorch 2; its version empty when absent or --no-torch
  std::string defs_text, cells_json;  // what tools/notebook_mha_torch.py gets
  std::vector<std::string> notes;
};

// Runs one child and reads its line. A failure of ours stops the benchmark: one line naming the
// implementation and the child's own message, exit status 1. PyTorch's is kept in the row and
// the run goes on (PyTorch 2.6's eager flex_attention refuses a head_dim that is not a power of
// 2, at sizes other than the notebook's).
Timing measure(const Setup& s, bool ours, const Impl& impl, int threads) {
  const Options& o = s.o;
  std::vector<std::string> args = {s.self, "--notebook", "--child"};
  if (!ours) {
    args = s.peer.torch.launcher;
    args.insert(args.end(), {"-c", bench::source_text(kProg, TAPEGRAD_SOURCE_ROOT,
                                                      "tools/notebook_mha_torch.py")});
  }
  args.insert(args.end(), {impl.name, std::to_string(o.batch), std::to_string(o.context_len),
                           std::to_string(o.embed_dim), std::to_string(o.num_heads)});
  if (!ours) args.push_back(std::to_string(threads));
  args.push_back(std::to_string(o.reps));
  if (!ours) args.insert(args.end(), {s.defs_text, s.cells_json});
  Timing t;
  std::string out, err;
  if (bench::run_child(args, threads, out, t.peak_kb, err,
                       ours ? bench::PeerEnv{}.changes : s.peer.env.changes)) {
    std::istringstream is(out);
    if (is >> t.fwd_ms >> t.fwd_bwd_ms >> t.checksum >> t.base_kb) return t;
    err = "unreadable output: " + out;
  }
  if (!ours) {
    Timing failed;
    failed.error = err;
    return failed;
  }
  std::fprintf(stderr, "%s: tapegrad '%s' on %d thread(s) failed: %s\n", kProg, impl.name, threads,
               err.c_str());
  std::exit(1);
}

std::vector<Row> run_all(const Setup& s) {
  std::vector<Row> rows;
  const bool progress = !s.o.json && isatty(STDERR_FILENO);  // dots on a terminal only
  for (int t : s.o.threads)
    for (const Impl& impl : kImpls) {
      const std::vector<std::string>& only = s.o.only;
      if (!only.empty() && std::find(only.begin(), only.end(), impl.key) == only.end()) continue;
      Row r{&impl, t, {}, {}};
      if (impl.ours) r.ours = measure(s, true, impl, t);
      if (!s.peer.torch.version.empty()) r.torch = measure(s, false, impl, t);
      rows.push_back(r);
      if (progress) std::cerr << "." << std::flush;
    }
  if (progress) std::cerr << "\n";
  return rows;
}

// PyTorch's time over ours: above 1, we are faster.
double ratio(double torch_ms, double ours_ms) { return torch_ms / ours_ms; }

std::string json_row(const Row& r) {
  using bench::json_number;
  return json::object(
      {{"impl", json::quote(r.impl->name)},
       {"label", json::quote(r.impl->label)},
       {"threads", std::to_string(r.threads)},
       {"ours_fwd_ms", json_number(r.ours.fwd_ms)},
       {"torch_fwd_ms", json_number(r.torch.fwd_ms)},
       {"ours_fwd_bwd_ms", json_number(r.ours.fwd_bwd_ms)},
       {"torch_fwd_bwd_ms", json_number(r.torch.fwd_bwd_ms)},
       {"speedup_fwd", json_number(ratio(r.torch.fwd_ms, r.ours.fwd_ms))},
       {"speedup_fwd_bwd", json_number(ratio(r.torch.fwd_bwd_ms, r.ours.fwd_bwd_ms))},
       {"ours_peak_rss_mb", json_number(r.ours.peak_mb())},
       {"torch_peak_rss_mb", json_number(r.torch.peak_mb())},
       {"ours_extra_mb", json_number(r.ours.extra_mb())},
       {"torch_extra_mb", json_number(r.torch.extra_mb())},
       {"ours_checksum", json_number(r.ours.checksum)},
       {"torch_checksum", json_number(r.torch.checksum)},
       {"torch_error", r.torch.error.empty() ? "null" : json::quote(r.torch.error)}});
}

// The whole --json text; the load average at the start and the end as bench_tables.py reads it.
std::string json_text(const Setup& s, const std::vector<Row>& rows, const std::string& load0,
                      const std::string& load1) {
  const Options& o = s.o;
  std::ostringstream os;
  os << "{\n  \"bench\": \"attention-notebook\", \"cpu\": " << json::quote(bench::cpu_model())
     << ", \"caches\": " << json::quote(bench::cache_sizes())
     << ", \"isa\": " << json::quote(kernels::active_isa()) << ", \"batch\": " << o.batch
     << ", \"context_len\": " << o.context_len << ", \"embed_dim\": " << o.embed_dim
     << ", \"num_heads\": " << o.num_heads << ", \"reps\": " << o.reps
     << ",\n  \"load_average_start\": " << json::quote(load0)
     << ", \"load_average_end\": " << json::quote(load1)
     << ",\n  \"peers\": " << bench::peers_json({s.peer})
     << ",\n  \"notes\": " << bench::json_strings(s.notes) << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i)
    os << "    " << json_row(rows[i]) << (i + 1 < rows.size() ? "," : "") << "\n";
  os << "  ]\n}\n";
  return os.str();
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n%-36s %3s %19s %19s %8s %15s %15s\n", "", "", "fwd ms", "fwd+bwd ms", "torch/",
              "peak RSS MB", "extra MB");
  std::printf("%-36s %3s %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", "implementation", "thr", "ours",
              "torch", "ours", "torch", "ours", "ours", "torch", "ours", "torch");
  for (const Row& r : rows) {
    using bench::cell;
    std::printf("%-36s %3d %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", r.impl->name, r.threads,
                cell("%.1f", r.ours.fwd_ms).c_str(), cell("%.1f", r.torch.fwd_ms).c_str(),
                cell("%.1f", r.ours.fwd_bwd_ms).c_str(), cell("%.1f", r.torch.fwd_bwd_ms).c_str(),
                cell("%.2f", ratio(r.torch.fwd_bwd_ms, r.ours.fwd_bwd_ms)).c_str(),
                cell("%.0f", r.ours.peak_mb()).c_str(), cell("%.0f", r.torch.peak_mb()).c_str(),
                cell("%.0f", r.ours.extra_mb()).c_str(), cell("%.0f", r.torch.extra_mb()).c_str());
  }
  for (const Row& r : rows)
    if (!r.torch.error.empty())
      std::printf("PyTorch's %s on %d thread(s) did not run: %s\n", r.impl->name, r.threads,
                  r.torch.error.c_str());
}

void print_report(const Setup& s, const std::vector<Row>& rows, const std::string& load0,
                  const std::string& load1) {
  const Options& o = s.o;
  std::printf(
      "the bonus notebook's multi-head attention (sections 10-11): batch %lld, context_len %lld, "
      "embed_dim %lld, %lld heads, dropout 0, best of %d\n",
      (long long)o.batch, (long long)o.context_len, (long long)o.embed_dim, (long long)o.num_heads,
      int(o.reps));
  std::printf("cpu: %s (%s); our kernels: %s\n", bench::cpu_model().c_str(),
              bench::cache_sizes().c_str(), kernels::active_isa().c_str());
  bench::print_peers({s.peer});
  for (const std::string& n : s.notes) std::printf("note: %s\n", n.c_str());
  std::printf("load average: %s at the start, %s at the end\n", load0.c_str(), load1.c_str());
  print_table(rows);
  std::printf(
      "\ntorch/ours = PyTorch's fwd+bwd time over ours (above 1: we are faster); extra MB = peak "
      "RSS minus RSS once the input and the module exist\n");
}

// --svg: the notebook's charts (its cells 63 and 66), a forward panel and a forward+backward
// panel per thread count, ours and PyTorch's bars side by side per implementation.
bool write_svg(const Setup& s, const std::vector<Row>& rows) {
  std::vector<train::BarPanel> panels;
  const std::string torch = s.peer.torch.version.empty() ? "PyTorch" : s.peer.torch.version;
  for (int t : s.o.threads)
    for (const bool backward : {false, true}) {
      train::BarPanel p;
      p.title = std::string(backward ? "forward and backward" : "forward only") + ", " +
                std::to_string(t) + " thread(s)";
      p.y_label = "ms";
      p.bars = {{"tapegrad", {}}, {torch, {}}};
      for (const Row& r : rows) {
        if (r.threads != t) continue;
        p.categories.push_back(r.impl->label);
        p.bars[0].values.push_back(backward ? r.ours.fwd_bwd_ms : r.ours.fwd_ms);
        p.bars[1].values.push_back(backward ? r.torch.fwd_bwd_ms : r.torch.fwd_ms);
      }
      panels.push_back(p);
    }
  return bench::draw_bars(
      kProg, s.o.svg,
      "the bonus notebook's multi-head attention, ms (lower is better), best of " +
          std::to_string(s.o.reps),
      panels, bench::cpu_model() + "; ours on " + kernels::active_isa());
}

// The code cells of the notebook at `path` as a JSON list of their sources; a file that cannot
// be read or is not a notebook is one line and exit status 2.
std::string notebook_cells(const std::string& path) {
  std::string text;
  try {
    text = read_regular_file(path, uint64_t(64) << 20, "notebook");
  } catch (const std::runtime_error& e) {
    bench::bad_option(kProg, std::string("--notebook-file ") + e.what());
  }
  std::vector<std::string> cells;
  try {
    const json::Value nb = json::parse(text);
    const json::Value* all = nb.find("cells");
    for (const json::Value& c : all ? all->items : std::vector<json::Value>{}) {
      const json::Value *type = c.find("cell_type"), *source = c.find("source");
      if (!type || type->str != "code" || !source) continue;
      std::string src = source->str;
      for (const json::Value& line : source->items) src += line.str;
      cells.push_back(src);
    }
  } catch (const json::Error& e) {
    bench::bad_option(kProg, "--notebook-file " + path + " is not a notebook: " + e.what());
  }
  if (cells.empty())
    bench::bad_option(kProg, "--notebook-file " + path + " is not a notebook with code cells");
  return bench::json_strings(cells);
}

Setup parse_setup(int argc, char** argv, const std::string& self) {
  Setup s;
  s.self = self;
  Options& o = s.o;
  bench::parse_command(command(), kProg, argc, argv, o);
  o.threads = bench::int_list(kProg, "--threads", o.threads_list, 1, 1024);
  if (!o.only_list.empty()) {
    std::vector<std::string> keys;
    for (const Impl& i : kImpls) keys.push_back(i.key);
    o.only = bench::name_list(kProg, "--only", o.only_list, keys);
  }
  if (o.embed_dim % o.num_heads != 0)
    bench::bad_option(kProg, "--embed-dim " + std::to_string(o.embed_dim) +
                                 " is not divisible by --num-heads " + std::to_string(o.num_heads));
  if (!o.no_torch && o.notebook_file.empty())
    bench::bad_option(kProg,
                      "--notebook needs --notebook-file FILE, the bonus notebook "
                      "mha-implementations.ipynb (see bench/README.md), or --no-torch");
  if (!o.no_torch) s.cells_json = notebook_cells(o.notebook_file);
  return s;
}

}  // namespace

int notebook_main(int argc, char** argv, const std::string& self) {
  if (argc == 8 && std::string(argv[1]) == "--child") return child_main(argv + 2);
  Setup s = parse_setup(argc, argv, self);
  bench::check_settings(kProg);
  if (s.o.no_torch) {
    s.notes.push_back("no PyTorch peer (--no-torch)");
  } else {
    s.peer = bench::find_peer(bench::torch2_python(TAPEGRAD_SOURCE_ROOT),
                              "PyTorch 2 (TAPEGRAD_TORCH2_PYTHON)", kernels::active_isa());
    if (s.peer.torch.version.empty()) s.notes.push_back("skipped " + s.peer.torch.why_not);
    s.defs_text = bench::source_text(kProg, TAPEGRAD_SOURCE_ROOT, "tests/golden/notebook_defs.py");
  }
  double one_minute = 0;
  const std::string load0 = bench::load_average(one_minute);
  const std::vector<Row> rows = run_all(s);
  const std::string load1 = bench::load_average(one_minute);
  const std::string json = json_text(s, rows, load0, load1);
  const bool written = s.o.json_file.empty() || bench::write_json_file(kProg, s.o.json_file, json);
  if (s.o.json)
    std::cout << json;
  else
    print_report(s, rows, load0, load1);
  const bool drawn = s.o.svg.empty() || write_svg(s, rows);
  return written && drawn ? 0 : 1;
}

}  // namespace bench_notebook_mha
