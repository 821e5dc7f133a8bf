// bench_attention --notebook's options: its table (core/options.h), apart from the benchmark so
// that tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"

namespace bench_notebook_mha {

struct Options {
  bool json = false, no_torch = false;
  std::string json_file;      // --json-file: the --json output there too, beside the table
  std::string svg;            // --svg: the notebook's bar charts
  std::string notebook_file;  // the .ipynb whose class cells PyTorch's side runs
  int64_t reps = 3;
  // The notebook's sizes (its cell 3) and heads (its instantiations).
  int64_t batch = 8, context_len = 1024, embed_dim = 768, num_heads = 12;
  std::string threads_list = "1,2", only_list;
  std::vector<int> threads;
  std::vector<std::string> only;  // keys of the implementations to run (empty: all)
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_attention --notebook [options]",
      "The bonus notebook's multi-head attention implementations (its sections 10-11), forward\n"
      "and forward+backward, ours beside PyTorch 2 running the notebook's own classes, each\n"
      "configuration in a child process. The default sizes are the notebook's.",
      {
          cli::flag("json", &Options::json, "JSON instead of the table"),
          cli::integer("reps", &Options::reps, 1, 10000, "N", "best of N runs"),
          cli::text("threads", &Options::threads_list, "LIST", "thread counts, comma-separated"),
          cli::integer("batch", &Options::batch, 1, 4096, "N", "batch size"),
          cli::integer("context-len", &Options::context_len, 1, 65536, "N", "tokens per sequence"),
          cli::integer("embed-dim", &Options::embed_dim, 1, 65536, "N", "embedding dimension"),
          cli::integer("num-heads", &Options::num_heads, 1, 1024, "N", "attention heads"),
          cli::text("only", &Options::only_list, "LIST",
                    "only these: wrapper, ch03, combined-qkv, einsum, sdpa, sdpa-no-flash, class, "
                    "class-no-weights, flex"),
          cli::path("notebook-file", &Options::notebook_file, "FILE",
                    "mha-implementations.ipynb, for PyTorch's side (see bench/README.md)"),
          cli::flag("no-torch", &Options::no_torch, "no PyTorch peer (needs no notebook)"),
          cli::path("json-file", &Options::json_file, "FILE",
                    "also the --json output there (written atomically)"),
          cli::path("svg", &Options::svg, "FILE", "also the notebook's bar charts"),
      }};
  return c;
}

// The mode's entry point (bench/bench_notebook_mha.cpp), for bench_attention's main: argv without
// "--notebook"; `self` is bench_attention's own path, which its children run.
int notebook_main(int argc, char** argv, const std::string& self);

}  // namespace bench_notebook_mha
