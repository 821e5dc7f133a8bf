// bench_train's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table. The attention routes are
// nn::kAttentionRoutes, named nowhere else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "nn/gpt.h"

namespace bench_train {

// "fused,book": every attention route, --attention's default.
inline std::string all_routes() {
  std::string s;
  for (const char* r : tg::nn::kAttentionRoutes) s += std::string(s.empty() ? "" : ",") + r;
  return s;
}

// --precision's choices, ours and PyTorch 2's alike (PyTorch 1.13 runs fp32 only).
inline const std::vector<std::string>& precisions() {
  static const std::vector<std::string> v = {"fp32", "bf16", "bf16-pure"};
  return v;
}

// The command line. --child NAME STEPS ROUTE PRECISION PAD (internal, first) runs one measurement
// in this process instead (see run_child).
struct Options {
  bool json = false, no_torch = false;
  int64_t threads = 2, steps_tiny = 20, steps_124m = 3, reps = 3;
  int64_t pad_vocab = 1;  // > 1: ours also with out_head padded to a multiple of it
  std::string only_list = "tiny,gpt2-124m", routes_list = all_routes(), precision_list = "fp32";
  std::vector<std::string> only, routes, precision;
  std::string isa;  // empty: the fastest path this machine has
  std::string svg;  // --svg FILE: tokens/s per side and config, beside the bound
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_train [options]",
      "Training throughput (tokens/s) and peak RSS of a full step, beside PyTorch 1.13 and 2.x\n"
      "on the same batches, and the step's bound (GEMMs at the FMA probe, optimizer and\n"
      "embeddings at the copy probe's bandwidth).",
      {
          cli::flag("json", &Options::json, "JSON instead of the table"),
          cli::integer("threads", &Options::threads, 1, 1024, "N", "threads of every side"),
          cli::integer("steps-tiny", &Options::steps_tiny, 1, 100000, "N", "timed steps of tiny"),
          cli::integer("steps-124m", &Options::steps_124m, 1, 100000, "N",
                       "timed steps of the gpt2-124m configs"),
          cli::integer("reps", &Options::reps, 1, 100, "N", "runs per side; the best counts"),
          cli::flag("no-torch", &Options::no_torch, "no PyTorch peers"),
          cli::text("only", &Options::only_list, "LIST",
                    "configs among tiny, gpt2-124m, gpt2-124m-1024"),
          cli::text("attention", &Options::routes_list, "LIST",
                    "our attention routes, comma-separated"),
          cli::text("precision", &Options::precision_list, "LIST",
                    "fp32, bf16, bf16-pure (comma-separated): bf16 is torch.autocast's rule\n"
                    "(GEMMs and attention in bf16, float32 weights and AdamW); bf16-pure the\n"
                    "model and AdamW in bf16 (model.to(torch.bfloat16)); PyTorch 2 alike"),
          cli::integer("pad-vocab", &Options::pad_vocab, 1, tg::nn::kMaxPadVocab, "N",
                       "ours also with out_head's rows padded to a multiple of N (tapegrad\n"
                       "train --pad-vocab N; 64: 50257 -> 50304), rows labelled 'padN'\n"
                       "beside the unpadded ones; 1: unpadded only"),
          cli::text("isa", &Options::isa, "NAME", "our kernel path (default: the fastest)"),
          cli::path("svg", &Options::svg, "FILE", "also a chart, tokens/s per side and config"),
      }};
  return c;
}

}  // namespace bench_train
