// bench_matmul: sgemm GFLOP/s per kernel path and thread count, on square sizes and on the GPT-2
// (124M) and tiny-preset training shapes in nn::Linear's operand layouts, next to two peers when
// meson found them, OpenBLAS's cblas_sgemm and oneDNN's dnnl_sgemm (the ratio is ours over the
// better of the two on each row), and as a fraction of the machine's FMA peak (each path's
// built-in probe, timed in turn with each GEMM so that all see the same clock and load).
//
// Each path and thread count runs in its own child process (this binary with --path-child), so
// that the peers load with the environment chosen for that path: on the avx2 path of a machine
// with AVX-512, OpenBLAS's Haswell kernels and oneDNN capped at AVX2; on every other path the
// peers' own best, with a user's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE / ONEDNN_MAX_CPU_ISA
// removed for them. The header says what was set or removed and why, and names the kernel set
// each peer reports it ran (openblas_get_corename, dnnl_get_effective_cpu_isa).
//
// Every result, ours and the peers', is checked against sgemm_ref before it is timed (llm.c
// dev/cpu/matmul_forward.c): whole-matrix for small shapes, sampled rows for big ones. Times are
// the best of several runs.
//
// --dtype bf16 (or f32,bf16): bf16 rows, A and B in bfloat16 and C in float32, our gemm_bf16 on
// the fastest path (avx512_bf16 where the CPU has the unit) beside oneDNN's
// dnnl_gemm_bf16bf16f32, bounded by the path's bf16 probe (vdpbf16ps), or its FMA probe where it
// widens bf16 to float32. Ours is checked bit for bit against gemm_bf16_ref before it is timed.
//
// Options: bench_matmul --help (the table: bench/bench_matmul_options.h).
// The header (and every --json row) names the CPU, its caches, each path's block sizes and where
// they come from. Compare timings only within one machine, and expect noise when other jobs share
// the cores.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

#include "bench/bench_matmul_options.h"
#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "bench/peer_env.h"
#include "bench/probes.h"
#include "bench/settings.h"
#include "bench/torch_peer.h"
#include "core/json.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "train/plot.h"

#if TAPEGRAD_HAVE_OPENBLAS
#include <cblas.h>
constexpr bool kHaveOpenBlas = true;
std::string openblas_core() { return openblas_get_corename(); }
void openblas_sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              int(M), int(N), int(K), 1.f, A, int(lda), B, int(ldb), 0.f, C, int(ldc));
}
#else
constexpr bool kHaveOpenBlas = false;
std::string openblas_core() { return "none"; }
void openblas_sgemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                    int64_t, float*, int64_t) {}
#endif

#if TAPEGRAD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
constexpr bool kHaveOneDnn = true;
// The instruction set oneDNN's JIT kernels target (after ONEDNN_MAX_CPU_ISA, if set).
std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
void onednn_sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
}
// oneDNN's bf16 GEMM (row-major, like dnnl_sgemm): exported by libdnnl as a C function, but
// Debian's 2.6 headers do not declare it; its bf16 type is a struct of the 16 bits.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const uint16_t* A,
                                               dnnl_dim_t lda, const uint16_t* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);
void onednn_gemm_bf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  dnnl_gemm_bf16bf16f32(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, 0.f,
                        C, ldc);
}
#else
constexpr bool kHaveOneDnn = false;
std::string onednn_isa() { return "none"; }
void onednn_sgemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                  int64_t, float*, int64_t) {}
void onednn_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                      const uint16_t*, int64_t, float*, int64_t) {}
#endif

namespace k = tg::kernels;

namespace {

using Clock = std::chrono::steady_clock;
using bench::seconds_since;

struct Shape {
  std::string name;
  int64_t M, N, K;
  bool transA, transB;  // A stored [K, M] / B stored [N, K], read through strides
};

using bench_matmul::Options;

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

// The same for the bf16 micro-kernel (KC pairs of k; 4 flops per pair and tile element).
double ukernel_l1_bf16(int threads) {
  const k::KernelTable& t = k::active_table();
  const k::GemmBlocking bk = t.gemm_bf16_blocking;
  const double per_call = 4.0 * double(bk.mr) * double(bk.nr) * double(bk.kc);
  const int64_t calls = std::max<int64_t>(1, int64_t(4e9 / per_call));
  std::vector<double> flops(threads, 0);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    tg::parallel_team(threads, [&](int tid, int, tg::Barrier& barrier) {
      // 0.001 in bf16 (0x3A83): C grows by ~2·KC·1e-6 per call.
      std::vector<uint16_t> a(size_t(bk.mr * 2 * bk.kc), 0x3A83),
          b(size_t(bk.kc * 2 * bk.nr), 0x3A83);
      std::vector<float> c(size_t(bk.mr * bk.nr), 0.f);
      barrier.arrive_and_wait();
      for (int64_t i = 0; i < calls; ++i)
        t.gemm_bf16_ukernel(bk.kc, a.data(), b.data(), c.data(), bk.nr, bk.mr, bk.nr, true,
                            k::Bf16TileOut{});
      flops[size_t(tid)] = per_call * double(calls);
    });
    best = std::min(best, seconds_since(t0));
  }
  double total = 0;
  for (double f : flops) total += f;
  return total / best * 1e-9;
}

// Compares a result with sgemm_ref on all rows (small) or three sampled rows (big); `who` names
// the GEMM that made it in the one-line error.
bool check_against_ref(const std::string& who, const Shape& s, const float* A, int64_t rsA,
                       int64_t csA, const float* B, int64_t rsB, int64_t csB, const float* C) {
  std::vector<int64_t> rows;
  if (s.M * s.N * s.K <= (int64_t(1) << 27)) {
    for (int64_t i = 0; i < s.M; ++i) rows.push_back(i);
  } else {
    rows = {0, s.M / 2, s.M - 1};
  }
  std::vector<float> r(size_t(s.N));
  double worst = 0;
  for (int64_t i : rows) {
    k::sgemm_ref(1, s.N, s.K, A + i * rsA, rsA, csA, B, rsB, csB, 0.f, r.data(), s.N);
    for (int64_t j = 0; j < s.N; ++j)
      worst = std::max(worst, double(std::fabs(r[size_t(j)] - C[i * s.N + j])));
  }
  // Inputs in [-1, 1]: rounding errors of a K-term sum grow like sqrt(K) terms of size ~K·eps
  // in practice (the K²·eps worst case never occurs with random signs); this bound is 4x that.
  const double tol = 4.0 * double(s.K) * 1.2e-7 * std::sqrt(double(s.K)) + 1e-5;
  if (worst > tol) {
    std::fprintf(stderr, "bench_matmul: %s on %s differs from sgemm_ref by %g (tol %g)\n",
                 who.c_str(), s.name.c_str(), worst, tol);
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

// --isa's value, when this machine has the path.
std::string checked_isa(const std::string& isa) {
  const std::vector<std::string> have = k::available_isas();
  if (std::find(have.begin(), have.end(), isa) != have.end()) return isa;
  std::string list;
  for (const std::string& h : have) list += (list.empty() ? "" : ", ") + h;
  bench::bad_option("bench_matmul",
                    "--isa " + isa + " is not available on this machine (it has " + list + ")");
}

// The command line. Two internal forms come first, for the parent: --peer-kernels (print the
// kernel set OpenBLAS chose) and --path-child ISA THREADS [options] (measure one path).
Options parse(int argc, char** argv) {
  Options o;
  if (argc >= 2 && std::string(argv[1]) == "--peer-kernels") {
    std::printf("%s\n", openblas_core().c_str());
    std::exit(0);
  }
  if (argc >= 4 && std::string(argv[1]) == "--path-child") {
    o.child_isa = checked_isa(argv[2]);
    o.child_threads = int(bench::whole_int("bench_matmul", "--path-child", argv[3], 1, 1024));
    argc -= 3, argv += 3;
  }
  const std::vector<std::string> given =
      bench::parse_command(bench_matmul::command(), "bench_matmul", argc, argv, o);
  if (o.quick && std::find(given.begin(), given.end(), "reps") == given.end()) o.reps = 3;
  if (!o.isa.empty()) o.isa = checked_isa(o.isa);
  o.threads = bench::int_list("bench_matmul", "--threads", o.threads_list, 1, 1024);
  int64_t v[3];
  std::string error;
  if (!o.blocking.empty() && !k::parse_gemm_blocking(o.blocking, v, error))
    bench::bad_option("bench_matmul", "--blocking: " + error);
  return o;
}

// ---- child: one path at one thread count (--path-child), in its own process so that each
// peer reads the environment chosen for this path when it loads ----

// One row's rates: ours, OpenBLAS's, oneDNN's and the probe's, GFLOP/s (0: no such peer).
struct Rates {
  double ours = 0, blas = 0, dnnl = 0, peak = 0;
  double torch = 0;  // PyTorch's torch.matmul, measured by the parent (0: none)
};

// Times shape s beside the peers and the probe, each checked against sgemm_ref first; false
// (no row, one line on stderr) when a result is wrong.
bool measure_shape(const Options& o, int threads, bool has_peak, const Shape& s, std::mt19937& g,
                   Rates& r) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N));
  std::vector<float> Cb(C.size()), Cd(C.size());
  for (auto& x : A) x = d(g);
  for (auto& x : B) x = d(g);
  const int64_t rsA = s.transA ? 1 : s.K, csA = s.transA ? s.M : 1;
  const int64_t rsB = s.transB ? 1 : s.N, csB = s.transB ? s.K : 1;
  const int64_t lda = s.transA ? s.M : s.K, ldb = s.transB ? s.K : s.N;
  auto run = [&] {
    k::sgemm(s.M, s.N, s.K, A.data(), rsA, csA, B.data(), rsB, csB, 0.f, C.data(), s.N);
  };
  auto run_blas = [&] {
    openblas_sgemm(s.transA, s.transB, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, Cb.data(), s.N);
  };
  auto run_dnnl = [&] {
    onednn_sgemm(s.transA, s.transB, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, Cd.data(), s.N);
  };
  run(), run_blas(), run_dnnl();
  auto ok = [&](const std::string& who, bool have, const std::vector<float>& out) {
    return !have || check_against_ref(who, s, A.data(), rsA, csA, B.data(), rsB, csB, out.data());
  };
  if (!ok(k::active_isa(), true, C) || !ok("OpenBLAS", kHaveOpenBlas, Cb) ||
      !ok("oneDNN", kHaveOneDnn, Cd))
    return false;
  // The probe takes its turn with each GEMM: the clock and the neighbours' load move within a
  // run, and %peak compares times taken in the same window. 2M iterations (4 ms on one core of
  // the Xeon here): at 250k the 2-thread probe's team wake-up and the peers' idle threads
  // weighed enough to read 80 GFLOP/s where the header's long probe read 481.
  double probe_flops = 0;
  auto run_probe = [&] { probe_flops = bench::probe_once(threads, 2'000'000); };
  using Fn = std::function<void()>;
  const std::vector<double> t =
      best_times(o.reps, o.quick ? 0.05 : 0.25,
                 {run, kHaveOpenBlas ? Fn(run_blas) : nullptr, kHaveOneDnn ? Fn(run_dnnl) : nullptr,
                  has_peak ? Fn(run_probe) : nullptr});
  const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
  r.ours = flop / t[0] * 1e-9;
  r.blas = kHaveOpenBlas ? flop / t[1] * 1e-9 : 0;
  r.dnnl = kHaveOneDnn ? flop / t[2] * 1e-9 : 0;
  r.peak = has_peak ? probe_flops / t[3] * 1e-9 : 0;
  return true;
}

// The bf16 rows: A and B in bf16 (random in [-1, 1], rounded), C in float32. Ours must equal
// gemm_bf16_ref bit for bit (kernels.h), oneDNN's must be within check_against_ref's bound of
// the float32 product of the same bf16 values; checked on sampled rows, before timing.
bool measure_shape_bf16(const Options& o, int threads, bool has_peak, const Shape& s,
                        std::mt19937& g, Rates& r) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> Af(size_t(s.M * s.K)), Bf(size_t(s.K * s.N)), C(size_t(s.M * s.N));
  std::vector<float> Cd(C.size());
  for (auto& x : Af) x = d(g);
  for (auto& x : Bf) x = d(g);
  std::vector<uint16_t> A(Af.size()), B(Bf.size());
  k::f32_to_bf16(int64_t(A.size()), Af.data(), A.data());
  k::f32_to_bf16(int64_t(B.size()), Bf.data(), B.data());
  k::bf16_to_f32(int64_t(A.size()), A.data(), Af.data());
  k::bf16_to_f32(int64_t(B.size()), B.data(), Bf.data());
  const int64_t rsA = s.transA ? 1 : s.K, csA = s.transA ? s.M : 1;
  const int64_t rsB = s.transB ? 1 : s.N, csB = s.transB ? s.K : 1;
  const int64_t lda = s.transA ? s.M : s.K, ldb = s.transB ? s.K : s.N;
  auto run = [&] {
    k::gemm_bf16(s.M, s.N, s.K, A.data(), rsA, csA, B.data(), rsB, csB, 0.f, C.data(), s.N);
  };
  auto run_dnnl = [&] {
    onednn_gemm_bf16(s.transA, s.transB, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, Cd.data(),
                     s.N);
  };
  run(), run_dnnl();
  for (int64_t i : {int64_t(0), s.M / 2, s.M - 1}) {
    std::vector<float> want(size_t(s.N));
    k::gemm_bf16_ref(1, s.N, s.K, A.data() + i * rsA, rsA, csA, B.data(), rsB, csB, 0.f,
                     want.data(), s.N);
    if (std::memcmp(want.data(), C.data() + i * s.N, sizeof(float) * size_t(s.N)) != 0) {
      std::fprintf(stderr, "bench_matmul: %s's bf16 GEMM on %s differs from gemm_bf16_ref\n",
                   k::active_isa().c_str(), s.name.c_str());
      return false;
    }
  }
  if (kHaveOneDnn &&
      !check_against_ref("oneDNN bf16", s, Af.data(), rsA, csA, Bf.data(), rsB, csB, Cd.data()))
    return false;
  double probe_flops = 0;
  auto run_probe = [&] { probe_flops = bench::probe_once(threads, 2'000'000, true); };
  using Fn = std::function<void()>;
  const std::vector<double> t =
      best_times(o.reps, o.quick ? 0.05 : 0.25,
                 {run, kHaveOneDnn ? Fn(run_dnnl) : nullptr, has_peak ? Fn(run_probe) : nullptr});
  const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
  r.ours = flop / t[0] * 1e-9;
  r.dnnl = kHaveOneDnn ? flop / t[1] * 1e-9 : 0;
  r.peak = has_peak ? probe_flops / t[2] * 1e-9 : 0;
  return true;
}

// Prints, one record a line for the parent: "path ISA THREADS PROBE L1 MR NR MC KC NC SOURCE",
// "peers OPENBLAS_CORE ONEDNN_ISA", then "row INDEX OURS OPENBLAS ONEDNN PROBE" per shape.
int path_child(const Options& o) {
  const std::string& isa = o.child_isa;
  tg::set_num_threads(o.child_threads);
  k::set_isa(isa);
  if (!o.blocking.empty()) {
    int64_t v[3];
    std::string error;
    k::parse_gemm_blocking(o.blocking, v, error);
    k::set_sgemm_blocking_override(v[0], v[1], v[2]);
  }
  // The scalar table's probe times plain scalar mul+add chains, while the compiler vectorises
  // the portable micro-kernel, so a "fraction of peak" would mean nothing there.
  const bool has_peak = isa != "scalar", bf16 = o.dtype == "bf16";
  const char* source = nullptr;
  const k::GemmBlocking bk = bf16 ? k::gemm_bf16_blocking_for(k::active_table(), &source)
                                  : k::gemm_blocking_for(k::active_table(), &source);
  const double l1 = !has_peak ? 0.0
                    : bf16    ? ukernel_l1_bf16(o.child_threads)
                              : ukernel_l1(o.child_threads);
  std::printf("path %s %d %.3f %.3f %lld %lld %lld %lld %lld %s\n", isa.c_str(), o.child_threads,
              has_peak ? bench::probe_peak(o.child_threads, bf16) : 0.0, l1, (long long)bk.mr,
              (long long)bk.nr, (long long)bk.mc, (long long)bk.kc, (long long)bk.nc, source);
  std::mt19937 g(1);
  const std::vector<Shape> shapes = make_shapes(o);
  bool printed_peers = false;
  for (size_t i = 0; i < shapes.size(); ++i) {
    // The scalar path is only the oracle: time it on small sizes only.
    if (isa == "scalar" && shapes[i].M * shapes[i].N * shapes[i].K > (int64_t(1) << 27)) continue;
    Rates r;
    if (!(bf16 ? measure_shape_bf16 : measure_shape)(o, o.child_threads, has_peak, shapes[i], g, r))
      return 1;
    if (!printed_peers)  // after the peers' first calls: oneDNN settles its ISA on first use
      std::printf("peers %s %s\n", openblas_core().c_str(), onednn_isa().c_str());
    printed_peers = true;
    std::printf("row %zu %.3f %.3f %.3f %.3f\n", i, r.ours, r.blas, r.dnnl, r.peak);
    std::fflush(stdout);
  }
  return 0;
}

// ---- parent: each path in a child with its peers' environment, then the table ----

// The peers face each path on kernels of its width: on the avx2 path of a machine with AVX-512,
// OpenBLAS's Haswell kernels and oneDNN capped at AVX2; on any other path their own best.
bench::PeerEnv peer_env(const std::string& isa) {
  const std::vector<std::string> have = k::available_isas();
  const bool narrow = isa == "avx2" && std::find(have.begin(), have.end(), "avx512") != have.end();
  bench::PeerEnv e;
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr)
    bench::peer_var(
        e, "OPENBLAS_THREAD_TIMEOUT", "4",
        "OpenBLAS's idle workers sleep instead of spinning on the core our next timed run "
        "needs");
  if (narrow) {
    bench::peer_var(e, "OPENBLAS_CORETYPE", "Haswell",
                    "OpenBLAS's AVX2 kernels, as wide as this path");
    bench::peer_var(e, "ONEDNN_MAX_CPU_ISA", "AVX2", "oneDNN's AVX2 kernels, as wide as this path");
  } else {
    const std::string why = "it would hold the peer to other kernels than its best on this CPU";
    for (const char* name :
         {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      bench::peer_var(e, name, nullptr, why);
  }
  return e;
}

// One path's measurements, read back from its child.
struct PathResult {
  std::string isa, dtype, blas_core = "none", dnnl_isa = "none", bk_source;
  int threads = 0;
  double peak0 = 0, l1 = 0;
  long long mr = 0, nr = 0, mc = 0, kc = 0, nc = 0;
  std::vector<std::pair<size_t, Rates>> rows;  // shape index, rates
  std::vector<std::string> notes;
  std::string torch;  // "torch 2.6.0: ATen AVX512, ..." or empty: no PyTorch column
};

bool parse_path_output(const std::string& out, size_t n_shapes, PathResult& p) {
  std::istringstream is(out);
  bool ok = true;
  for (std::string line; std::getline(is, line);) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (tag == "path") {
      ok &= bool(ls >> p.isa >> p.threads >> p.peak0 >> p.l1 >> p.mr >> p.nr >> p.mc >> p.kc >>
                 p.nc >> p.bk_source);
    } else if (tag == "peers") {
      ok &= bool(ls >> p.blas_core >> p.dnnl_isa);
    } else if (tag == "row") {
      size_t i;
      Rates r;
      ok &= (ls >> i >> r.ours >> r.blas >> r.dnnl >> r.peak) && i < n_shapes;
      if (ok) p.rows.emplace_back(i, r);
    } else {
      ok = false;
    }
  }
  return ok;
}

// Runs path isa at `threads` in a child; a failure is one line naming it and exit status 1.
PathResult run_path(const Options& o, const std::string& self, const std::string& isa,
                    const std::string& dtype, int threads, size_t n_shapes) {
  bench::PeerEnv env = peer_env(isa);
  if (isa == "avx512" && kHaveOpenBlas) {  // OpenBLAS's own choice, checked before it is timed
    std::string core, err;
    long rss = 0;
    if (bench::run_child({self, "--peer-kernels"}, threads, core, rss, err, env.changes) &&
        !bench::openblas_avx512_core(bench::last_line(core)))
      bench::openblas_best_core(env, bench::last_line(core));
  }
  std::vector<std::string> args = {self,       "--path-child",
                                   isa,        std::to_string(threads),
                                   "--reps",   std::to_string(o.reps),
                                   "--shapes", o.shapes,
                                   "--dtype",  dtype};
  if (o.quick) args.insert(args.begin() + 4, "--quick");
  if (!o.blocking.empty()) args.insert(args.end(), {"--blocking", o.blocking});
  std::string out, err;
  long rss = 0;
  PathResult p;
  if (!bench::run_child(args, threads, out, rss, err, env.changes) ||
      !parse_path_output(out, n_shapes, p)) {
    std::fprintf(stderr, "bench_matmul: the %s path's %s child at %d thread(s) failed: %s\n",
                 isa.c_str(), dtype.c_str(), threads,
                 err.empty() ? "unreadable output" : err.c_str());
    std::exit(1);
  }
  p.dtype = dtype;
  p.notes = env.notes;
  return p;
}

bool is_bf16(const PathResult& p) { return p.dtype == "bf16"; }

// PyTorch's rate on each of p's rows (tools/torch_matmul.py, its text run with `python -c`), in a
// child with the peer's environment for p's path; a failure leaves the column empty, with a note.
void add_torch_rates(const Options& o, const bench::Peer& peer, const std::vector<Shape>& shapes,
                     PathResult& p) {
  static const std::string source =
      bench::source_text("bench_matmul", TAPEGRAD_SOURCE_ROOT, "tools/torch_matmul.py");
  std::string spec;
  for (const auto& [i, r] : p.rows) {
    const Shape& s = shapes[i];
    spec += (spec.empty() ? "" : ";") + std::to_string(s.M) + "," + std::to_string(s.N) + "," +
            std::to_string(s.K) + "," + (s.transA ? "1" : "0") + "," + (s.transB ? "1" : "0");
  }
  std::vector<std::string> args = peer.torch.launcher;
  args.insert(args.end(), {"-c", source, "--dtype", p.dtype, "--threads", std::to_string(p.threads),
                           "--reps", std::to_string(o.reps), "--shapes", spec});
  std::string out, err;
  long rss = 0;
  std::vector<double> rates;
  if (bench::run_child(args, p.threads, out, rss, err, peer.env.changes)) try {
      const tg::json::Value v = tg::json::parse(bench::last_line(out));
      if (const tg::json::Value* g = v.find("gflops"); g && g->kind == tg::json::Value::Kind::Array)
        for (const tg::json::Value& x : g->items) rates.push_back(x.num);
    } catch (const std::exception&) {
    }
  if (rates.size() != p.rows.size()) {
    p.notes.push_back("PyTorch failed (" + (err.empty() ? "unreadable output" : err) + ")");
    return;
  }
  for (size_t k = 0; k < rates.size(); ++k) p.rows[k].second.torch = rates[k];
  p.torch = peer.torch.version + ": " + peer.kernels;
  for (const std::string& n : peer.env.notes) p.notes.push_back("PyTorch: " + n);
}

std::string peers_line(const PathResult& p) {
  const std::string dnnl =
      std::string(is_bf16(p) ? "oneDNN (dnnl_gemm_bf16bf16f32) " : "oneDNN ") +
      (kHaveOneDnn ? p.dnnl_isa : "not built in (no libdnnl-dev when meson ran)");
  if (is_bf16(p)) return dnnl + "; OpenBLAS: no bf16 row";
  return std::string("OpenBLAS ") + (kHaveOpenBlas ? p.blas_core : "not built in") + ", " + dnnl;
}

// The probe that bounds a row: the path's FMA probe, or for bf16 rows its bf16 unit's
// (vdpbf16ps), or the FMA probe where the path widens bf16 to float32.
std::string probe_name(const PathResult& p) {
  return !is_bf16(p) ? "FMA probe" : p.isa == "avx512_bf16" ? "bf16 probe" : "FMA probe (widening)";
}

void print_path_header(const PathResult& p) {
  std::printf("# %s %s: micro-tile %lldx%lld, blocking MC %lld KC %lld%s NC %lld (from %s)\n",
              p.isa.c_str(), p.dtype.c_str(), p.mr, p.nr, p.mc, p.kc,
              is_bf16(p) ? " (pairs of k)" : "", p.nc, p.bk_source.c_str());
  if (p.isa != "scalar")
    std::printf(
        "# %s %s, %d thread(s): %s %.1f GFLOP/s, micro-kernel on L1-resident panels %.1f "
        "(each alone, before the table; the table's probe column is timed beside each GEMM)\n",
        p.isa.c_str(), p.dtype.c_str(), p.threads, probe_name(p).c_str(), p.peak0, p.l1);
  std::printf("# %s %s peers' kernels: %s\n", p.isa.c_str(), p.dtype.c_str(),
              peers_line(p).c_str());
  if (!p.torch.empty())
    std::printf("# %s %s PyTorch: %s\n", p.isa.c_str(), p.dtype.c_str(), p.torch.c_str());
  for (const std::string& n : p.notes) std::printf("# %s peers: %s\n", p.isa.c_str(), n.c_str());
}

// Our rate over the better peer's (0 when there is none).
double best_peer(const Rates& r) { return std::max(r.blas, r.dnnl); }

void print_row(const PathResult& p, const Shape& s, const Rates& r) {
  auto rate = [](bool have, double v) {
    char b[16] = "        -";
    if (have) std::snprintf(b, sizeof b, "%9.1f", v);
    return std::string(b);
  };
  char probe[16] = "      -", frac[16] = "      -", ratio[16] = "      -", xt[16] = "      -";
  if (r.torch > 0) std::snprintf(xt, sizeof xt, "%7.2f", r.ours / r.torch);
  if (p.isa != "scalar") std::snprintf(probe, sizeof probe, "%7.1f", r.peak);
  if (p.isa != "scalar") std::snprintf(frac, sizeof frac, "%6.1f%%", 100.0 * r.ours / r.peak);
  if (best_peer(r) > 0) std::snprintf(ratio, sizeof ratio, "%7.2f", r.ours / best_peer(r));
  std::printf("%-11s %-5s %3d %-20s %6lld %6lld %6lld %9.1f %s %s %s %s %s %s %s\n", p.isa.c_str(),
              p.dtype.c_str(), p.threads, s.name.c_str(), (long long)s.M, (long long)s.N,
              (long long)s.K, r.ours, rate(kHaveOpenBlas && !is_bf16(p), r.blas).c_str(),
              rate(kHaveOneDnn, r.dnnl).c_str(), ratio, rate(r.torch > 0, r.torch).c_str(), xt,
              probe, frac);
}

std::string json_row(const PathResult& p, const Shape& s, const Rates& r, const std::string& cpu,
                     const std::string& caches) {
  auto num = [](bool have, double v) { return have ? bench::json_number(v) : "null"; };
  std::string notes;
  for (const std::string& n : p.notes) notes += (notes.empty() ? "" : ", ") + tg::json::quote(n);
  return "{\"isa\": " + tg::json::quote(p.isa) + ", \"dtype\": " + tg::json::quote(p.dtype) +
         ", \"threads\": " + std::to_string(p.threads) + ", \"shape\": " + tg::json::quote(s.name) +
         ", \"M\": " + std::to_string(s.M) + ", \"N\": " + std::to_string(s.N) +
         ", \"K\": " + std::to_string(s.K) + ", \"gflops\": " + bench::json_number(r.ours) +
         ", \"openblas_gflops\": " + num(kHaveOpenBlas && !is_bf16(p), r.blas) +
         ", \"onednn_gflops\": " + num(kHaveOneDnn, r.dnnl) +
         ", \"ratio\": " + num(best_peer(r) > 0, r.ours / best_peer(r)) +
         ", \"torch_gflops\": " + num(r.torch > 0, r.torch) +
         ", \"torch_ratio\": " + num(r.torch > 0, r.ours / r.torch) +
         ", \"torch\": " + tg::json::quote(p.torch) +
         ", \"peak_gflops\": " + num(p.isa != "scalar", r.peak) +
         ", \"probe\": " + tg::json::quote(probe_name(p)) +
         ", \"ukernel_l1_gflops\": " + num(p.isa != "scalar", p.l1) +
         ", \"peak_fraction\": " + num(p.isa != "scalar", r.ours / r.peak) +
         ", \"mc\": " + std::to_string(p.mc) + ", \"kc\": " + std::to_string(p.kc) +
         ", \"nc\": " + std::to_string(p.nc) +
         ", \"blocking_from\": " + tg::json::quote(p.bk_source) +
         ", \"cpu\": " + tg::json::quote(cpu) + ", \"caches\": " + tg::json::quote(caches) +
         ", \"bf16_units\": " + tg::json::quote(bench::bf16_units()) +
         ", \"openblas_core\": " + tg::json::quote(p.blas_core) +
         ", \"onednn_isa\": " + tg::json::quote(p.dnnl_isa) + ", \"peer_env\": [" + notes + "]}";
}

// --svg: one panel per path and thread count, GFLOP/s per shape, the probe as a line.
void write_svg(const Options& o, const std::vector<PathResult>& paths,
               const std::vector<Shape>& shapes, const std::string& cpu) {
  std::vector<tg::train::BarPanel> panels;
  for (const PathResult& p : paths) {
    tg::train::BarPanel panel;
    panel.title =
        p.isa + " " + p.dtype + ", " + std::to_string(p.threads) + " thread(s): " + peers_line(p);
    panel.y_label = "GFLOP/s";
    panel.bars = {{"tapegrad", {}}, {"OpenBLAS", {}}, {"oneDNN", {}}, {"PyTorch", {}}};
    if (p.isa != "scalar") panel.line.name = probe_name(p);
    for (const auto& [i, r] : p.rows) {
      panel.categories.push_back(shapes[i].name);
      panel.bars[0].values.push_back(r.ours);
      panel.bars[1].values.push_back(kHaveOpenBlas && !is_bf16(p) ? r.blas : NAN);
      panel.bars[2].values.push_back(kHaveOneDnn ? r.dnnl : NAN);
      panel.bars[3].values.push_back(r.torch > 0 ? r.torch : NAN);
      panel.line.values.push_back(p.isa != "scalar" ? r.peak : NAN);
    }
    panels.push_back(panel);
  }
  try {
    tg::train::plot_bars(o.svg, "GEMM GFLOP/s (" + o.dtype + "), best of " + std::to_string(o.reps),
                         panels, cpu);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: --svg %s\n", e.what());
    std::exit(1);
  }
}

std::string self_executable() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::fprintf(stderr, "bench_matmul: cannot find its own executable\n");
    std::exit(1);
  }
  self[len] = '\0';
  return self;
}

void print_header(const std::string& cpu, const std::string& caches) {
  std::printf("%-11s %-5s %3s %-20s %6s %6s %6s %9s %9s %9s %7s %9s %7s %7s %7s\n", "isa", "dtype",
              "thr", "shape", "M", "N", "K", "GFLOP/s", "OpenBLAS", "oneDNN", "ratio", "PyTorch",
              "x torch", "probe", "%peak");
  std::printf("# cpu: %s; caches: %s; /proc/cpuinfo: %s\n", cpu.c_str(), caches.c_str(),
              bench::bf16_units().c_str());
  std::printf(
      "# ratio: ours over the better of OpenBLAS and oneDNN on that row (bf16: oneDNN); "
      "x torch: ours over PyTorch's torch.matmul (bf16: its C is bf16, ours float32)\n");
  if (!kHaveOneDnn)
    std::printf("# oneDNN: not built in (libdnnl-dev was not found when meson ran): no column\n");
  if (!kHaveOpenBlas)
    std::printf("# OpenBLAS: not built in (libopenblas-dev was not found when meson ran)\n");
}

}  // namespace

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!o.child_isa.empty()) return path_child(o);
  bench::check_settings("bench_matmul");
  const std::vector<std::string> have = k::available_isas();
  // float32 rows: every path but avx512_bf16, whose float kernels are avx512's; bf16 rows: the
  // fastest path (the bf16 unit's where the CPU has one). --isa: that path for both.
  std::vector<std::string> f32_isas;
  for (const std::string& isa : have)
    if (isa != "avx512_bf16") f32_isas.push_back(isa);
  if (!o.isa.empty()) f32_isas = {o.isa};
  const std::vector<std::string> bf16_isas = {o.isa.empty() ? have.back() : o.isa};
  std::vector<std::string> dtypes;
  if (o.dtype != "bf16") dtypes.push_back("f32");
  if (o.dtype != "f32") dtypes.push_back("bf16");
  const std::vector<Shape> shapes = make_shapes(o);
  const std::string cpu = bench::cpu_model(), caches = k::describe(k::cache_info());
  const std::string self = self_executable();
  // PyTorch per path (its environment is the path's), found before anything is timed so that a
  // bad --torch-python is refused at once; none for the scalar path.
  std::map<std::string, bench::Peer> torch;
  std::map<std::string, std::vector<std::string>> torch_notes;
  std::vector<std::string> all_isas = f32_isas;
  all_isas.insert(all_isas.end(), bf16_isas.begin(), bf16_isas.end());
  for (const std::string& isa : all_isas)
    if (isa != "scalar" && !torch.count(isa))
      torch[isa] = bench::choose_peer("bench_matmul", TAPEGRAD_SOURCE_ROOT, o.no_torch,
                                      o.torch_python, isa, torch_notes[isa]);
  if (!o.json) print_header(cpu, caches);
  std::vector<PathResult> paths;
  std::vector<std::string> json_rows;
  for (int threads : o.threads)
    for (const std::string& dtype : dtypes)
      for (const std::string& isa : dtype == "f32" ? f32_isas : bf16_isas) {
        paths.push_back(run_path(o, self, isa, dtype, threads, shapes.size()));
        PathResult& p = paths.back();
        for (const std::string& n : torch_notes[isa]) p.notes.push_back(n);
        if (torch.count(isa) && !torch[isa].torch.version.empty())
          add_torch_rates(o, torch[isa], shapes, p);
        if (!o.json) print_path_header(p);
        for (const auto& [i, r] : p.rows) {
          if (o.json)
            json_rows.push_back(json_row(p, shapes[i], r, cpu, caches));
          else
            print_row(p, shapes[i], r);
        }
        std::fflush(stdout);
      }
  if (o.json) {
    std::printf("[\n");
    for (size_t i = 0; i < json_rows.size(); ++i)
      std::printf("  %s%s\n", json_rows[i].c_str(), i + 1 < json_rows.size() ? "," : "");
    std::printf("]\n");
  }
  if (!o.svg.empty()) write_svg(o, paths, shapes, cpu + "; " + caches);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
}
