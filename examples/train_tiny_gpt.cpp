// Chapter 5's train_model_simple (§5.2) on a tiny GPT: a few epochs over a short text read byte by
// byte, printing the book's log every eval_freq steps and a greedy sample after each epoch. The
// loss falls from about ln(257) as the model learns the text.
//
// With tapegrad installed (make install PREFIX=...):
//   c++ -std=c++20 train_tiny_gpt.cpp $(pkg-config --cflags --libs tapegrad)
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/bpe_tokenizer.h"
#include "data/gpt_dataset.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/trainer.h"

using namespace tg;

int main() {
  std::string text_data;
  for (int i = 0; i < 40; ++i) text_data += "Every effort moves you. ";
  // One token per byte, plus GPT-2's <|endoftext|> (text_to_token_ids allows it).
  const data::Tokenizer tokenizer = data::Tokenizer::from_merges({}, {{"<|endoftext|>", 256}});

  // The book's 90/10 split, and windows of context_length tokens at every position (stride 1,
  // as §2.6 first shows it), so that the model sees the sentence from every starting point.
  const int64_t context_length = 16, stride = 1;
  std::vector<int64_t> ids;
  for (const int id : tokenizer.encode(text_data)) ids.push_back(id);
  const size_t split_idx = size_t(0.9 * double(ids.size()));
  auto windows = [&](size_t from, size_t to) {
    return std::make_shared<const data::GPTDatasetV1>(
        std::vector<int64_t>(ids.begin() + from, ids.begin() + to), context_length, stride);
  };
  const data::DataLoader train_loader(windows(0, split_idx), /*batch_size=*/8, /*shuffle=*/true,
                                      /*drop_last=*/true);
  const data::DataLoader val_loader(windows(split_idx, ids.size()), /*batch_size=*/8,
                                    /*shuffle=*/false, /*drop_last=*/false);

  manual_seed(123);
  nn::GPTConfig cfg;  // GPT_CONFIG_124M, made tiny
  cfg.vocab_size = tokenizer.n_vocab();
  cfg.context_length = context_length;
  cfg.emb_dim = 32;
  cfg.n_heads = 4;
  cfg.n_layers = 2;
  cfg.drop_rate = 0.0;
  nn::GPTModel model(cfg);
  train::AdamW optimizer(model, /*lr=*/4e-3, /*weight_decay=*/0.1);

  train::RunPosition pos;   // a fresh run: no steps yet
  train::TrainHooks hooks;  // nothing added: the book's loop as it is
  train::TrainLoop loop{std::cout, pos, hooks, /*sample_tokens=*/24};
  train::train_model_simple(model, train_loader, val_loader, optimizer, /*num_epochs=*/2,
                            /*eval_freq=*/20, /*eval_iter=*/1, "Every effort", tokenizer, loop);
  return 0;
}
