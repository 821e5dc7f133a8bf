// The safetensors reader and the checkpoint loader behind `generate` and `train --resume`:
// header, offsets, metadata (config, tokenizer, options, training state, history) and the
// tensors' checks, on any bytes. Every refusal must be an exception, never a crash or a huge
// allocation.
#include <exception>

#include "core/rng.h"
#include "fuzz/fuzz.h"
#include "train/checkpoint.h"
#include "train/train_options.h"
#include "train/trainer.h"

using namespace tg;

namespace {

// What `train --resume` does with a checkpoint, short of reading a text and training.
void resume_from(const tg::SafeTensors& st, const std::string& path) {
  train::TrainOptions o;
  o.resume_dir = path;
  train::merge_resume_options(o, train::options_from_checkpoint(st, path), path);
  train::check_options(o);
  const nn::GPTConfig cfg = train::config_from_checkpoint(st, path);
  nn::GPTModel model(cfg);
  train::AdamW opt(model, 1e-3, 0.1);
  Generator gen;
  // The loader sizes come from the training text; here the stored order's own length, so the
  // permutation check runs, and a batch bound that any sane position meets.
  const Tensor* order = st.find("trainer.epoch_order");
  const int64_t n_windows = order ? order->numel() : 16;
  (void)train::restore_checkpoint(st, path, model, opt, gen, int64_t(1) << 20, n_windows);
}

}  // namespace

TG_FUZZ_ENTRY(safetensors) {
  // The "gpt2" tokenizer would read GPT-2's files on every input: pointed nowhere, it fails fast.
  static const int no_gpt2 = setenv("TAPEGRAD_GPT2_DIR", "/nonexistent-gpt2-dir", 1);
  (void)no_gpt2;
  const std::string path = fuzz::write_temp(
      "checkpoint.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    (void)train::load_checkpoint_model(path);  // generate's loader
  } catch (const std::exception&) {
  }
  try {
    const tg::SafeTensors st = train::read_checkpoint(path);
    resume_from(st, path);
  } catch (const std::exception&) {
  }
  return 0;
}
