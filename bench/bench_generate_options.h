// bench_generate's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"

namespace bench_generate {

struct Options {
  bool json = false, no_torch = false;
  std::string models_list = "gpt2-124m,gpt2-medium", tokens_list = "256,1024", threads_list = "1,2";
  std::string precision_list = "fp32";
  int64_t reps = 3, uncached_max = 256;
  std::string torch_python;  // empty: PyTorch 2 where bench/torch_peer.h finds it, else 1.13
  std::vector<std::string> models, precision;  // the lists read
  std::vector<int> tokens, threads;
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_generate [options]",
      "Generation throughput (new tokens/s, batch 1, greedy) of GPT-2-shaped models with and\n"
      "without the KV cache, beside PyTorch's KV-cache GPT and the memory-bandwidth bound.",
      {
          cli::flag("json", &Options::json, "JSON instead of the table"),
          cli::text("models", &Options::models_list, "LIST", "models, comma-separated"),
          cli::text("tokens", &Options::tokens_list, "LIST", "new tokens per run, comma-separated"),
          cli::text("threads", &Options::threads_list, "LIST", "thread counts, comma-separated"),
          cli::text("precision", &Options::precision_list, "LIST",
                    "fp32, bf16 (the model and its KV cache in bfloat16, as generate\n"
                    "--precision bf16), comma-separated"),
          cli::integer("reps", &Options::reps, 1, 1000, "N", "best of N runs"),
          cli::integer("uncached-max", &Options::uncached_max, 1, 100000, "N",
                       "uncached generation up to N new tokens (gpt2-124m only)"),
          cli::flag("no-torch", &Options::no_torch, "no PyTorch peer"),
          cli::path("torch-python", &Options::torch_python, "PATH", "the peer's Python")
              .shown_default("PyTorch 2's (TAPEGRAD_TORCH2_PYTHON), else /usr/bin/python3"),
      }};
  return c;
}

}  // namespace bench_generate
