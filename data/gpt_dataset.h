// §2.6 (data sampling with a sliding window): GPTDatasetV1 and create_dataloader_v1, with
// PyTorch's DataLoader order (RandomSampler + BatchSampler, docs/torch_rng.md §6).
// Python reference: pkg/llms_from_scratch/ch02.py (GPTDatasetV1, create_dataloader_v1).
//
// Batches are plain row-major std::vector<int64_t> of shape (batch_size, max_length), inputs and
// targets; the trainer wraps them in tensors.
//
// Not here: tensors, worker threads (num_workers is always 0), pinned memory, padding,
// DataLoader(generator=g)'s different draw pattern (the Generator passed here plays the role of
// torch's global generator), IterableDataset.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "data/bpe_tokenizer.h"

namespace tg::data {

class GPTDatasetV1 {
 public:
  // Windows start at i = 0, stride, 2*stride, ... while i < len(token_ids) - max_length;
  // input_ids = token_ids[i : i+max_length], target_ids = token_ids[i+1 : i+max_length+1].
  // Throws std::invalid_argument when not even one window fits (the message gives both counts).
  GPTDatasetV1(std::vector<int64_t> token_ids, int64_t max_length, int64_t stride);
  // The book's constructor: tokenizer.encode(txt, allowed_special={"<|endoftext|>"}).
  GPTDatasetV1(std::string_view txt, const Tokenizer& tokenizer, int64_t max_length,
               int64_t stride);

  int64_t size() const { return n_windows_; }  // __len__
  int64_t max_length() const { return max_length_; }
  int64_t stride() const { return stride_; }
  const std::vector<int64_t>& token_ids() const { return ids_; }
  // __getitem__: views of window idx (each max_length long).
  std::span<const int64_t> input_ids(int64_t idx) const;
  std::span<const int64_t> target_ids(int64_t idx) const;

 private:
  std::vector<int64_t> ids_;
  int64_t max_length_, stride_, n_windows_;
};

struct Batch {
  std::vector<int64_t> inputs;   // (batch_size, max_length), row-major
  std::vector<int64_t> targets;  // (batch_size, max_length)
  int64_t batch_size = 0, max_length = 0;
  std::vector<int64_t> indices;  // the dataset windows in this batch, in order
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const GPTDatasetV1> dataset, int64_t batch_size, bool shuffle,
             bool drop_last, Generator& generator = default_generator());

  int64_t size() const;  // len(loader): number of batches per epoch
  const GPTDatasetV1& dataset() const { return *dataset_; }

  // The epoch's window order, making at once the draws of iter() and its first next(): one W64
  // (_base_seed), and for shuffle one more that seeds randperm. For callers that keep the order,
  // as the trainer does to resume mid-epoch from a checkpoint.
  std::vector<int64_t> epoch_order() const;
  // Batch b (0 <= b < size()) of an epoch order: the consecutive slice order[b*batch_size, ...),
  // shorter at the end unless drop_last.
  Batch batch(const std::vector<int64_t>& order, int64_t b) const;

  // One epoch, like `for x, y in loader` after iter(loader).
  class Iterator {
   public:
    bool next(Batch& batch);  // false when the epoch is over

   private:
    friend class DataLoader;
    explicit Iterator(const DataLoader& loader);
    const DataLoader* loader_;
    std::vector<int64_t> order_;
    bool started_ = false;
    int64_t b_ = 0;  // the next batch
  };
  // Draws the epoch's base seed now, and the sampler's seed at the first next(), as torch does.
  Iterator iter() const { return Iterator(*this); }

 private:
  // The two halves of epoch_order, which Iterator makes at different times.
  void draw_base_seed() const;
  std::vector<int64_t> sampler_order() const;

  std::shared_ptr<const GPTDatasetV1> dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  Generator* generator_;
};

// The book's create_dataloader_v1 with its defaults (GPT-2 encoding by default).
DataLoader create_dataloader_v1(std::string_view txt, int64_t batch_size = 4,
                                int64_t max_length = 256, int64_t stride = 128, bool shuffle = true,
                                bool drop_last = true, const Tokenizer* tokenizer = nullptr,
                                Generator& generator = default_generator());

}  // namespace tg::data
