// bench_matmul's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"

namespace bench_matmul {

struct Options {
  bool json = false, quick = false, no_torch = false;
  std::string torch_python;  // empty: PyTorch 2 where bench/torch_peer.h finds it, else 1.13
  std::string isa;           // empty: every available path
  std::string threads_list = "1,2";
  std::vector<int> threads{1, 2};
  int64_t reps = 5;
  std::string shapes = "all", blocking, svg;
  std::string dtype = "f32";  // f32, bf16 or f32,bf16
  std::string child_isa;      // --path-child ISA THREADS: measure one path in this process
  int child_threads = 0;
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_matmul [options]",
      "sgemm GFLOP/s per kernel path and thread count, beside OpenBLAS's cblas_sgemm and oneDNN's\n"
      "dnnl_sgemm (each peer on the kernels of the path it faces) and the path's FMA probe; with\n"
      "--dtype bf16, the bf16 GEMM beside oneDNN's dnnl_gemm_bf16bf16f32 and the bf16 probe.\n"
      "PyTorch's torch.matmul on the same operands is a column of its own.",
      {
          cli::flag("json", &Options::json, "JSON rows instead of the table"),
          cli::flag("quick", &Options::quick, "no 2048 or 50257 shapes, and --reps 3 unless given"),
          cli::text("isa", &Options::isa, "NAME",
                    "one kernel path (default: every one this CPU has)"),
          cli::text("threads", &Options::threads_list, "LIST", "thread counts, comma-separated"),
          cli::integer("reps", &Options::reps, 1, 10000, "N", "best of at least N runs"),
          cli::choice("shapes", &Options::shapes, {"square", "gpt2", "tiny", "all"},
                      "which shapes"),
          cli::choice("dtype", &Options::dtype, {"f32", "bf16", "f32,bf16"},
                      "rows in float32, in bfloat16 (A and B bf16, C float32), or both"),
          cli::text("blocking", &Options::blocking, "MC,KC,NC",
                    "tuning: every path's cache blocking (as TAPEGRAD_GEMM_BLOCKING)"),
          cli::path("svg", &Options::svg, "FILE", "also a chart of every row (written atomically)"),
          cli::flag("no-torch", &Options::no_torch, "no PyTorch column"),
          cli::path("torch-python", &Options::torch_python, "PATH", "the PyTorch peer's Python")
              .shown_default("PyTorch 2's (TAPEGRAD_TORCH2_PYTHON), else /usr/bin/python3"),
      }};
  return c;
}

}  // namespace bench_matmul
