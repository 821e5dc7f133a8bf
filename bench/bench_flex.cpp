// bench_flex: flex_attention with the causal mask_mod against the fused causal kernel
// (scaled_dot_product_attention, is_causal=true), issue 33's target: flex within 10% of fused.
// Both on the same q, k, v (B, 12, T, 64) laid out as the notebook's qkv.permute makes them,
// forward and forward + backward, alternating run by run in one process so that both see the same
// background load; the best of --reps each. The flex rows include create_block_mask, which
// MHAPyTorchFlexAttention runs in every forward (also timed alone). Prints the CPU, the active
// path, the threads and the load average before and after.
//
// Usage: bench_flex [B T REPS]   (default 8 1024 7: the notebook's batch 8, 1024 tokens, 768 =
// 12 heads of 64)
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/cli_args.h"
#include "bench/machine.h"
#include "core/flex_attention.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/threadpool.h"

using namespace tg;

namespace {

constexpr const char* kProg = "bench_flex";
constexpr int64_t kHeads = 12, kHeadDim = 64;

// Wall-clock and CPU times (ms), best of the runs so far: on a loaded machine the CPU time (of
// the whole process, all threads) is the steadier of the two.
struct Best {
  double fwd = INFINITY, fwdbwd = INFINITY, cpu_fwd = INFINITY, cpu_fwdbwd = INFINITY;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// One forward and backward of `attention`, its times folded into best.
void time_once(const std::function<Tensor()>& attention, Tensor* const (&leaves)[3], Best& best) {
  for (Tensor* t : leaves) t->zero_grad();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_ms();
  const Tensor y = attention();
  best.fwd = std::min(best.fwd, ms_since(t0));
  best.cpu_fwd = std::min(best.cpu_fwd, cpu_ms() - c0);
  y.sum().backward();
  best.fwdbwd = std::min(best.fwdbwd, ms_since(t0));
  best.cpu_fwdbwd = std::min(best.cpu_fwdbwd, cpu_ms() - c0);
}

void print_row(const char* name, const Best& b) {
  std::printf("%-30s %10.1f %10.1f %10.1f %10.1f\n", name, b.fwd, b.fwdbwd, b.cpu_fwd,
              b.cpu_fwdbwd);
}
void print_ratio(const char* name, const Best& a, const Best& b) {
  std::printf("%-30s %9.3fx %9.3fx %9.3fx %9.3fx\n", name, a.fwd / b.fwd, a.fwdbwd / b.fwdbwd,
              a.cpu_fwd / b.cpu_fwd, a.cpu_fwdbwd / b.cpu_fwdbwd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 1 && argc != 4) bench::bad_option(kProg, "usage: bench_flex [B T REPS]");
  const int64_t B = argc == 4 ? bench::whole_int(kProg, "B", argv[1], 1, 4096) : 8;
  const int64_t T = argc == 4 ? bench::whole_int(kProg, "T", argv[2], 1, 65536) : 1024;
  const int reps = argc == 4 ? int(bench::whole_int(kProg, "REPS", argv[3], 1, 1000)) : 7;
  double load0 = 0, load1 = 0;
  const std::string before = bench::load_average(load0);

  manual_seed(123);
  const Tensor qkv = randn({B, T, 3, kHeads, kHeadDim}).permute({2, 0, 3, 1, 4});
  Tensor q = qkv[0].detach(), k = qkv[1].detach(), v = qkv[2].detach();
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  Tensor* const leaves[3] = {&q, &k, &v};
  const auto fused = [&] { return scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true); };
  const auto flex = [&] {
    const BlockMask bm = create_block_mask(causal_mask(), std::nullopt, std::nullopt, T, T);
    return flex_attention(q, k, v, nullptr, bm);
  };
  const BlockMask bm = create_block_mask(causal_mask(), std::nullopt, std::nullopt, T, T);
  const auto flex_made = [&] { return flex_attention(q, k, v, nullptr, bm); };
  Best best_fused, best_flex, best_made;
  double best_mask = INFINITY;
  for (int r = 0; r < reps; ++r) {
    time_once(fused, leaves, best_fused);
    time_once(flex, leaves, best_flex);
    time_once(flex_made, leaves, best_made);
    const auto t0 = std::chrono::steady_clock::now();
    const BlockMask made = create_block_mask(causal_mask(), std::nullopt, std::nullopt, T, T);
    best_mask = std::min(best_mask, ms_since(t0));
  }
  const std::string after = bench::load_average(load1);

  std::printf("flex vs fused causal attention: q, k, v (%lld, %lld, %lld, %lld), best of %d\n",
              (long long)B, (long long)kHeads, (long long)T, (long long)kHeadDim, reps);
  std::printf("cpu: %s; path %s, %d thread(s); load average before %s, after %s\n",
              bench::cpu_model().c_str(), kernels::active_isa().c_str(), num_threads(),
              before.c_str(), after.c_str());
  std::printf("%s\n", bm.to_string().c_str());
  std::printf("%-30s %10s %10s %10s %10s\n", "(ms; cpu = all threads)", "fwd", "fwd+bwd", "cpu fwd",
              "cpu f+b");
  print_row("fused causal (is_causal)", best_fused);
  print_row("flex causal (+ block mask)", best_flex);
  print_row("flex causal (mask made once)", best_made);
  std::printf("%-30s %10.1f\n", "create_block_mask alone", best_mask);
  print_ratio("flex (+ block mask) / fused", best_flex, best_fused);
  print_ratio("flex (made once) / fused", best_made, best_fused);
  return 0;
}
