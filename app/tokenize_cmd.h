// §2.5 command line: `tapegrad tokenize` and `tapegrad bpe-train` (app/main.cpp dispatches to
// these; data/tg-tokenize is a stand-alone driver until then).
//
//   tapegrad tokenize [--encoding gpt2 | --tokenizer FILE] [--decode] [--ordinary] [FILE|-]
//   tapegrad bpe-train --vocab-size N -o FILE [--special TOKEN]... [--format tapegrad|tiktoken]
//   TEXT
//
// Each command is a table (core/options.h), so their options follow every tapegrad command's
// convention. argv[0] is the command name ("tokenize"); it is skipped. Every error is one line on
// stderr and a non-zero exit (2: usage, a cli::UsageError; 1: input or file problems). Each
// option at most once (--special may repeat, with distinct tokens).
//
// Not here: batch or parallel tokenization, JSON output, other encodings than gpt2.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/options.h"

namespace tg::data {

// The parsed command lines (the parsers throw cli::UsageError; tests and fuzz/ call them).
struct TokenizeArgs {
  std::string encoding, tokenizer_file, input;  // input "" or "-": stdin
  bool decode = false, ordinary = false, help = false;
};
struct BpeTrainArgs {
  int64_t vocab_size = -1;
  std::string output, input, format = "tapegrad";
  std::vector<std::string> specials;
  bool help = false;
};
TokenizeArgs parse_tokenize_args(int argc, char** argv);
BpeTrainArgs parse_bpe_train_args(int argc, char** argv);
const cli::Command<TokenizeArgs>& tokenize_command();
const cli::Command<BpeTrainArgs>& bpe_train_command();

// Texts read by tokenize and bpe-train (files or stdin) beyond this are refused.
inline constexpr unsigned long long kMaxInputBytes = 1ull << 30;

int tokenize_main(int argc, char** argv);
int bpe_train_main(int argc, char** argv);

// The same with explicit streams, for tests.
int tokenize_main(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);
int bpe_train_main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace tg::data
