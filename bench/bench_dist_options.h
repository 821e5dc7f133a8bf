// bench_dist's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"

namespace bench_dist {

struct Options {
  bool json = false;
  int64_t steps_tiny = 10, steps_124m = 3, reps = 3;
  std::string only_list = "tiny,gpt2-124m", setups_list = "1x2,sm,tcp,torch1,torch2";
  std::vector<std::string> only, setups;  // the lists read
  std::string torch1, torch2;             // the Pythons with torch; empty: that peer is left out
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_dist [options]",
      "Data-parallel training throughput (tokens/s) at a global batch of 8: one process x 2\n"
      "threads against 2 ranks x 1 thread under mpirun (shared memory, TCP loopback), beside\n"
      "PyTorch 1.13 and 2.x DistributedDataParallel on gloo.",
      {
          cli::flag("json", &Options::json, "JSON rows instead of the table"),
          cli::integer("reps", &Options::reps, 1, 100000, "N", "runs per setup; the best counts"),
          cli::integer("steps-tiny", &Options::steps_tiny, 1, 100000, "N", "timed steps of tiny"),
          cli::integer("steps-124m", &Options::steps_124m, 1, 100000, "N",
                       "timed steps of gpt2-124m"),
          cli::text("only", &Options::only_list, "LIST", "configs, comma-separated"),
          cli::text("setups", &Options::setups_list, "LIST",
                    "setups, comma-separated (1x2: one process; sm, tcp: 2 ranks over\n"
                    "shared memory, over TCP; torch1, torch2: PyTorch DDP)"),
      }};
  return c;
}

}  // namespace bench_dist
