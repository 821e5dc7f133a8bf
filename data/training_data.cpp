// The book's data preparation for chapter 5's training (training_data.h).
#include "data/training_data.h"

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "data/bpe_train.h"

namespace tg::data {

namespace {

// Byte offset of code point `n` (Python's len() counts code points, not bytes).
size_t utf8_offset_of_char(const std::string& s, size_t n) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (chars == n) return i;
      ++chars;
    }
  }
  return s.size();
}
size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// One split's token ids.
std::vector<int64_t> encode_split(const Tokenizer& tokenizer, const std::string& txt,
                                  const char* which) {
  std::vector<int> ids;
  try {
    ids = tokenizer.encode(txt, SpecialSet::Of({"<|endoftext|>"}));
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(which) + " text does not tokenize: " + e.what());
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// GPTDatasetV1 over one split, windows and stride of T tokens.
std::shared_ptr<const GPTDatasetV1> make_dataset(std::vector<int64_t> ids, const char* which,
                                                 int64_t T, const std::string& text_path) {
  if (int64_t(ids.size()) < T + 1)
    throw std::runtime_error("text too short: the " + std::string(which) + " split of '" +
                             text_path + "' has " + std::to_string(ids.size()) +
                             " tokens, one window of context " + std::to_string(T) + " needs " +
                             std::to_string(T + 1) + " (use a longer text or a smaller --context)");
  return std::make_shared<const GPTDatasetV1>(std::move(ids), T, T);
}

}  // namespace

TextSplits split_train_val(const std::string& text_data) {
  const size_t split_idx = size_t(0.90 * double(utf8_length(text_data)));
  const size_t split_byte = utf8_offset_of_char(text_data, split_idx);
  return {text_data.substr(0, split_byte), text_data.substr(split_byte)};
}

std::unique_ptr<Tokenizer> make_training_tokenizer(const std::string& spec,
                                                   const std::string& train_text,
                                                   const std::string& text_path,
                                                   std::ostream& err) {
  if (spec == "gpt2") {
    try {
      return std::make_unique<Tokenizer>(Tokenizer::gpt2());
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());
    }
  }
  if (spec.rfind("bpe:", 0) != 0)
    throw std::runtime_error("unknown tokenizer '" + spec + "' (known: gpt2, bpe:N)");
  const std::optional<int> v = bpe_vocab_size(spec);
  if (!v)
    throw std::runtime_error("bad tokenizer '" + spec + "': bpe:N needs " + bpe_vocab_range());
  BpeTrainStats st;
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(bpe_train(train_text, *v, {"<|endoftext|>"}, &st));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(text_path + ": " + e.what());
  }
  if (256 + st.merges < size_t(*v))
    err << "warning: the training text of " << text_path << " ran out of pairs; tokenizer " << spec
        << " has " << 256 + st.merges << " tokens, not " << *v << "\n";
  return tok;
}

SplitIds encode_splits(const Tokenizer& tokenizer, const TextSplits& splits) {
  return {encode_split(tokenizer, splits.train, "training"),
          encode_split(tokenizer, splits.val, "validation")};
}

TrainValLoaders create_train_val_loaders(SplitIds ids, int64_t context_length, int64_t batch_size,
                                         Generator& gen, const std::string& text_path) {
  const int64_t T = context_length;
  TrainValLoaders loaders{
      DataLoader(make_dataset(std::move(ids.train), "training", T, text_path), batch_size,
                 /*shuffle=*/true, /*drop_last=*/true, gen),
      DataLoader(make_dataset(std::move(ids.val), "validation", T, text_path), batch_size,
                 /*shuffle=*/false, /*drop_last=*/false, gen)};
  if (loaders.train.size() == 0)
    throw std::runtime_error("text too short: " + std::to_string(loaders.train.dataset().size()) +
                             " training windows of " + std::to_string(T) +
                             " tokens, fewer than one batch of " + std::to_string(batch_size));
  return loaders;
}

}  // namespace tg::data
