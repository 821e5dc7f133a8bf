// bench_attention: chapter 3's attention at GPT-2-124M sizes (d_in = d_out = 768, 12 heads of
// 64), forward and forward+backward, beside PyTorch in the same run:
//   core     causal attention alone, q, k, v (B, 12, T, 64) -> out: our fused
//            scaled_dot_product_attention ("core fused") and the book's formula op by op
//            ("core book": matmul, masked_fill, softmax, matmul);
//   modules  as the bonus notebook compares them: MultiHeadAttentionWrapper, the book's
//            MultiHeadAttention, the same with its core fused ("MultiHeadAttention fused", the
//            GPT's --attention fused), and the notebook's MHAPyTorchScaledDotProduct.
// Peers: PyTorch 1.13 (/usr/bin/python3: the book's classes and formula) and PyTorch 2.x
// (../shared/tools/torch2-python: F.scaled_dot_product_attention with its CPU flash kernel
// ("core flash") and its math path, the book's MultiHeadAttention, MHAPyTorchScaledDotProduct),
// each skipped with a note when absent. Then the memory of the fused core against the book's
// formula at B = 1, T = 1024, 2048, 4096: the memory a run adds on top of its inputs.
//
// --precision bf16 (or fp32,bf16): the attention core also in bfloat16, q, k, v bf16 tensors:
// ours "core fused" (kernels::sdpa_forward_bf16: bf16 products, float32 softmax) and "core book",
// PyTorch 2's "core flash" (its CPU flash kernel in bf16) and "core math"; the modules and
// PyTorch 1.13 stay fp32. The header names the CPU and whether /proc/cpuinfo has avx512_bf16 and
// amx_bf16 (the units PyTorch's bf16 GEMMs may use).
//
// Every measurement runs in its own child process (this binary with --child, or python), so its
// peak RSS belongs to one configuration and the thread count is set fresh; each prints its
// output's checksum (sum), the same for ours and PyTorch's when both built the same weights and
// input from seed 123. Times are the best of --reps runs.
//
// bench_attention --notebook is another benchmark (bench/bench_notebook_mha.cpp): the bonus
// notebook's nine implementations, as its sections 10-11 time them.
//
// Options: bench_attention --help (the table: bench/bench_attention_options.h). --svg draws
// fwd+bwd ms per size, the cores and the modules apart, a panel per thread count.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_attention_options.h"
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
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"
#include "nn/sdpa_attention.h"

namespace {

using namespace tg;

constexpr int64_t kD = 768, kHeads = 12, kHeadDim = 64;
const char* kOurs = "tapegrad";

struct Measure {
  std::string side, impl;          // side: tapegrad, or the PyTorch version
  std::string precision = "fp32";  // of the attention core's q, k, v: fp32 or bf16
  int64_t B = 0, T = 0;
  int threads = 0;
  double fwd_ms = NAN, fwdbwd_ms = NAN, checksum = NAN;
  long base_kb = 0, peak_kb = 0;  // RSS once the inputs exist, and the run's peak
  std::string error;
};

// ---- child: one configuration of ours in this process ----

Tensor book_core(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t T = q.size(2);
  Tensor s = matmul(q, k.transpose(2, 3));
  s.masked_fill_(triu(ones({T, T}), 1).to(DType::Bool), -std::numeric_limits<double>::infinity());
  return matmul(softmax(s / std::sqrt(double(q.size(-1))), -1), v);
}

int run_child(const std::string& impl, int64_t B, int64_t T, int reps, bool bf16) {
  manual_seed(123);
  std::unique_ptr<nn::Module> m;
  Tensor q, k, v, x;
  if (impl == "MultiHeadAttentionWrapper")
    m = std::make_unique<nn::MultiHeadAttentionWrapper>(kD, kHeadDim, T, 0.0, kHeads);
  else if (impl == "MultiHeadAttention")
    m = std::make_unique<nn::MultiHeadAttention>(kD, kD, T, 0.0, kHeads);
  else if (impl == "MultiHeadAttention fused")
    m = std::make_unique<nn::MultiHeadAttentionSDPA>(kD, kD, T, 0.0, kHeads);
  else if (impl == "MHAPyTorchScaledDotProduct")
    m = std::make_unique<nn::MHAPyTorchScaledDotProduct>(kD, kD, kHeads, T, 0.0);
  if (m) {
    x = randn({B, T, kD});  // drawn after the weights, as the python side does
  } else {
    q = randn({B, kHeads, T, kHeadDim}), k = randn({B, kHeads, T, kHeadDim});
    v = randn({B, kHeads, T, kHeadDim});
    for (Tensor* t : {&q, &k, &v}) {
      if (bf16) *t = t->to(DType::BFloat16);
      t->requires_grad_();
    }
  }
  auto forward = [&] {
    if (m) return (*m)(x);
    if (impl == "core fused") return scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    return book_core(q, k, v);
  };
  const long base = bench::self_peak_rss_kb();
  using clock = std::chrono::steady_clock;
  double best_fwd = INFINITY, best_fb = INFINITY, checksum = 0;
  for (int r = 0; r < reps; ++r) {
    if (m) m->zero_grad();
    for (Tensor* t : {&q, &k, &v})
      if (t->defined()) t->zero_grad();
    const auto t0 = clock::now();
    const Tensor y = forward();
    const auto t1 = clock::now();
    y.sum().backward();
    const auto t2 = clock::now();
    best_fwd = std::min(best_fwd, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best_fb = std::min(best_fb, std::chrono::duration<double, std::milli>(t2 - t0).count());
    if (r == 0) {
      NoGradGuard ng;
      checksum = y.to(DType::Float64).sum().item<double>();
    }
  }
  std::printf("%.3f %.3f %.9g %ld\n", best_fwd, best_fb, checksum, base);
  return 0;
}

// --child IMPL B T REPS PRECISION: one measurement; what stops it (a size too big for memory) is
// one line and exit status 1, for the parent to report.
int child_main(char** args) {
  try {
    return run_child(args[0], std::atoll(args[1]), std::atoll(args[2]), std::atoi(args[3]),
                     std::string(args[4]) == "bf16");
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_attention: out of memory for %s at B=%s T=%s\n", args[0], args[1],
                 args[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
  }
  return 1;
}

// ---- PyTorch: the same configurations, the book's and the notebook's code ----

const char* kTorchScript = R"PY(
import resource, sys, time, torch, torch.nn as nn
impl, B, T, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dtype = torch.bfloat16 if sys.argv[8] == "bf16" else torch.float32
torch.set_num_threads(threads)
D, H = 768, 12

# The book's classes (tests/golden/book_gpt.py, book_ch03.py), passed in as text: the chroot of
# PyTorch 2 cannot see the source tree.
exec(sys.argv[6])
exec(sys.argv[7])

def book_core(q, k, v):
    s = q @ k.transpose(2, 3)
    s.masked_fill_(torch.triu(torch.ones(T, T), diagonal=1).bool(), -torch.inf)
    return torch.softmax(s / q.shape[-1] ** 0.5, dim=-1) @ v

torch.manual_seed(123)
modules = {"MultiHeadAttentionWrapper": lambda: MultiHeadAttentionWrapper(D, D // H, T, 0.0, H),
           "MultiHeadAttention": lambda: MultiHeadAttention(D, D, T, 0.0, H),
           "MHAPyTorchScaledDotProduct": lambda: MHAPyTorchScaledDotProduct(D, D, H, T, 0.0)}
if impl in modules:
    m = modules[impl]()
    x = torch.randn(B, T, D)
    forward = lambda: m(x)
else:
    q, k, v = (torch.randn(B, H, T, 64).to(dtype).requires_grad_() for _ in range(3))
    if impl == "core book":
        forward = lambda: book_core(q, k, v)
    else:
        from torch.nn.attention import sdpa_kernel, SDPBackend
        backend = SDPBackend.FLASH_ATTENTION if impl == "core flash" else SDPBackend.MATH
        def forward():
            with sdpa_kernel(backend):
                return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
best_f = best_fb = float("inf")
for r in range(reps):
    if impl in modules: m.zero_grad()
    else: q.grad = k.grad = v.grad = None
    t0 = time.perf_counter(); y = forward(); t1 = time.perf_counter()
    y.sum().backward(); t2 = time.perf_counter()
    best_f, best_fb = min(best_f, (t1 - t0) * 1e3), min(best_fb, (t2 - t0) * 1e3)
    if r == 0: checksum = y.detach().double().sum().item()
print("%.3f %.3f %.9g %d" % (best_f, best_fb, checksum, base))
)PY";

using bench::Peer;

void parse_child(const std::string& out, Measure& m) {
  std::istringstream is(out);
  if (!(is >> m.fwd_ms >> m.fwdbwd_ms >> m.checksum >> m.base_kb))
    m.error = "unreadable output: " + out;
}

// One configuration: impl at B, T on `threads` threads in `precision`.
struct Config {
  std::string impl;
  int64_t B, T;
  int threads;
  std::string precision;
};

Measure measure(const std::vector<std::string>& cmd, const std::string& side, const Config& c,
                int reps, const std::vector<bench::EnvChange>& env = {}) {
  Measure m;
  m.side = side, m.impl = c.impl, m.B = c.B, m.T = c.T, m.threads = c.threads;
  m.precision = c.precision;
  std::vector<std::string> args = cmd;
  args.insert(args.end(), {c.impl, std::to_string(c.B), std::to_string(c.T)});
  if (side != kOurs) args.push_back(std::to_string(c.threads));
  args.push_back(std::to_string(reps));
  if (side != kOurs)
    for (const char* f : {"book_gpt.py", "book_ch03.py"})
      args.push_back(bench::source_text("bench_attention", TAPEGRAD_SOURCE_ROOT,
                                        std::string("tests/golden/") + f));
  args.push_back(c.precision);
  std::string out;
  if (bench::run_child(args, c.threads, out, m.peak_kb, m.error, env)) parse_child(out, m);
  return m;
}

// ---- the speedups the issue sets targets for, and a few more ----

struct Pair {
  const char* what;
  const char* ours;
  const char* peer_side;  // "1.13" or "2": matched against the peer's version
  const char* peer;
};
const Pair kPairs[] = {
    {"fused MHA vs torch 1.13 book MHA", "MultiHeadAttention fused", "1.13", "MultiHeadAttention"},
    {"fused MHA vs torch 2 MHAPyTorchScaledDotProduct", "MultiHeadAttention fused", "2.",
     "MHAPyTorchScaledDotProduct"},
    {"MHAPyTorchScaledDotProduct vs torch 2's", "MHAPyTorchScaledDotProduct", "2.",
     "MHAPyTorchScaledDotProduct"},
    {"core fused vs torch 2 flash", "core fused", "2.", "core flash"},
    {"core fused vs torch 2 math", "core fused", "2.", "core math"},
    {"book MHA vs torch 1.13 book MHA", "MultiHeadAttention", "1.13", "MultiHeadAttention"},
    {"wrapper vs torch 1.13 wrapper", "MultiHeadAttentionWrapper", "1.13",
     "MultiHeadAttentionWrapper"},
    {"core book vs torch 1.13 core book", "core book", "1.13", "core book"},
};

const Measure* find(const std::vector<Measure>& rs, const std::string& side_prefix,
                    const std::string& impl, const Measure& like) {
  for (const Measure& r : rs)
    if (r.side.rfind(side_prefix, 0) == 0 && r.impl == impl && r.B == like.B && r.T == like.T &&
        r.threads == like.threads && r.precision == like.precision && r.error.empty())
      return &r;
  return nullptr;
}

struct Speedup {
  std::string what;
  const Measure *ours, *peer;
};
std::vector<Speedup> speedups(const std::vector<Measure>& rs) {
  std::vector<Speedup> out;
  for (const Measure& r : rs) {
    if (r.side != kOurs || !r.error.empty() || r.impl == "memory") continue;
    for (const Pair& p : kPairs) {
      if (r.impl != p.ours) continue;
      if (const Measure* peer = find(rs, std::string("torch ") + p.peer_side, p.peer, r))
        out.push_back({p.what + (r.precision == "fp32" ? "" : " (" + r.precision + ")"), &r, peer});
    }
  }
  return out;
}

void print_json(std::ostream& out, const std::vector<Measure>& rs,
                const std::string& header_fields) {
  out << "{\n  \"bench\": \"attention\", " << header_fields << ",\n  \"results\": [\n";
  for (size_t i = 0; i < rs.size(); ++i) {
    const Measure& m = rs[i];
    out << "    {\"side\": " << json::quote(m.side) << ", \"impl\": " << json::quote(m.impl)
        << ", \"precision\": " << json::quote(m.precision) << ", \"B\": " << m.B
        << ", \"T\": " << m.T << ", \"threads\": " << m.threads
        << ", \"fwd_ms\": " << bench::json_number(m.fwd_ms)
        << ", \"fwd_bwd_ms\": " << bench::json_number(m.fwdbwd_ms)
        << ", \"peak_rss_mb\": " << bench::json_number(m.peak_kb / 1024.0)
        << ", \"extra_mb\": " << bench::json_number((m.peak_kb - m.base_kb) / 1024.0)
        << ", \"checksum\": " << bench::json_number(m.checksum)
        << (m.error.empty() ? "" : ", \"error\": " + json::quote(m.error)) << "}"
        << (i + 1 < rs.size() ? "," : "") << "\n";
  }
  out << "  ],\n  \"speedups\": [\n";
  const std::vector<Speedup> sp = speedups(rs);
  for (size_t i = 0; i < sp.size(); ++i)
    out << "    {\"pair\": " << json::quote(sp[i].what) << ", \"B\": " << sp[i].ours->B
        << ", \"T\": " << sp[i].ours->T << ", \"threads\": " << sp[i].ours->threads
        << ", \"ours_ms\": " << bench::json_number(sp[i].ours->fwdbwd_ms)
        << ", \"peer_ms\": " << bench::json_number(sp[i].peer->fwdbwd_ms)
        << ", \"speedup\": " << bench::json_number(sp[i].peer->fwdbwd_ms / sp[i].ours->fwdbwd_ms)
        << "}" << (i + 1 < sp.size() ? "," : "") << "\n";
  out << "  ]\n}\n";
}

void print_table(const std::vector<Measure>& rs) {
  std::printf("%-14s %-27s %-4s %4s %5s %3s %10s %11s %9s %9s %14s\n", "side", "impl", "prec", "B",
              "T", "thr", "fwd ms", "fwd+bwd ms", "peak MB", "extra MB", "checksum");
  for (const Measure& m : rs) {
    if (!m.error.empty()) {
      std::printf("%-14s %-27s %-4s %4lld %5lld %3d  error: %s\n", m.side.c_str(), m.impl.c_str(),
                  m.precision.c_str(), (long long)m.B, (long long)m.T, m.threads, m.error.c_str());
      continue;
    }
    std::printf("%-14s %-27s %-4s %4lld %5lld %3d %10.1f %11.1f %9.1f %9.1f %14.7g\n",
                m.side.c_str(), m.impl.c_str(), m.precision.c_str(), (long long)m.B, (long long)m.T,
                m.threads, m.fwd_ms, m.fwdbwd_ms, m.peak_kb / 1024.0,
                (m.peak_kb - m.base_kb) / 1024.0, m.checksum);
  }
  const std::vector<Speedup> sp = speedups(rs);
  if (sp.empty()) return;
  std::printf("\nspeedup = the peer's fwd+bwd time / ours (above 1: we are faster)\n");
  std::printf("%-48s %4s %5s %3s %10s %10s %8s\n", "pair", "B", "T", "thr", "ours ms", "peer ms",
              "speedup");
  for (const Speedup& s : sp)
    std::printf("%-48s %4lld %5lld %3d %10.1f %10.1f %8.2f\n", s.what.c_str(), (long long)s.ours->B,
                (long long)s.ours->T, s.ours->threads, s.ours->fwdbwd_ms, s.peer->fwdbwd_ms,
                s.peer->fwdbwd_ms / s.ours->fwdbwd_ms);
}

const char* kProg = "bench_attention";
using bench_attention::Options;

// "8x256,2x1024" as (B, T) pairs.
std::vector<std::pair<int64_t, int64_t>> parse_sizes(const std::string& list) {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto x = item.find('x');
    if (x == std::string::npos)
      bench::bad_option(kProg, "--sizes expects BxT[,BxT...], got '" + item + "'");
    sizes.emplace_back(bench::whole_int(kProg, "--sizes B", item.substr(0, x), 1, 4096),
                       bench::whole_int(kProg, "--sizes T", item.substr(x + 1), 1, 65536));
  }
  if (sizes.empty()) bench::bad_option(kProg, "--sizes needs at least one BxT");
  return sizes;
}

// The command line; --child IMPL B T REPS PRECISION (internal, first) measures in this process
// and exits.
Options parse_options(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--child") std::exit(child_main(argv + 2));
  Options o;
  bench::parse_command(bench_attention::command(), kProg, argc, argv, o);
  o.threads = bench::int_list(kProg, "--threads", o.threads_list, 1, 1024);
  o.memory_T = bench::int_list(kProg, "--memory", o.memory_list, 1, 65536);
  o.sizes = parse_sizes(o.sizes_list);
  o.precision = bench::name_list(kProg, "--precision", o.precision_list, {"fp32", "bf16"});
  return o;
}

// What each side measures: ours the core both ways and the four modules; PyTorch 1.13 the book's
// formula and classes, PyTorch 2 its SDPA (flash and math) and the classes built on it. In bf16,
// the cores only, and PyTorch 2's.
std::vector<std::string> our_impls(bool modules) {
  std::vector<std::string> im = {"core fused", "core book"};
  if (modules)
    im.insert(im.end(), {"MultiHeadAttentionWrapper", "MultiHeadAttention",
                         "MultiHeadAttention fused", "MHAPyTorchScaledDotProduct"});
  return im;
}

std::vector<std::string> peer_impls(const Peer& p, bool modules, bool bf16) {
  const bool v1 = p.torch.version.rfind("torch 1.", 0) == 0;
  if (bf16)
    return v1 ? std::vector<std::string>{} : std::vector<std::string>{"core flash", "core math"};
  std::vector<std::string> im = v1 ? std::vector<std::string>{"core book"}
                                   : std::vector<std::string>{"core flash", "core math"};
  if (modules) {
    if (v1)
      im.insert(im.end(), {"MultiHeadAttentionWrapper", "MultiHeadAttention"});
    else
      im.insert(im.end(), {"MultiHeadAttention", "MHAPyTorchScaledDotProduct"});
  }
  return im;
}

// A child that failed stops the benchmark: one line naming it and its error, exit status 1.
Measure checked(Measure m) {
  if (m.error.empty()) return m;
  std::fprintf(stderr, "%s: %s '%s' at B=%lld T=%lld on %d thread(s) failed: %s\n", kProg,
               m.side.c_str(), m.impl.c_str(), (long long)m.B, (long long)m.T, m.threads,
               m.error.c_str());
  std::exit(1);
}

std::vector<Measure> run_all(const Options& o, const std::vector<std::string>& ours_cmd,
                             const std::vector<Peer>& peers) {
  std::vector<Measure> results;
  const bool progress = !o.json && isatty(STDERR_FILENO);  // dots on a terminal only
  for (int t : o.threads)
    for (auto [B, T] : o.sizes)
      for (const std::string& prec : o.precision) {
        const bool bf16 = prec == "bf16";
        for (const std::string& impl : our_impls(!o.no_modules && !bf16))
          results.push_back(checked(measure(ours_cmd, kOurs, {impl, B, T, t, prec}, int(o.reps))));
        for (const Peer& p : peers) {
          if (p.torch.version.empty()) continue;
          std::vector<std::string> cmd = p.torch.launcher;
          cmd.insert(cmd.end(), {"-c", kTorchScript});
          for (const std::string& impl : peer_impls(p, !o.no_modules, bf16))
            results.push_back(checked(
                measure(cmd, p.torch.version, {impl, B, T, t, prec}, int(o.reps), p.env.changes)));
        }
        if (progress) std::cerr << "." << std::flush;
      }
  // Memory: the fused core against the book's formula, one run each, B = 1, float32.
  for (int T : o.memory_T)
    for (const char* impl : {"core fused", "core book"}) {
      Measure m = checked(measure(ours_cmd, kOurs, {impl, 1, T, o.threads.back(), "fp32"}, 1));
      m.side = "memory";
      results.push_back(m);
    }
  if (progress) std::cerr << "\n";
  return results;
}

// The --json header's fields: the machine, our path, the sizes, and why a peer is missing.
std::string json_header(const Options& o, const std::vector<Peer>& peers,
                        const std::vector<std::string>& notes) {
  std::ostringstream hdr;
  hdr << "\"cpu\": " << json::quote(bench::cpu_model())
      << ", \"cpu_avx512_bf16\": " << (bench::cpu_has_flag("avx512_bf16") ? "true" : "false")
      << ", \"cpu_amx_bf16\": " << (bench::cpu_has_flag("amx_bf16") ? "true" : "false")
      << ", \"caches\": " << json::quote(bench::cache_sizes())
      << ", \"isa\": " << json::quote(kernels::active_isa()) << ", \"d\": " << kD
      << ", \"heads\": " << kHeads << ", \"reps\": " << o.reps
      << ", \"peers\": " << bench::peers_json(peers)
      << ", \"notes\": " << bench::json_strings(notes);
  return hdr.str();
}

// --json-file: a failure is one line and exit status 1; the table is printed either way.
bool write_json_file(const std::string& path, const std::vector<Measure>& results,
                     const std::string& header) {
  std::ostringstream json;
  print_json(json, results, header);
  return bench::write_json_file(kProg, path, json.str());
}

void print_report(const Options& o, const std::vector<Peer>& peers,
                  const std::vector<std::string>& notes, const std::vector<Measure>& results) {
  std::printf("attention, d = %lld, %lld heads of %lld, causal, best of %d\n", (long long)kD,
              (long long)kHeads, (long long)kHeadDim, int(o.reps));
  std::printf("cpu: %s (%s); /proc/cpuinfo: avx512_bf16 %s, amx_bf16 %s; our kernels: %s\n",
              bench::cpu_model().c_str(), bench::cache_sizes().c_str(),
              bench::cpu_has_flag("avx512_bf16") ? "yes" : "no",
              bench::cpu_has_flag("amx_bf16") ? "yes" : "no", kernels::active_isa().c_str());
  bench::print_peers(peers);
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  print_table(results);
  std::printf(
      "\nmemory rows: B = 1; extra MB = peak RSS minus RSS once the inputs exist (the fused "
      "core's grows with T, the book formula's with T^2)\n");
}

// --svg: for each thread count a panel of the cores and one of the modules, fwd+bwd ms per size,
// a bar per side and implementation. A failure is one line; the table is printed either way.
bool write_svg(const Options& o, const std::vector<Measure>& rs) {
  std::vector<train::BarPanel> panels;
  for (int t : o.threads)
    for (const bool core : {true, false}) {
      train::BarPanel p;
      p.title = std::string(core ? "attention core" : "attention modules") + ", " +
                std::to_string(t) + " thread(s)";
      p.y_label = "fwd+bwd ms";
      for (auto [B, T] : o.sizes)
        p.categories.push_back(std::to_string(B) + "x" + std::to_string(T));
      for (const Measure& m : rs) {
        if (m.threads != t || m.side == "memory" || (m.impl.rfind("core ", 0) == 0) != core)
          continue;
        const std::string name =
            m.side + " " + m.impl + (m.precision == "fp32" ? "" : " " + m.precision);
        auto it = std::find_if(p.bars.begin(), p.bars.end(),
                               [&](const train::BarSeries& b) { return b.name == name; });
        if (it == p.bars.end())
          it = p.bars.insert(p.bars.end(), {name, std::vector<double>(o.sizes.size(), NAN)});
        for (size_t i = 0; i < o.sizes.size(); ++i)
          if (o.sizes[i] == std::make_pair(m.B, m.T)) it->values[i] = m.fwdbwd_ms;
      }
      if (!p.bars.empty()) panels.push_back(p);
    }
  return bench::draw_bars(
      kProg, o.svg, "attention fwd+bwd ms (lower is better), best of " + std::to_string(o.reps),
      panels, bench::cpu_model() + "; ours on " + kernels::active_isa());
}

}  // namespace

// `bench_attention --notebook ...`: the bonus notebook's comparison (bench/bench_notebook_mha.cpp),
// with its own options; "--notebook" may stand anywhere, as every option may.
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--notebook") {
      std::vector<char*> rest(argv, argv + argc);
      rest.erase(rest.begin() + i);
      return bench_notebook_mha::notebook_main(argc - 1, rest.data(), bench::self_exe(kProg));
    }
  const Options o = parse_options(argc, argv);
  bench::check_settings(kProg);
  const std::string self = bench::self_exe(kProg);

  std::vector<Peer> peers;
  if (!o.no_torch) {
    const std::string isa = kernels::active_isa();
    peers.push_back(bench::find_peer("/usr/bin/python3", "PyTorch 1.13", isa));
    peers.push_back(bench::find_peer(bench::torch2_python(TAPEGRAD_SOURCE_ROOT),
                                     "PyTorch 2 (TAPEGRAD_TORCH2_PYTHON)", isa));
  }
  std::vector<std::string> notes;
  for (const Peer& p : peers)
    if (p.torch.version.empty()) notes.push_back("skipped " + p.torch.why_not);
  if (o.no_torch) notes.push_back("no PyTorch peers (--no-torch)");

  const std::vector<Measure> results = run_all(o, {self, "--child"}, peers);
  const bool written =
      o.json_file.empty() || write_json_file(o.json_file, results, json_header(o, peers, notes));
  if (o.json)
    print_json(std::cout, results, json_header(o, peers, notes));
  else
    print_report(o, peers, notes, results);
  const bool drawn = o.svg.empty() || write_svg(o, results);
  return written && drawn ? 0 : 1;
}
