// `tapegrad train`'s options: checks, defaults, and what --resume takes from the checkpoint
// (see train_options.h).
#include "train/train_options.h"

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "data/tokenizer_spec.h"
#include "train/checkpoint.h"

namespace tg::train {

namespace fs = std::filesystem;

namespace {

std::string default_text_path() {
  const char* rel = "data/sample/sample.txt";
  if (fs::exists(rel)) return rel;
#ifdef TAPEGRAD_SOURCE_ROOT
  return std::string(TAPEGRAD_SOURCE_ROOT) + "/" + rel;
#else
  return rel;
#endif
}

}  // namespace

bool is_explicit(const TrainOptions& o, const std::string& name) {
  for (const auto& f : o.explicit_flags)
    if (f == name) return true;
  return false;
}

std::string options_json(const TrainOptions& o) { return cli::stored_json(train_command(), o); }

void merge_resume_options(TrainOptions& o, const json::Value& saved, const std::string& path) {
  try {
    cli::merge_stored(train_command(), o, o.explicit_flags, saved, path);
  } catch (const cli::StoredOptionError& e) {
    throw TrainError(e.what());
  }
}

namespace {

// A value out of range: a UsageError naming the flag when the user gave it, else a TrainError
// naming the checkpoint it came from (the user never typed that flag).
[[noreturn]] void bad_option(const TrainOptions& o, const std::string& flag,
                             const std::string& what) {
  if (is_explicit(o, flag) || o.resume_dir.empty()) throw UsageError("--" + flag + " " + what);
  for (const auto& row : train_command().options)
    if (row.spec.name == flag)
      throw TrainError(o.resume_dir + ": checkpoint option '" + cli::stored_key(row.spec) + "' " +
                       what);
  throw TrainError(o.resume_dir + ": option --" + flag + " " + what);
}

// gpt2 or bpe:N (data/training_data.h's make_training_tokenizer builds it).
bool valid_tokenizer_spec(const std::string& spec) {
  return spec == "gpt2" || data::bpe_vocab_size(spec).has_value();
}

}  // namespace

void check_options(const TrainOptions& opt) {
  // A "not given" marker (context 0, min_lr -1, ...) is no value to check.
  const auto [row, why] = cli::first_refusal(
      train_command(), opt, [](const cli::Spec& s, auto v) { return s.none && v.num == *s.none; });
  if (row) bad_option(opt, row->name, why);
  if (!opt.tokenizer.empty() && !valid_tokenizer_spec(opt.tokenizer))
    bad_option(opt, "tokenizer",
               "names an unknown tokenizer '" + show_bytes(opt.tokenizer) +
                   "' (known: gpt2, bpe:N with " + data::bpe_vocab_range() + ")");
  if (opt.preset != "tiny" && opt.preset != "gpt2-124m" &&
      !(opt.preset == "custom" && (opt.config || !opt.resume_dir.empty())))
    bad_option(opt, "preset",
               "names an unknown preset '" + show_bytes(opt.preset) + "' (known: gpt2-124m, tiny)");
  if (!opt.resume_dir.empty() && !is_explicit(opt, "text") && opt.text_path.empty())
    bad_option(opt, "text", "is empty");
}

nn::GPTConfig resolve_model_config(TrainOptions& opt, const SafeTensors* ckpt,
                                   const std::string& ckpt_path) {
  nn::GPTConfig cfg;
  int64_t max_ctx = 0;
  if (opt.preset == "custom" && ckpt) opt.config = config_from_checkpoint(*ckpt, ckpt_path);
  if (opt.config) {
    cfg = *opt.config;
    opt.preset = "custom";
    max_ctx = cfg.context_length;
  } else {
    try {
      cfg = nn::gpt_preset(opt.preset);
      max_ctx = nn::gpt_preset_max_context(opt.preset);
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  }
  if (opt.context_length == 0) opt.context_length = cfg.context_length;
  if (opt.context_length < 2 || opt.context_length > max_ctx)
    throw UsageError("--context " + std::to_string(opt.context_length) +
                     " is outside what preset " + opt.preset + " allows (2.." +
                     std::to_string(max_ctx) + ")");
  cfg.context_length = opt.context_length;
  if (opt.drop_rate < 0) opt.drop_rate = cfg.drop_rate;
  cfg.drop_rate = opt.drop_rate;
  cfg.attention = opt.attention;
  cfg.pad_vocab = opt.pad_vocab;
  if (opt.tokenizer.empty()) opt.tokenizer = opt.preset == "tiny" ? "bpe:512" : "gpt2";
  if (opt.tokenizer != "gpt2" && opt.tokenizer.rfind("bpe:", 0) != 0)
    throw TrainError("unknown tokenizer '" + opt.tokenizer + "' (known: gpt2, bpe:N)");
  if (opt.text_path.empty()) opt.text_path = default_text_path();
  if (opt.min_lr < 0) opt.min_lr = 0.1 * opt.lr;
  return cfg;
}

}  // namespace tg::train
