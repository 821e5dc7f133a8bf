// §5.1.3 (calculating the training and validation set losses): the book's data preparation for
// train_model_simple. The text is split 90/10 by characters; the tokenizer is GPT-2's or a BPE
// trained on the training split; each split becomes a GPTDatasetV1 of windows of context_length
// tokens at stride context_length, read by two DataLoaders: the training one shuffles and drops
// the last partial batch, the validation one keeps the order.
// Python reference: ch05/01_main-chapter-code/ch05.ipynb (train_ratio, create_dataloader_v1 twice).
//
// Every refusal is a std::runtime_error of one line naming the text's file (`text_path`).
// Not here: reading the file, a resumed run's tokenizer from its checkpoint, sharing the ids
// between processes (train/session.cpp does those).
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/bpe_tokenizer.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer_spec.h"

namespace tg::data {

// train_ratio = 0.90; split_idx = int(train_ratio * len(text_data)), where len counts code
// points, as Python's does; train = text_data[:split_idx], val = text_data[split_idx:].
struct TextSplits {
  std::string train, val;
};
TextSplits split_train_val(const std::string& text_data);

// The tokenizer `spec` names: "gpt2", or "bpe:N" (256 <= N <= 100000) trained on the training
// split only, so that the validation text stays unseen (bpe:256 is plain bytes). A text that runs
// out of pairs first gets fewer tokens, said on `err` as bpe-train says it.
std::unique_ptr<Tokenizer> make_training_tokenizer(const std::string& spec,
                                                   const std::string& train_text,
                                                   const std::string& text_path, std::ostream& err);

// Each split's token ids, "<|endoftext|>" allowed in the text.
struct SplitIds {
  std::vector<int64_t> train, val;
};
SplitIds encode_splits(const Tokenizer& tokenizer, const TextSplits& splits);

// The two loaders. Both draw from `gen` as torch's do from the global generator; constructing
// them draws nothing. Refuses a split without one window, and a training split without one batch.
struct TrainValLoaders {
  DataLoader train, val;
};
TrainValLoaders create_train_val_loaders(SplitIds ids, int64_t context_length, int64_t batch_size,
                                         Generator& gen, const std::string& text_path);

}  // namespace tg::data
