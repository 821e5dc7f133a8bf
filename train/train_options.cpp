// `tapegrad train`'s options: checks, defaults, and what --resume takes from the checkpoint
// (see train_options.h).
#include "train/train_options.h"

#include <cmath>
#include <filesystem>
#include <sstream>

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

std::string options_json(const TrainOptions& o) {
  std::ostringstream os;
  os << "{\"text\": " << json::quote(o.text_path) << ", \"preset\": " << json::quote(o.preset)
     << ", \"tokenizer\": " << json::quote(o.tokenizer)
     << ", \"context_length\": " << o.context_length << ", \"epochs\": " << o.epochs
     << ", \"batch_size\": " << o.batch_size << ", \"lr\": " << json::number(o.lr)
     << ", \"weight_decay\": " << json::number(o.weight_decay) << ", \"eval_freq\": " << o.eval_freq
     << ", \"eval_iter\": " << o.eval_iter << ", \"seed\": " << o.seed
     << ", \"start_context\": " << json::quote(o.start_context)
     << ", \"sample_tokens\": " << o.sample_tokens
     << ", \"clip_grad\": " << json::number(o.clip_grad) << ", \"warmup_steps\": " << o.warmup_steps
     << ", \"cosine\": " << (o.cosine ? "true" : "false")
     << ", \"initial_lr\": " << json::number(o.initial_lr)
     << ", \"min_lr\": " << json::number(o.min_lr)
     << ", \"attention\": " << json::quote(o.attention) << "}";
  return os.str();
}

// Fills the options the user did not give from the checkpoint's; refuses explicit ones that
// would change the data or the model.
void merge_resume_options(TrainOptions& o, const json::Value& saved, const std::string& path) {
  auto str = [&](const char* k) {
    const json::Value* v = saved.find(k);
    if (!v) throw TrainError(path + ": checkpoint options lack '" + std::string(k) + "'");
    return v->str;
  };
  auto num = [&](const char* k) {
    const json::Value* v = saved.find(k);
    if (!v) throw TrainError(path + ": checkpoint options lack '" + std::string(k) + "'");
    return v->kind == json::Value::Kind::Bool ? double(v->b) : v->num;
  };
  auto conflict = [&](const char* flag, const std::string& mine, const std::string& theirs) {
    throw TrainError("--" + std::string(flag) + " " + mine + " does not match the checkpoint " +
                     path + " (trained with " + theirs + "); a checkpoint from another config");
  };
  auto take_str = [&](const char* flag, const char* key, std::string& field) {
    const std::string saved_v = str(key);
    if (is_explicit(o, flag) && field != saved_v) conflict(flag, field, saved_v);
    field = saved_v;
  };
  auto take_int = [&](const char* flag, const char* key, int64_t& field, bool must_match) {
    const int64_t saved_v = int64_t(num(key));
    if (!is_explicit(o, flag))
      field = saved_v;
    else if (must_match && field != saved_v)
      conflict(flag, std::to_string(field), std::to_string(saved_v));
  };
  auto take_double = [&](const char* flag, const char* key, double& field) {
    if (!is_explicit(o, flag)) field = num(key);
  };
  take_str("preset", "preset", o.preset);
  take_str("tokenizer", "tokenizer", o.tokenizer);
  take_int("context", "context_length", o.context_length, true);
  take_int("batch-size", "batch_size", o.batch_size, true);
  if (!is_explicit(o, "text")) o.text_path = str("text");
  take_int("epochs", "epochs", o.epochs, false);
  take_double("lr", "lr", o.lr);
  take_double("weight-decay", "weight_decay", o.weight_decay);
  take_int("eval-freq", "eval_freq", o.eval_freq, false);
  take_int("eval-iter", "eval_iter", o.eval_iter, false);
  int64_t seed = int64_t(o.seed);
  take_int("seed", "seed", seed, false);
  o.seed = uint64_t(seed);
  if (!is_explicit(o, "start-context")) o.start_context = str("start_context");
  take_int("sample-tokens", "sample_tokens", o.sample_tokens, false);
  take_double("clip-grad", "clip_grad", o.clip_grad);
  take_int("warmup-steps", "warmup_steps", o.warmup_steps, false);
  if (!is_explicit(o, "cosine")) o.cosine = num("cosine") != 0;
  take_double("initial-lr", "initial_lr", o.initial_lr);
  take_double("min-lr", "min_lr", o.min_lr);
  // The attention route changes no result beyond rounding, so it may differ from the
  // checkpoint's; resuming on the same route keeps a resumed run bit-exact. Checkpoints from
  // before the fused route ran the book's.
  if (!is_explicit(o, "attention")) {
    const json::Value* a = saved.find("attention");
    o.attention = a ? a->str : "book";
  }
}

void check_options(const TrainOptions& opt) {
  auto at_least = [](const char* flag, int64_t v, int64_t lo) {
    if (v < lo)
      throw TrainError("--" + std::string(flag) + " must be >= " + std::to_string(lo) + ", got " +
                       std::to_string(v));
  };
  at_least("epochs", opt.epochs, 0);
  at_least("batch-size", opt.batch_size, 1);
  at_least("eval-freq", opt.eval_freq, 1);
  at_least("eval-iter", opt.eval_iter, 1);
  at_least("sample-tokens", opt.sample_tokens, 0);
  if (!(opt.lr >= 0) || !std::isfinite(opt.lr)) throw TrainError("--lr must be a number >= 0");
  auto finite_at_least_0 = [](const char* flag, double v) {
    if (!(v >= 0) || !std::isfinite(v))
      throw TrainError("--" + std::string(flag) + " must be a number >= 0");
  };
  finite_at_least_0("weight-decay", opt.weight_decay);
  finite_at_least_0("clip-grad", opt.clip_grad);
  finite_at_least_0("initial-lr", opt.initial_lr);
  if (opt.min_lr != -1) finite_at_least_0("min-lr", opt.min_lr);  // -1: the default, 0.1 * lr
  at_least("warmup-steps", opt.warmup_steps, 0);
  if (opt.max_steps != -1) at_least("max-steps", opt.max_steps, 1);  // -1: no limit
  if (opt.attention != "fused" && opt.attention != "book")
    throw TrainError("--attention must be fused or book, got '" + opt.attention + "'");
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
    throw TrainError("--context " + std::to_string(opt.context_length) +
                     " is outside what preset " + opt.preset + " allows (2.." +
                     std::to_string(max_ctx) + ")");
  cfg.context_length = opt.context_length;
  cfg.attention = opt.attention;
  if (opt.tokenizer.empty()) opt.tokenizer = opt.preset == "tiny" ? "bpe:512" : "gpt2";
  if (opt.tokenizer != "gpt2" && opt.tokenizer.rfind("bpe:", 0) != 0)
    throw TrainError("unknown tokenizer '" + opt.tokenizer + "' (known: gpt2, bpe:N)");
  if (opt.text_path.empty()) opt.text_path = default_text_path();
  if (opt.min_lr < 0) opt.min_lr = 0.1 * opt.lr;
  return cfg;
}

}  // namespace tg::train
