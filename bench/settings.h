// The TAPEGRAD_* settings a benchmark runs under (TAPEGRAD_ISA, TAPEGRAD_THREADS,
// TAPEGRAD_GEMM_BLOCKING, TAPEGRAD_HUGE_PAGES, TAPEGRAD_BLOCK_CACHE_MB), checked once in the parent
// before anything is measured: a bad one is one line naming it and exit status 2, as a bad option
// is, never a child's abort.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/tensor.h"
#include "core/threadpool.h"

namespace bench {

inline void check_settings(const char* prog) {
  try {
    tg::kernels::gemm_blocking_for(tg::kernels::active_table());
    tg::num_threads();
    tg::huge_pages_enabled();
    tg::block_cache_limit_mb();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    std::exit(2);
  }
}

}  // namespace bench
