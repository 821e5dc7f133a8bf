// The command lines of `tapegrad train`, `generate` and `chapter3`: a table each (core/options.h;
// train's is train_command() in train/train_options.h), parsed and range-checked without running
// anything, so tests and the fuzzer in fuzz/ can call them. Every refusal is a cli::UsageError
// naming the flag: the command prints it as one line and exits with status 2.
#pragma once
#include <cstdint>
#include <string>

#include "core/options.h"
#include "train/train_options.h"

namespace tg::cli {

struct GenerateOptions {
  std::string checkpoint, prompt = "Every effort moves you", logits;
  std::string gpt2_dir;            // --gpt2 DIR: Hugging Face's GPT-2 files instead of a checkpoint
  std::string precision = "fp32";  // fp32 | bf16: the model (weights, KV cache) in bfloat16
  int64_t max_new_tokens = 50, top_k = 0, seed = 123;
  double temperature = 0;
  int threads = 0;  // 0: leave the pool as it is
  bool eos = false, help = false;
  bool stream = false, no_cache = false;
};

// Upper bound of --max-new-tokens (a huge count would run for ever silently).
inline constexpr int64_t kMaxNewTokens = 100000;
// --temperature is 0 (greedy) or in this range: below it logits / T overflow to inf.
inline constexpr double kMinTemperature = 1e-3, kMaxTemperature = 1e3;

// argv[0] is the subcommand's name. `help` is set for -h/--help (nothing else is checked then).
train::TrainOptions parse_train_args(int argc, char** argv, bool& help);
GenerateOptions parse_generate_args(int argc, char** argv);
const Command<GenerateOptions>& generate_command();

// tapegrad chapter3 [--notebook ch03|mha] [--cell N]: the notebooks' code cells In [2]..In [38]
// (ch03) and In [2]..In [8] (mha).
inline constexpr int kChapter3FirstCell = 2, kChapter3LastCell = 38, kMhaLastCell = 8;
struct Chapter3Options {
  int only = 0;  // the one cell to print; 0: every cell
  std::string notebook = "ch03";
  bool help = false;
};
Chapter3Options parse_chapter3_args(int argc, char** argv);
const Command<Chapter3Options>& chapter3_command();

}  // namespace tg::cli
