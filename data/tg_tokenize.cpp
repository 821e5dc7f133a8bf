// data/tg-tokenize: a stand-alone driver for the tokenizer commands until they join `tapegrad`.
//   tg-tokenize tokenize ...   |   tg-tokenize bpe-train ...   (each takes --help)
#include <iostream>
#include <string>

#include "core/text.h"
#include "data/cli.h"

namespace {

constexpr char kUsage[] =
    "usage: tg-tokenize tokenize|bpe-train [options]\n"
    "  the same commands as `tapegrad tokenize` and `tapegrad bpe-train`; see --help of each\n";

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc >= 2 ? argv[1] : "";
  if (cmd == "tokenize") return tg::data::tokenize_main(argc - 1, argv + 1);
  if (cmd == "bpe-train") return tg::data::bpe_train_main(argc - 1, argv + 1);
  if (cmd == "-h" || cmd == "--help") {
    std::cout << kUsage << std::flush;
    return std::cout ? 0 : 1;
  }
  if (argc < 2)
    std::cerr << kUsage;
  else
    std::cerr << "tg-tokenize: unknown command '" << tg::show_bytes(cmd) << "' (try --help)\n";
  return 2;
}
