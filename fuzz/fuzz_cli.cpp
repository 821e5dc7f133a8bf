// The command-line option parsers of train, generate, chapter3, tokenize and bpe-train on any argv
// (the input split at NUL bytes). Every refusal must be a UsageError; what parses must pass (or be
// refused by) check_options without a crash.
#include <exception>

#include "data/cli.h"
#include "fuzz/fuzz.h"
#include "train/cli_options.h"
#include "train/train_options.h"

using namespace tg;

TG_FUZZ_ENTRY(cli) {
  std::vector<std::string> args =
      fuzz::split_nul(std::string_view(reinterpret_cast<const char*>(data), size));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("cmd"));
  for (std::string& a : args) argv.push_back(a.data());
  const int argc = int(argv.size());
  try {
    bool help = false;
    const train::TrainOptions o = cli::parse_train_args(argc, argv.data(), help);
    if (!help) train::check_options(o);
  } catch (const train::TrainError&) {
  }
  try {
    (void)cli::parse_generate_args(argc, argv.data());
  } catch (const train::UsageError&) {
  }
  try {
    (void)cli::parse_chapter3_args(argc, argv.data());
  } catch (const train::UsageError&) {
  }
  try {
    (void)data::parse_tokenize_args(argc, argv.data());
  } catch (const data::UsageError&) {
  }
  try {
    (void)data::parse_bpe_train_args(argc, argv.data());
  } catch (const data::UsageError&) {
  }
  return 0;
}
