// The machine's two ceilings, measured in the run that uses them: the active kernel path's FMA
// probe (GFLOP/s) and a copy probe (GB/s of memory traffic), each on `threads` threads at once.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One run of the active path's FMA probe on `threads` threads at once; returns its flops. A team,
// not parallel_for: its members run at the same time (parallel_for may hand both tasks to a
// thread that is already awake, which measured the 2-thread peak at ~1.3 cores). bf16: the
// path's bf16 probe (vdpbf16ps), or its FMA probe where it widens bf16 to float32.
inline double probe_once(int threads, int64_t iters, bool bf16 = false) {
  const tg::kernels::KernelTable& t = tg::kernels::active_table();
  const auto probe = bf16 && t.bf16_probe != nullptr ? t.bf16_probe : t.fma_probe;
  std::vector<double> flops(size_t(threads), 0);
  tg::parallel_team(threads, [&](int tid, int, tg::Barrier& barrier) {
    barrier.arrive_and_wait();
    flops[size_t(tid)] = probe(iters);
  });
  double total = 0;
  for (double f : flops) total += f;
  return total;
}

// FMA peak (bf16: the bf16 probe's) of the active path on `threads` threads, in GFLOP/s (best
// of 9).
inline double probe_peak(int threads, bool bf16 = false) {
  const int64_t iters = 4'000'000;
  double best = 1e30, flops = 0;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    flops = probe_once(threads, iters, bf16);
    best = std::min(best, seconds_since(t0));
  }
  return flops / best * 1e-9;
}

// Memory bandwidth in GB/s: each of `threads` threads copies its own 64 MiB buffer (far beyond
// any cache) with memcpy, counted as bytes read plus bytes written; best of 5.
inline double copy_bandwidth(int threads) {
  const size_t n = size_t(64) << 20;
  std::vector<std::vector<char>> src(static_cast<size_t>(threads)),
      dst(static_cast<size_t>(threads));
  tg::parallel_team(threads, [&](int tid, int, tg::Barrier&) {  // first touch on its thread
    src[size_t(tid)].assign(n, char(tid + 1));
    dst[size_t(tid)].assign(n, 0);
  });
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    tg::parallel_team(threads, [&](int tid, int, tg::Barrier& barrier) {
      barrier.arrive_and_wait();
      std::memcpy(dst[size_t(tid)].data(), src[size_t(tid)].data(), n);
    });
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(n) * threads / best * 1e-9;
}

}  // namespace bench
