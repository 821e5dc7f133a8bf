// bench_attention's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/options.h"

namespace bench_attention {

struct Options {
  bool json = false, no_torch = false, no_modules = false;
  bool notebook = false;  // never read: main hands --notebook to bench_notebook_mha.cpp first
  std::string json_file;  // --json-file: the --json output there too, beside the table
  std::string svg;        // --svg: fwd+bwd ms per size, a chart
  int64_t reps = 3;
  std::string threads_list = "1,2", sizes_list = "8x256,2x1024,8x1024",
              memory_list = "1024,2048,4096", precision_list = "fp32";
  std::vector<int> threads;
  std::vector<std::string> precision;  // the list read: fp32, bf16
  std::vector<std::pair<int64_t, int64_t>> sizes;
  std::vector<int> memory_T;
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_attention [options]",
      "Chapter 3's attention at GPT-2 124M's sizes, forward and forward+backward, each\n"
      "configuration in a child process, beside PyTorch 1.13 and 2.x.",
      {
          cli::flag("json", &Options::json, "JSON instead of the table"),
          cli::integer("reps", &Options::reps, 1, 10000, "N", "best of N runs"),
          cli::text("threads", &Options::threads_list, "LIST", "thread counts, comma-separated"),
          cli::text("sizes", &Options::sizes_list, "BxT,...", "batch and context sizes"),
          cli::text("memory", &Options::memory_list, "T,...", "context sizes of the memory rows"),
          cli::text("precision", &Options::precision_list, "LIST",
                    "fp32 and/or bf16 (the attention core in bfloat16 beside PyTorch 2's bf16 "
                    "scaled_dot_product_attention), comma-separated"),
          cli::flag("no-torch", &Options::no_torch, "no PyTorch peers"),
          cli::flag("no-modules", &Options::no_modules, "the attention cores only"),
          cli::flag("notebook", &Options::notebook,
                    "the bonus notebook's comparison instead: bench_attention --notebook --help"),
          cli::path("json-file", &Options::json_file, "FILE",
                    "also the --json output there (written atomically)"),
          cli::path("svg", &Options::svg, "FILE", "also a chart, fwd+bwd ms per size"),
      }};
  return c;
}

}  // namespace bench_attention
