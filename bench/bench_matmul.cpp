// bench_matmul: sgemm GFLOP/s per kernel path and thread count, on square sizes and on the GPT-2
// (124M) and tiny-preset training shapes in nn::Linear's operand layouts, next to OpenBLAS's
// cblas_sgemm when meson found it, and as a fraction of the machine's FMA peak (measured by each
// path's built-in probe, timed in turn with each GEMM and OpenBLAS so that all three see the same
// clock and load).
//
// Every path is checked against sgemm_ref before it is timed (llm.c dev/cpu/matmul_forward.c):
// whole-matrix for small shapes, sampled rows for big ones. Times are the best of several runs.
//
// Usage: bench_matmul [--json] [--quick] [--isa NAME] [--threads 1,2] [--reps N] [--shapes
//        square|gpt2|tiny|all] [--blocking MC,KC,NC (tuning: overrides every path's blocking,
//        like TAPEGRAD_GEMM_BLOCKING)]
// The header (and every --json row) names the CPU, its caches, each path's block sizes and where
// they come from, and OpenBLAS's kernel set. --isa avx2 on a machine with AVX-512 also puts
// OpenBLAS on its Haswell (AVX2) kernels, so that each path faces a peer of its own width.
// Compare timings only within one machine, and expect noise when other jobs share the cores.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

#include "bench/cli_args.h"
#include "bench/machine.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

#if TAPEGRAD_HAVE_OPENBLAS
#include <cblas.h>
constexpr bool kHaveOpenBlas = true;
std::string openblas_core() { return openblas_get_corename(); }
void openblas_sgemm(int threads, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                    int64_t ldc) {
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              int(M), int(N), int(K), 1.f, A, int(lda), B, int(ldb), 0.f, C, int(ldc));
}
#else
constexpr bool kHaveOpenBlas = false;
std::string openblas_core() { return "none"; }
void openblas_sgemm(int, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                    int64_t, float*, int64_t) {}
#endif

namespace k = tg::kernels;

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  std::string name;
  int64_t M, N, K;
  bool transA, transB;  // A stored [K, M] / B stored [N, K], read through strides
};

struct Options {
  bool json = false, quick = false;
  std::string isa;  // empty: every available path
  std::vector<int> threads{1, 2};
  int reps = 5;
  std::string shapes = "all";
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Alternates the calls (an empty one is skipped) so that all see the same background load, for
// at least `reps` rounds and until min_time seconds have passed (at most 50 rounds); returns the
// best time per call of each. A sample repeats a call enough times to last ~2 ms, so small GEMMs
// are timed warm and above clock resolution.
std::vector<double> best_times(int reps, double min_time,
                               const std::vector<std::function<void()>>& fns) {
  std::vector<int> inner(fns.size(), 1);
  for (size_t k = 0; k < fns.size(); ++k) {
    if (!fns[k]) continue;
    const auto t0 = Clock::now();
    fns[k]();
    const double once = std::max(seconds_since(t0), 1e-7);
    inner[k] = static_cast<int>(std::clamp(2e-3 / once, 1.0, 10000.0));
  }
  std::vector<double> best(fns.size(), 1e30);
  double total = 0;
  for (int r = 0; r < reps || (total < min_time && r < 50); ++r) {
    for (size_t k = 0; k < fns.size(); ++k) {
      if (!fns[k]) continue;
      const auto s0 = Clock::now();
      for (int i = 0; i < inner[k]; ++i) fns[k]();
      const double t = seconds_since(s0);
      best[k] = std::min(best[k], t / inner[k]);
      total += t;
    }
  }
  return best;
}

// One run of the active path's FMA probe on `threads` threads at once; returns its flops. A team,
// not parallel_for: its members run at the same time (parallel_for may hand both tasks to a
// thread that is already awake, which measured the 2-thread peak at ~1.3 cores).
double probe_once(int threads, int64_t iters) {
  const k::KernelTable& t = k::active_table();
  std::vector<double> flops(threads, 0);
  tg::parallel_team(threads, [&](int tid, int, tg::Barrier& barrier) {
    barrier.arrive_and_wait();
    flops[size_t(tid)] = t.fma_probe(iters);
  });
  double total = 0;
  for (double f : flops) total += f;
  return total;
}

// FMA peak of the active path on `threads` threads, in GFLOP/s (best of 9).
double probe_peak(int threads) {
  const int64_t iters = 4'000'000;
  double best = 1e30, flops = 0;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = Clock::now();
    flops = probe_once(threads, iters);
    best = std::min(best, seconds_since(t0));
  }
  return flops / best * 1e-9;
}

// The micro-kernel alone on packed panels that stay in L1 (one MR×KC A micro-panel, one KC×NR B
// micro-panel, the C tile accumulated in place), on `threads` threads at once, in GFLOP/s: what
// the path can reach before any cache miss or packing, so GEMM's %peak has a ceiling beside it.
double ukernel_l1(int threads) {
  const k::KernelTable& t = k::active_table();
  // The table's own KC: both micro-panels fit in L1 with it (a KC derived from the caches may
  // leave the streaming B micro-panel in L2, as it is in a GEMM).
  const k::GemmBlocking bk = t.sgemm_blocking;
  const double per_call = 2.0 * double(bk.mr) * double(bk.nr) * double(bk.kc);
  const int64_t calls = std::max<int64_t>(1, int64_t(4e9 / per_call));
  std::vector<double> flops(threads, 0);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    tg::parallel_team(threads, [&](int tid, int, tg::Barrier& barrier) {
      // Small values: C grows by ~KC·1e-6 per call, far from overflow or denormals.
      std::vector<float> a(size_t(bk.mr * bk.kc), 1e-3f), b(size_t(bk.kc * bk.nr), 1e-3f);
      std::vector<float> c(size_t(bk.mr * bk.nr), 0.f);
      barrier.arrive_and_wait();
      for (int64_t i = 0; i < calls; ++i)
        t.sgemm_ukernel(bk.kc, a.data(), b.data(), bk.nr, c.data(), bk.nr, bk.mr, bk.nr, true);
      flops[size_t(tid)] = per_call * double(calls);  // an indirect call: never optimized away
    });
    best = std::min(best, seconds_since(t0));
  }
  double total = 0;
  for (double f : flops) total += f;
  return total / best * 1e-9;
}

// Compares the fast result with sgemm_ref on all rows (small) or three sampled rows (big).
bool check_against_ref(const Shape& s, const float* A, int64_t rsA, int64_t csA, const float* B,
                       int64_t rsB, int64_t csB, const float* C) {
  std::vector<int64_t> rows;
  if (s.M * s.N * s.K <= (int64_t(1) << 27)) {
    for (int64_t i = 0; i < s.M; ++i) rows.push_back(i);
  } else {
    rows = {0, s.M / 2, s.M - 1};
  }
  std::vector<float> r(s.N);
  double worst = 0;
  for (int64_t i : rows) {
    k::sgemm_ref(1, s.N, s.K, A + i * rsA, rsA, csA, B, rsB, csB, 0.f, r.data(), s.N);
    for (int64_t j = 0; j < s.N; ++j)
      worst = std::max(worst, double(std::fabs(r[j] - C[i * s.N + j])));
  }
  // Inputs in [-1, 1]: rounding errors of a K-term sum grow like sqrt(K) terms of size ~K·eps
  // in practice (the K²·eps worst case never occurs with random signs); this bound is 4x that.
  const double tol = 4.0 * s.K * 1.2e-7 * std::sqrt(double(s.K)) + 1e-5;
  if (worst > tol) {
    std::fprintf(stderr, "bench_matmul: %s on %s differs from sgemm_ref by %g (tol %g)\n",
                 k::active_isa().c_str(), s.name.c_str(), worst, tol);
    return false;
  }
  return true;
}

std::vector<Shape> make_shapes(const Options& o) {
  std::vector<Shape> v;
  if (o.shapes == "all" || o.shapes == "square") {
    for (int64_t n : {64, 128, 256, 512, 1024, 2048}) {
      if (o.quick && n > 1024) continue;
      v.push_back({"square " + std::to_string(n), n, n, n, false, false});
    }
  }
  if (o.shapes == "all" || o.shapes == "gpt2") {
    // GPT-2 124M, B·T = 512 tokens, C = 768, through nn::Linear (weight W stored [n, C] like
    // PyTorch): forward X·Wᵀ, input grad dX = dY·W, weight grad dW = dYᵀ·X.
    const int64_t BT = 512, C = 768;
    for (int64_t n : {2304, 3072, 50257}) {
      if (o.quick && n == 50257) continue;
      const std::string tag = std::to_string(n);
      v.push_back({"fwd X.W^T " + tag, BT, n, C, false, true});
      v.push_back({"bwd dY.W " + tag, BT, C, n, false, false});
      v.push_back({"bwd dY^T.X " + tag, n, C, BT, true, false});
    }
  }
  if (o.shapes == "all" || o.shapes == "tiny") {
    // The tiny preset's output head with the GPT-2 vocabulary: 128 tokens, emb 128, V = 50257.
    const int64_t T = 128, E = 128, V = 50257;
    v.push_back({"tiny fwd X.W^T", T, V, E, false, true});
    v.push_back({"tiny bwd dY.W", T, E, V, false, false});
    v.push_back({"tiny bwd dY^T.X", V, E, T, true, false});
  }
  return v;
}

constexpr const char* kUsage =
    "usage: bench_matmul [--json] [--quick] [--isa NAME] [--threads 1,2] [--reps N] "
    "[--shapes square|gpt2|tiny|all] [--blocking MC,KC,NC]";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "bench_matmul: %s (%s)\n", what.c_str(), kUsage);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") {
      o.json = true;
    } else if (a == "--quick") {
      o.quick = true, o.reps = 3;
    } else if (a == "--isa") {
      o.isa = next();
      const std::vector<std::string> have = k::available_isas();
      if (std::find(have.begin(), have.end(), o.isa) == have.end()) {
        std::string list;
        for (const std::string& h : have) list += (list.empty() ? "" : ", ") + h;
        usage_error("--isa " + o.isa + " is not available on this machine (it has " + list + ")");
      }
    } else if (a == "--reps") {
      o.reps = static_cast<int>(bench::positive_int("bench_matmul", a, next(), 10000));
    } else if (a == "--blocking") {
      int64_t v[3];
      std::string error;
      if (!k::parse_gemm_blocking(next(), v, error)) usage_error("--blocking: " + error);
      k::set_sgemm_blocking_override(v[0], v[1], v[2]);
    } else if (a == "--shapes") {
      o.shapes = next();
      if (o.shapes != "square" && o.shapes != "gpt2" && o.shapes != "tiny" && o.shapes != "all")
        usage_error("unknown --shapes '" + o.shapes + "'");
    } else if (a == "--threads") {
      o.threads = bench::positive_ints("bench_matmul", a, next());
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  return o;
}

// What every row names: the CPU, its caches and OpenBLAS's kernel set.
struct Machine {
  std::string cpu, caches, blas_core;
};

void print_header(const Options& o, const Machine& m) {
  if (o.json) {
    std::printf("[\n");
    return;
  }
  std::printf("%-8s %3s %-20s %6s %6s %6s %9s %9s %7s %7s %7s\n", "isa", "thr", "shape", "M", "N",
              "K", "GFLOP/s", "OpenBLAS", "ratio", "probe", "%peak");
  std::printf("# cpu: %s; caches: %s\n", m.cpu.c_str(), m.caches.c_str());
  if (!kHaveOpenBlas) return;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# OpenBLAS kernels: %s%s\n", m.blas_core.c_str(),
              coretype ? (std::string(" (OPENBLAS_CORETYPE=") + coretype + ")").c_str() : "");
  if (const char* timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT"))
    std::printf(
        "# OPENBLAS_THREAD_TIMEOUT=%s (OpenBLAS's idle workers sleep instead of spinning)\n",
        timeout);
}

// One ISA path at one thread count: its blocking and, but on the scalar path, its peaks.
struct Path {
  std::string isa;
  int threads;
  bool has_peak;
  double peak0, l1;
  k::GemmBlocking bk;
  const char* bk_source;
};

// Switches to the path, measures its probe and L1 micro-kernel rate, and prints them.
Path start_path(const Options& o, const std::string& isa, int threads) {
  tg::set_num_threads(threads);
  k::set_isa(isa);
  Path p{isa, threads, false, 0, 0, {}, nullptr};
  // The scalar table's probe times plain scalar mul+add chains, while the compiler vectorises
  // the portable micro-kernel, so a "fraction of peak" would mean nothing there.
  p.has_peak = isa != "scalar";
  p.peak0 = p.has_peak ? probe_peak(threads) : 0;
  p.l1 = p.has_peak ? ukernel_l1(threads) : 0;
  p.bk = k::gemm_blocking_for(k::active_table(), &p.bk_source);
  if (o.json) return p;
  std::printf("# %s: micro-tile %lldx%lld, blocking MC %lld KC %lld NC %lld (from %s)\n",
              isa.c_str(), (long long)p.bk.mr, (long long)p.bk.nr, (long long)p.bk.mc,
              (long long)p.bk.kc, (long long)p.bk.nc, p.bk_source);
  if (p.has_peak)
    std::printf(
        "# %s, %d thread(s): FMA probe %.1f GFLOP/s, micro-kernel on L1-resident panels %.1f "
        "(each alone, before the table; the table's probe column is timed beside each GEMM)\n",
        isa.c_str(), threads, p.peak0, p.l1);
  return p;
}

// One row's rates: ours, OpenBLAS's and the probe's, GFLOP/s.
struct Rates {
  double ours, blas, peak;
};

void print_row(const Options& o, const Path& p, const Machine& m, const Shape& s, const Rates& r,
               bool& first_json) {
  const double ratio = r.blas > 0 ? r.ours / r.blas : 0;
  if (o.json) {
    std::printf(
        "%s  {\"isa\": \"%s\", \"threads\": %d, \"shape\": \"%s\", \"M\": %lld, \"N\": "
        "%lld, \"K\": %lld, \"gflops\": %.2f, \"openblas_gflops\": %.2f, \"ratio\": %.3f, "
        "\"peak_gflops\": %.2f, \"ukernel_l1_gflops\": %.2f, \"peak_fraction\": %s, "
        "\"mc\": %lld, \"kc\": %lld, \"nc\": %lld, \"blocking_from\": \"%s\", \"cpu\": "
        "%s, \"caches\": %s, \"openblas_core\": %s}",
        first_json ? "" : ",\n", p.isa.c_str(), p.threads, s.name.c_str(), (long long)s.M,
        (long long)s.N, (long long)s.K, r.ours, r.blas, ratio, r.peak, p.l1,
        p.has_peak ? std::to_string(r.ours / r.peak).c_str() : "null", (long long)p.bk.mc,
        (long long)p.bk.kc, (long long)p.bk.nc, p.bk_source, tg::json::quote(m.cpu).c_str(),
        tg::json::quote(m.caches).c_str(), tg::json::quote(m.blas_core).c_str());
    first_json = false;
  } else {
    char probe[16] = "      -", frac[16] = "      -";
    if (p.has_peak) std::snprintf(probe, sizeof probe, "%7.1f", r.peak);
    if (p.has_peak) std::snprintf(frac, sizeof frac, "%6.1f%%", 100.0 * r.ours / r.peak);
    std::printf("%-8s %3d %-20s %6lld %6lld %6lld %9.1f %9.1f %7.2f %s %s\n", p.isa.c_str(),
                p.threads, s.name.c_str(), (long long)s.M, (long long)s.N, (long long)s.K, r.ours,
                r.blas, ratio, probe, frac);
  }
  std::fflush(stdout);
}

// Times shape s on path p beside OpenBLAS and the probe; false (no row) when our result is wrong.
bool measure_shape(const Options& o, const Path& p, const Shape& s, std::mt19937& g, Rates& r) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N), Cb(s.M * s.N);
  for (auto& x : A) x = d(g);
  for (auto& x : B) x = d(g);
  const int64_t rsA = s.transA ? 1 : s.K, csA = s.transA ? s.M : 1;
  const int64_t rsB = s.transB ? 1 : s.N, csB = s.transB ? s.K : 1;
  auto run = [&] {
    k::sgemm(s.M, s.N, s.K, A.data(), rsA, csA, B.data(), rsB, csB, 0.f, C.data(), s.N);
  };
  run();
  if (!check_against_ref(s, A.data(), rsA, csA, B.data(), rsB, csB, C.data())) return false;
  const double flop = 2.0 * s.M * s.N * s.K;
  const double min_time = o.quick ? 0.05 : 0.25;
  auto run_blas = [&] {
    openblas_sgemm(p.threads, s.transA, s.transB, s.M, s.N, s.K, A.data(), s.transA ? s.M : s.K,
                   B.data(), s.transB ? s.K : s.N, Cb.data(), s.N);
  };
  // The probe takes its turn with each GEMM: the clock and the neighbours' load move
  // within a run, and %peak compares times taken in the same window.
  constexpr int64_t kProbeIters = 250'000;
  double probe_flops = 0;
  auto run_probe = [&] { probe_flops = probe_once(p.threads, kProbeIters); };
  const std::vector<double> times =
      best_times(o.reps, min_time,
                 {run, kHaveOpenBlas ? std::function<void()>(run_blas) : nullptr,
                  p.has_peak ? std::function<void()>(run_probe) : nullptr});
  r.ours = flop / times[0] * 1e-9;
  r.blas = kHaveOpenBlas ? flop / times[1] * 1e-9 : 0;
  r.peak = p.has_peak ? probe_flops / times[2] * 1e-9 : 0;
  return true;
}

}  // namespace

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  k::gemm_blocking_for(k::active_table());  // a bad TAPEGRAD_GEMM_BLOCKING fails before the table
  const std::vector<std::string> isas =
      o.isa.empty() ? k::available_isas() : std::vector<std::string>{o.isa};
  const std::vector<Shape> shapes = make_shapes(o);
  const Machine m{bench::cpu_model(), k::describe(k::cache_info()),
                  kHaveOpenBlas ? openblas_core() : "none"};
  std::mt19937 g(1);
  bool ok = true, first_json = true;
  print_header(o, m);
  for (int threads : o.threads)
    for (const std::string& isa : isas) {
      const Path p = start_path(o, isa, threads);
      for (const Shape& s : shapes) {
        // The scalar path is only the oracle: time it on small sizes only.
        if (isa == "scalar" && s.M * s.N * s.K > (int64_t(1) << 27)) continue;
        Rates r{};
        if (measure_shape(o, p, s, g, r))
          print_row(o, p, m, s, r, first_json);
        else
          ok = false;
      }
    }
  if (o.json) std::printf("\n]\n");
  return ok ? 0 : 1;
}

// OpenBLAS reads its environment once, when it loads (before main), so what is set here takes
// effect through a restart of this program:
// - OPENBLAS_THREAD_TIMEOUT=4. OpenBLAS's idle workers keep polling (sched_yield) for 2^28
//   cycles, ~0.1 s, after each call before they sleep, and in an alternating benchmark they take a
//   core from our next timed run: measured right after 50 OpenBLAS calls, our 2-thread 512³ ran at
//   82-126 GFLOP/s for ~0.1 s, then at 165-220; with the timeout at 4 there was no such dip, and
//   OpenBLAS's own figures did not move.
// - OPENBLAS_CORETYPE=Haswell with --isa avx2 on a machine with AVX-512, so that the AVX2 path
//   faces OpenBLAS's AVX2 kernels (Debian's DYNAMIC_ARCH build honours it: the header prints the
//   kernel set OpenBLAS reports, e.g. Haswell instead of Cooperlake on a Zen 4).
// A variable the caller set is left alone.
void configure_openblas(int argc, char** argv) {
#if TAPEGRAD_HAVE_OPENBLAS && defined(__linux__)
  bool avx2 = false;
  for (int i = 1; i + 1 < argc; ++i)
    avx2 |= std::strcmp(argv[i], "--isa") == 0 && std::strcmp(argv[i + 1], "avx2") == 0;
  const std::vector<std::string> have = k::available_isas();
  const bool has_avx512 = std::find(have.begin(), have.end(), "avx512") != have.end();
  std::vector<const char*> set;
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr &&
      setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0)
    set.push_back("OPENBLAS_THREAD_TIMEOUT");
  if (avx2 && has_avx512 && std::getenv("OPENBLAS_CORETYPE") == nullptr &&
      setenv("OPENBLAS_CORETYPE", "Haswell", 1) == 0)
    set.push_back("OPENBLAS_CORETYPE");
  if (set.empty()) return;
  execv("/proc/self/exe", argv);
  for (const char* name : set) unsetenv(name);  // exec failed: run as we are
#else
  (void)argc, (void)argv;
#endif
}

int main(int argc, char** argv) {
  configure_openblas(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. a bad TAPEGRAD_THREADS or TAPEGRAD_ISA
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
}
