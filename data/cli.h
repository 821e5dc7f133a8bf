// §2.5 command line: `tapegrad tokenize` and `tapegrad bpe-train` (train/main.cpp dispatches to
// these; data/tg-tokenize is a stand-alone driver until then).
//
//   tapegrad tokenize [--encoding gpt2 | --tokenizer FILE] [--decode] [--ordinary] [FILE|-]
//   tapegrad bpe-train --vocab-size N -o FILE [--special TOKEN]... [--format tapegrad|tiktoken]
//   TEXT
//
// argv[0] is the command name ("tokenize"); it is skipped. Every error is one line on stderr and
// a non-zero exit (2: usage, 1: input or file problems).
//
// Not here: batch or parallel tokenization, JSON output, other encodings than gpt2.
#pragma once
#include <iosfwd>

namespace tg::data {

int tokenize_main(int argc, char** argv);
int bpe_train_main(int argc, char** argv);

// The same with explicit streams, for tests.
int tokenize_main(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);
int bpe_train_main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace tg::data
