// Training checkpoints: one safetensors file holding the model's state_dict under the book's
// names, AdamW's moments, and in its metadata everything needed to continue the run to exactly
// the losses of an uninterrupted one (position, generator state, options, tokenizer, history).
// train/README.md lists the entries. Every reader throws TrainError naming the file.
// The public side is load_checkpoint_model (what `tapegrad generate` loads); the rest is what
// run_training uses to write and resume.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "data/bpe_tokenizer.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace tg::train {

inline constexpr const char* kCheckpointFile = "checkpoint.safetensors";

// A model with its tokenizer, as `tapegrad generate` loads it.
struct LoadedModel {
  nn::GPTConfig cfg;
  std::string preset, tokenizer_spec;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<nn::GPTModel> model;
};
// DIR or DIR/checkpoint.safetensors. Throws TrainError on a missing or inconsistent file.
LoadedModel load_checkpoint_model(const std::string& path);
std::string checkpoint_path(const std::string& dir_or_file);

// What the run was made from, recorded beside the tensors.
struct RunRecipe {
  const nn::GPTConfig& cfg;
  const std::string& options_json;    // TrainOptions as JSON (preset and tokenizer included)
  const std::string& tokenizer_spec;  // gpt2 | bpe:N
  const data::Tokenizer& tokenizer;
  const std::string& text_hash;  // text_hash() of the whole text
};

// Writes the checkpoint atomically (core/file_io.h).
void save_checkpoint(const std::string& path, nn::GPTModel& model, const AdamW& optimizer,
                     const Generator& gen, const RunRecipe& recipe, const RunPosition& pos);

// The format and the recipe entries of a checkpoint already parsed (read_checkpoint does it).
void check_checkpoint(const SafeTensors& st, const std::string& path);
// Reads a checkpoint file and checks its format.
SafeTensors read_checkpoint(const std::string& path);
nn::GPTConfig config_from_checkpoint(const SafeTensors& st, const std::string& path);
json::Value options_from_checkpoint(const SafeTensors& st, const std::string& path);
std::unique_ptr<data::Tokenizer> tokenizer_from_checkpoint(const SafeTensors& st,
                                                           const std::string& path);

// Loads weights, AdamW's moments and the generator's state into a model and optimizer built
// from the checkpoint's config, and returns the position; `n_batches` and `n_windows` (the
// training loader's batches per epoch and windows) bound it.
RunPosition restore_checkpoint(const SafeTensors& st, const std::string& path, nn::GPTModel& model,
                               AdamW& optimizer, Generator& gen, int64_t n_batches,
                               int64_t n_windows);

// FNV-1a of the text, as 16 hex digits: --resume refuses another text.
std::string text_hash(std::string_view text);

}  // namespace tg::train
