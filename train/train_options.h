// `tapegrad train`'s options (TrainOptions, trainer.h) between the command line and the run:
// range checks, the defaults that depend on the preset, and on --resume the checkpoint's options
// for every flag not given again.
#pragma once
#include <string>

#include "core/json.h"
#include "nn/gpt.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace tg::train {

// Whether --name was on the command line (TrainOptions::explicit_flags).
bool is_explicit(const TrainOptions& o, const std::string& name);

// The options as the JSON object a checkpoint keeps (metadata "options").
std::string options_json(const TrainOptions& o);

// Fills the options the user did not give from the checkpoint's; refuses explicit ones that
// would change the data or the model.
void merge_resume_options(TrainOptions& o, const json::Value& saved, const std::string& path);

// Throws TrainError naming the flag for a count or rate out of range.
void check_options(const TrainOptions& o);

// The model's config: the preset's (or o.config, or a "custom" checkpoint's) with --context;
// fills the defaults that depend on it (context, tokenizer, text, min_lr) into `o`.
nn::GPTConfig resolve_model_config(TrainOptions& o, const SafeTensors* ckpt,
                                   const std::string& ckpt_path);

}  // namespace tg::train
