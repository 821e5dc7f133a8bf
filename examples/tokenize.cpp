// §2.5's byte pair encoding: GPT-2's tokenizer (tiktoken's "gpt2", id for id) on the book's
// sentence with an <|endoftext|> between two texts, and back. Needs GPT-2's encoder.json and
// vocab.bpe: `make gpt2` fetches them, TAPEGRAD_GPT2_DIR points elsewhere.
//
// With tapegrad installed (make install PREFIX=...):
//   c++ -std=c++20 tokenize.cpp $(pkg-config --cflags --libs tapegrad)
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"

using namespace tg;

int main() try {
  const data::Tokenizer tokenizer = data::Tokenizer::gpt2();  // throws if the files are missing
  const std::string text =
      "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace.";
  const std::vector<int> integers =
      tokenizer.encode(text, /*allowed_special=*/data::SpecialSet::Of({"<|endoftext|>"}));
  std::cout << "[";
  for (size_t i = 0; i < integers.size(); ++i) std::cout << (i ? ", " : "") << integers[i];
  std::cout << "]\n" << tokenizer.decode(integers) << "\n";
  return 0;
} catch (const std::exception& e) {  // e.g. no encoder.json: one line, not an abort
  std::cerr << "tokenize: " << e.what() << "\n";
  return 1;
}
