// bench_attention: forward and forward+backward time of chapter 3's MultiHeadAttention and
// MultiHeadAttentionWrapper at GPT-2-124M sizes (d_in = d_out = 768, 12 heads, the wrapper with
// 12 heads of 64), for B=8,T=256 and B=2,T=1024, at 1 and 2 threads (TAPEGRAD_THREADS), with the
// peak memory of each run; and, when /usr/bin/python3 has torch, the book's PyTorch
// MultiHeadAttention on the same input, with our time as a ratio of torch's.
//
// Every measurement runs in its own child process (this binary with --child), so peak RSS
// (getrusage of the child) belongs to one configuration and TAPEGRAD_THREADS is read fresh.
// Before timing, each child prints a checksum of its output: torch builds the same weights and
// input from the same seed (the generator is bit-exact), so the checksums must agree; the table
// shows both. Times are the best of --reps runs. Compare timings within one machine only.
//
// usage: bench_attention [--json] [--reps N] [--threads 1,2] [--sizes 8x256,2x1024] [--no-torch]
//
// Not here: dropout (p = 0, as the notebook's examples), a fused attention kernel.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli_args.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"

namespace {

using namespace tg;

constexpr int64_t kD = 768, kHeads = 12;
constexpr uint64_t kSeed = 123;

struct Measure {
  std::string impl;  // MultiHeadAttention | MultiHeadAttentionWrapper | torch MultiHeadAttention
  int64_t B = 0, T = 0;
  int threads = 0;
  double fwd_ms = NAN, fwdbwd_ms = NAN;
  double checksum = NAN;  // sum of the output
  long peak_rss_kb = 0;
  std::string error;
};

// ---- child: one configuration in this process ----

int run_child(const std::string& impl, int64_t B, int64_t T, int reps) {
  manual_seed(kSeed);
  std::unique_ptr<nn::Module> m;
  if (impl == "MultiHeadAttention")
    m = std::make_unique<nn::MultiHeadAttention>(kD, kD, T, 0.0, kHeads);
  else
    m = std::make_unique<nn::MultiHeadAttentionWrapper>(kD, kD / kHeads, T, 0.0, kHeads);
  const Tensor x = randn({B, T, kD});  // drawn after the weights, as the torch script does
  using clock = std::chrono::steady_clock;
  double best_fwd = INFINITY, best_fb = INFINITY, checksum = 0;
  for (int r = 0; r < reps; ++r) {
    m->zero_grad();
    const auto t0 = clock::now();
    const Tensor y = (*m)(x);
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
  std::printf("%.3f %.3f %.9g\n", best_fwd, best_fb, checksum);
  return 0;
}

// ---- the book's MultiHeadAttention in PyTorch, same seed, same order of draws ----

const char* kTorchScript = R"PY(
import sys, time, torch, torch.nn as nn
B, T, threads, reps = map(int, sys.argv[1:5])
sys.path.insert(0, sys.argv[5])
from book_gpt import MultiHeadAttention  # the book's class, shared with the golden scripts
torch.set_num_threads(threads)
torch.manual_seed(123)
m = MultiHeadAttention(768, 768, T, 0.0, 12)
x = torch.randn(B, T, 768)
best_f = best_fb = float("inf")
for r in range(reps):
    m.zero_grad()
    t0 = time.perf_counter(); y = m(x); t1 = time.perf_counter()
    y.sum().backward(); t2 = time.perf_counter()
    best_f, best_fb = min(best_f, (t1 - t0) * 1e3), min(best_fb, (t2 - t0) * 1e3)
    if r == 0: checksum = y.detach().double().sum().item()
print("%.3f %.3f %.9g" % (best_f, best_fb, checksum))
)PY";

void parse_child(const std::string& out, Measure& m) {
  std::istringstream is(out);
  if (!(is >> m.fwd_ms >> m.fwdbwd_ms >> m.checksum)) m.error = "unreadable output: " + out;
}

bool torch_available() {
  if (access("/usr/bin/python3", X_OK) != 0) return false;
  std::string out, err;
  long rss = 0;
  return bench::run_child({"/usr/bin/python3", "-c", "import torch"}, 1, out, rss, err);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, want_torch = true;
  int reps = 2;
  std::vector<int> threads = {1, 2};
  std::vector<std::pair<int64_t, int64_t>> sizes = {{8, 256}, {2, 1024}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--reps" || a == "--threads" || a == "--sizes") && i + 1 >= argc)
      bench::bad_option("bench_attention", a + " needs a value");
    if (a == "--child" && i + 4 < argc)
      return run_child(argv[i + 1], std::atoll(argv[i + 2]), std::atoll(argv[i + 3]),
                       std::atoi(argv[i + 4]));
    if (a == "--json") {
      json = true;
    } else if (a == "--no-torch") {
      want_torch = false;
    } else if (a == "--reps") {
      reps = static_cast<int>(bench::positive_int("bench_attention", a, argv[++i], 10000));
    } else if (a == "--threads") {
      threads = bench::positive_ints("bench_attention", a, argv[++i]);
    } else if (a == "--sizes") {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) {
        const auto x = item.find('x');
        if (x == std::string::npos) {
          std::cerr << "bench_attention: --sizes expects BxT[,BxT...], got '" << item << "'\n";
          return 2;
        }
        sizes.emplace_back(
            bench::positive_int("bench_attention", "--sizes B", item.substr(0, x), 4096),
            bench::positive_int("bench_attention", "--sizes T", item.substr(x + 1), 65536));
      }
      if (sizes.empty()) bench::bad_option("bench_attention", "--sizes needs at least one BxT");
    } else {
      const char* usage =
          "usage: bench_attention [--json] [--reps N] [--threads 1,2] [--sizes 8x256,2x1024] "
          "[--no-torch]";
      if (a == "--help") {
        std::cout << usage << "\n";
        return 0;
      }
      std::cerr << "bench_attention: unknown option '" << a << "' (" << usage << ")\n";
      return 2;
    }
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::cerr << "bench_attention: cannot find its own executable\n";
    return 1;
  }
  self[len] = '\0';
  const bool torch = want_torch && torch_available();
#if __has_include("core/threadpool.h")
  const char* threading = "thread pool (TAPEGRAD_THREADS)";
#else
  const char* threading =
      "single-threaded build: the thread pool (branch kernels) is not merged here, so "
      "TAPEGRAD_THREADS has no effect on tapegrad's rows";
#endif

  std::vector<Measure> results;
  for (int t : threads)
    for (auto [B, T] : sizes) {
      for (const char* impl : {"MultiHeadAttention", "MultiHeadAttentionWrapper"}) {
        Measure m;
        m.impl = impl, m.B = B, m.T = T, m.threads = t;
        std::string out;
        if (bench::run_child(
                {self, "--child", impl, std::to_string(B), std::to_string(T), std::to_string(reps)},
                t, out, m.peak_rss_kb, m.error))
          parse_child(out, m);
        results.push_back(m);
        if (!json) std::cerr << "." << std::flush;
      }
      if (torch) {
        Measure m;
        m.impl = "torch MultiHeadAttention", m.B = B, m.T = T, m.threads = t;
        std::string out;
        if (bench::run_child({"/usr/bin/python3", "-c", kTorchScript, std::to_string(B),
                              std::to_string(T), std::to_string(t), std::to_string(reps),
                              std::string(TAPEGRAD_SOURCE_ROOT) + "/tests/golden"},
                             t, out, m.peak_rss_kb, m.error))
          parse_child(out, m);
        results.push_back(m);
      }
    }
  if (!json) std::cerr << "\n";

  // Our MultiHeadAttention's time over torch's at the same size and thread count.
  auto torch_of = [&](const Measure& m) -> const Measure* {
    for (const Measure& r : results)
      if (r.impl.rfind("torch", 0) == 0 && r.B == m.B && r.T == m.T && r.threads == m.threads)
        return &r;
    return nullptr;
  };

  if (json) {
    std::cout << "{\n  \"bench\": \"attention\", \"d_in\": " << kD << ", \"d_out\": " << kD
              << ", \"num_heads\": " << kHeads << ", \"reps\": " << reps << ", \"threading\": \""
              << threading << "\",\n  \"results\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const Measure& m = results[i];
      const Measure* tr = torch_of(m);
      std::cout << "    {\"impl\": \"" << m.impl << "\", \"B\": " << m.B << ", \"T\": " << m.T
                << ", \"threads\": " << m.threads
                << ", \"fwd_ms\": " << bench::json_number(m.fwd_ms)
                << ", \"fwd_bwd_ms\": " << bench::json_number(m.fwdbwd_ms)
                << ", \"peak_rss_mb\": " << bench::json_number(m.peak_rss_kb / 1024.0)
                << ", \"checksum\": " << bench::json_number(m.checksum)
                << ", \"ratio_to_torch_fwd_bwd\": "
                << bench::json_number(
                       tr && m.impl.rfind("torch", 0) != 0 ? m.fwdbwd_ms / tr->fwdbwd_ms : NAN)
                << (m.error.empty() ? "" : ", \"error\": \"" + m.error + "\"") << "}"
                << (i + 1 < results.size() ? "," : "") << "\n";
    }
    std::cout << "  ]\n}\n";
  } else {
    std::printf("attention, d_in = d_out = %lld, %lld heads, best of %d; %s\n", (long long)kD,
                (long long)kHeads, reps, threading);
    if (!torch)
      std::printf("(no torch comparison: /usr/bin/python3 with torch not found or --no-torch)\n");
    std::printf("%-27s %5s %5s %3s %11s %11s %9s %8s %14s\n", "impl", "B", "T", "thr", "fwd ms",
                "fwd+bwd ms", "peak MB", "x torch", "checksum");
    for (const Measure& m : results) {
      if (!m.error.empty()) {
        std::printf("%-27s %5lld %5lld %3d  error: %s\n", m.impl.c_str(), (long long)m.B,
                    (long long)m.T, m.threads, m.error.c_str());
        continue;
      }
      const Measure* tr = torch_of(m);
      char ratio[32] = "-";
      if (tr && m.impl.rfind("torch", 0) != 0 && tr->error.empty())
        std::snprintf(ratio, sizeof ratio, "%.2f", m.fwdbwd_ms / tr->fwdbwd_ms);
      std::printf("%-27s %5lld %5lld %3d %11.1f %11.1f %9.1f %8s %14.7g\n", m.impl.c_str(),
                  (long long)m.B, (long long)m.T, m.threads, m.fwd_ms, m.fwdbwd_ms,
                  m.peak_rss_kb / 1024.0, ratio, m.checksum);
    }
    std::printf(
        "x torch = our fwd+bwd time / torch's at the same size and threads; the "
        "checksums (sum of the output) of ours and torch's MultiHeadAttention agree when "
        "both built the same weights and input.\n");
  }
  return 0;
}
