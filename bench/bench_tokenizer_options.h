// bench_tokenizer's options: its table (core/options.h), apart from the benchmark so that
// tests/test_bench_errors.cpp checks --help against the same table.
#pragma once
#include "core/options.h"

namespace bench_tokenizer {

struct Options {
  bool json = false, no_tiktoken = false;
  double mb = 10;  // bytes of each text to encode, in MB
};

inline const tg::cli::Command<Options>& command() {
  namespace cli = tg::cli;
  static const cli::Command<Options> c{
      "bench_tokenizer [options]",
      "GPT-2 encoding speed (MB per CPU second, one thread) beside npm tiktoken on the same\n"
      "text, and BPE training time for vocabularies of 1024 and 4096 on 1 MB.",
      {
          cli::flag("json", &Options::json, "JSON instead of the table"),
          cli::real("mb", &Options::mb, 0.001, 1000, "MB", "bytes of each text to encode"),
          cli::flag("no-tiktoken", &Options::no_tiktoken, "no npm tiktoken peer"),
      }};
  return c;
}

}  // namespace bench_tokenizer
