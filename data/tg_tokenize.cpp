// data/tg-tokenize: a stand-alone driver for the tokenizer commands until they join `tapegrad`.
//   tg-tokenize tokenize ...   |   tg-tokenize bpe-train ...
#include <cstring>
#include <iostream>

#include "data/cli.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "tokenize") == 0)
    return tg::data::tokenize_main(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "bpe-train") == 0)
    return tg::data::bpe_train_main(argc - 1, argv + 1);
  std::cerr << "usage: tg-tokenize tokenize|bpe-train [options] (see --help of each)\n";
  return 2;
}
