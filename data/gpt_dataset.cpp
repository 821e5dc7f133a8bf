// GPTDatasetV1 and the DataLoader order; see gpt_dataset.h.
#include "data/gpt_dataset.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tg::data {

GPTDatasetV1::GPTDatasetV1(std::vector<int64_t> token_ids, int64_t max_length, int64_t stride)
    : ids_(std::move(token_ids)), max_length_(max_length), stride_(stride) {
  if (max_length < 1)
    throw std::invalid_argument("GPTDatasetV1: max_length must be >= 1, got " +
                                std::to_string(max_length));
  if (stride < 1)
    throw std::invalid_argument("GPTDatasetV1: stride must be >= 1, got " + std::to_string(stride));
  const int64_t len = static_cast<int64_t>(ids_.size());
  // range(0, len - max_length, stride) has ceil((len - max_length) / stride) elements.
  if (len <= max_length)
    throw std::invalid_argument(
        "GPTDatasetV1: the text has " + std::to_string(len) +
        " tokens, but one window of max_length " + std::to_string(max_length) + " needs at least " +
        std::to_string(max_length + 1) + " (inputs plus the shifted target)");
  n_windows_ = (len - max_length + stride - 1) / stride;
}

namespace {
std::vector<int64_t> encode_for_dataset(std::string_view txt, const Tokenizer& tokenizer) {
  const std::vector<int> ids = tokenizer.encode(txt, SpecialSet::Of({"<|endoftext|>"}));
  return {ids.begin(), ids.end()};
}
}  // namespace

GPTDatasetV1::GPTDatasetV1(std::string_view txt, const Tokenizer& tokenizer, int64_t max_length,
                           int64_t stride)
    : GPTDatasetV1(encode_for_dataset(txt, tokenizer), max_length, stride) {}

std::span<const int64_t> GPTDatasetV1::input_ids(int64_t idx) const {
  if (idx < 0 || idx >= n_windows_)
    throw std::out_of_range("GPTDatasetV1: index " + std::to_string(idx) + " out of range for " +
                            std::to_string(n_windows_) + " windows");
  return {ids_.data() + idx * stride_, static_cast<size_t>(max_length_)};
}

std::span<const int64_t> GPTDatasetV1::target_ids(int64_t idx) const {
  const auto in = input_ids(idx);
  return {in.data() + 1, in.size()};
}

DataLoader::DataLoader(std::shared_ptr<const GPTDatasetV1> dataset, int64_t batch_size,
                       bool shuffle, bool drop_last, Generator& generator)
    : dataset_(std::move(dataset)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      drop_last_(drop_last),
      generator_(&generator) {
  if (!dataset_) throw std::invalid_argument("DataLoader: no dataset");
  if (batch_size < 1)
    throw std::invalid_argument("DataLoader: batch_size must be >= 1, got " +
                                std::to_string(batch_size));
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void DataLoader::draw_base_seed() const {
  // _BaseDataLoaderIter draws _base_seed (one W64) whether or not it shuffles; with
  // num_workers=0 the value is unused, but the draw moves the generator.
  (void)generator_->random64();
}

std::vector<int64_t> DataLoader::sampler_order() const {
  const int64_t n = dataset_->size();
  if (shuffle_) return random_sampler_order(*generator_, n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

std::vector<int64_t> DataLoader::epoch_order() const {
  draw_base_seed();
  return sampler_order();
}

Batch DataLoader::batch(const std::vector<int64_t>& order, int64_t b) const {
  const int64_t n = dataset_->size();
  if (static_cast<int64_t>(order.size()) != n)
    throw std::invalid_argument("DataLoader::batch: an order of " + std::to_string(order.size()) +
                                " windows for a dataset of " + std::to_string(n));
  if (b < 0 || b >= size())
    throw std::out_of_range("DataLoader::batch: batch " + std::to_string(b) + " out of range for " +
                            std::to_string(size()) + " batches");
  const int64_t T = dataset_->max_length();
  const int64_t begin = b * batch_size_;
  const int64_t rows = std::min(batch_size_, n - begin);
  Batch out;
  out.batch_size = rows;
  out.max_length = T;
  out.indices.assign(order.begin() + begin, order.begin() + begin + rows);
  out.inputs.resize(static_cast<size_t>(rows * T));
  out.targets.resize(static_cast<size_t>(rows * T));
  for (int64_t r = 0; r < rows; ++r) {
    const auto x = dataset_->input_ids(out.indices[r]);
    const auto y = dataset_->target_ids(out.indices[r]);
    std::copy(x.begin(), x.end(), out.inputs.begin() + r * T);
    std::copy(y.begin(), y.end(), out.targets.begin() + r * T);
  }
  return out;
}

DataLoader::Iterator::Iterator(const DataLoader& loader) : loader_(&loader) {
  loader.draw_base_seed();
}

bool DataLoader::Iterator::next(Batch& batch) {
  if (!started_) {
    started_ = true;
    order_ = loader_->sampler_order();  // its _base_seed was drawn at iter()
  }
  if (b_ >= loader_->size()) return false;
  batch = loader_->batch(order_, b_++);
  return true;
}

DataLoader create_dataloader_v1(std::string_view txt, int64_t batch_size, int64_t max_length,
                                int64_t stride, bool shuffle, bool drop_last,
                                const Tokenizer* tokenizer, Generator& generator) {
  std::shared_ptr<const GPTDatasetV1> ds;
  if (tokenizer) {
    ds = std::make_shared<GPTDatasetV1>(txt, *tokenizer, max_length, stride);
  } else {
    ds = std::make_shared<GPTDatasetV1>(txt, Tokenizer::gpt2(), max_length, stride);
  }
  return DataLoader(std::move(ds), batch_size, shuffle, drop_last, generator);
}

}  // namespace tg::data
