// The command-line option parsers of train, generate, chapter3, tokenize and bpe-train on any argv
// (the input split at NUL bytes). Every refusal must be a UsageError; what parses must pass (or be
// refused by) check_options without a crash.
#include <exception>

#include "app/cli_options.h"
#include "app/tokenize_cmd.h"
#include "fuzz/fuzz.h"
#include "train/train_options.h"

using namespace tg;

namespace {

// Runs one parser; a refusal must be a UsageError, or for train's check_options a TrainError
// (anything else escapes: a finding).
template <class Parse>
void refused_only_as_usage(Parse parse, bool train_error_too = false) {
  try {
    parse();
  } catch (const cli::UsageError&) {
  } catch (const train::TrainError&) {
    if (!train_error_too) throw;
  }
}

}  // namespace

TG_FUZZ_ENTRY(cli) {
  std::vector<std::string> args =
      fuzz::split_nul(std::string_view(reinterpret_cast<const char*>(data), size));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("cmd"));
  for (std::string& a : args) argv.push_back(a.data());
  const int argc = int(argv.size());
  char** av = argv.data();
  refused_only_as_usage(
      [&] {
        bool help = false;
        const train::TrainOptions o = cli::parse_train_args(argc, av, help);
        if (!help) train::check_options(o);
      },
      true);
  refused_only_as_usage([&] { (void)cli::parse_generate_args(argc, av); });
  refused_only_as_usage([&] { (void)cli::parse_chapter3_args(argc, av); });
  refused_only_as_usage([&] { (void)data::parse_tokenize_args(argc, av); });
  refused_only_as_usage([&] { (void)data::parse_bpe_train_args(argc, av); });
  return 0;
}
