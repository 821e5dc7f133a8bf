// tapegrad: the command line. Each subcommand is one function; `tapegrad help` lists them.
#include <csignal>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "app/commands.h"
#include "app/tokenize_cmd.h"
#include "core/tensor.h"
#include "core/text.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand's name
};

const Command kCommands[] = {
    {"chapter3", "replays the chapter-3 notebook's cells, printing what PyTorch prints",
     tg::cli::chapter3_main},
    {"train", "pretrains a GPT on a text (chapter 5), with checkpoints and a loss plot",
     tg::cli::train_main},
    {"generate", "continues a prompt from a trained checkpoint (greedy, top-k, temperature)",
     tg::cli::generate_main},
    {"tokenize", "GPT-2 BPE (as tiktoken) or a trained vocabulary: text to ids and back",
     tg::data::tokenize_main},
    {"bpe-train", "trains a byte-level BPE vocabulary on a text", tg::data::bpe_train_main},
};

int usage(std::ostream& os) {
  os << "usage: tapegrad <command> [options]\n\ncommands:\n";
  for (const Command& c : kCommands)
    os << "  " << c.name << std::string(12 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\n`tapegrad <command> --help` describes a command's options.\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe (`tapegrad tokenize FILE | head`) is a failed write, reported by the command,
  // not a silent death: train saves its checkpoint first.
  std::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) return usage(std::cerr);
  const std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    usage(std::cout);
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "tapegrad help: cannot write the output to stdout (disk full or pipe closed?)\n";
      return 1;
    }
    return 0;
  }
  for (const Command& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      // The memory settings change no number, so nothing reads them before a tensor of 1 MiB:
      // checked here, a bad one stops every command. train checks them itself, rank by rank.
      if (cmd != "train") {
        tg::huge_pages_enabled();
        tg::block_cache_limit_mb();
      }
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::cerr << "tapegrad " << cmd << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "tapegrad: unknown command '" << tg::show_bytes(cmd) << "' (try `tapegrad help`)\n";
  return 2;
}
