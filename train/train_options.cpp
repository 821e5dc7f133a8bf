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
// would change the data or the model. Each stored value must have its type (a string "nan" is
// not a learning rate of 0); check_options then checks the ranges as for flags.
void merge_resume_options(TrainOptions& o, const json::Value& saved, const std::string& path) {
  using Kind = json::Value::Kind;
  auto field = [&](const char* k, Kind kind, const char* want) -> const json::Value& {
    const json::Value* v = saved.find(k);
    if (!v) throw TrainError(path + ": checkpoint options lack '" + std::string(k) + "'");
    if (v->kind != kind) throw TrainError(path + ": checkpoint option '" + k + "' must be " + want);
    return *v;
  };
  auto str = [&](const char* k) { return field(k, Kind::String, "a string").str; };
  auto num = [&](const char* k) { return field(k, Kind::Number, "a number").num; };
  auto integer = [&](const char* k) {
    const json::Value& v = field(k, Kind::Number, "an integer");
    try {
      return v.as_int();
    } catch (const json::Error&) {
      throw TrainError(path + ": checkpoint option '" + k + "' must be an integer, got " + v.str);
    }
  };
  auto conflict = [&](const char* flag, const std::string& mine, const std::string& theirs) {
    throw UsageError("--" + std::string(flag) + " " + mine + " does not match the checkpoint " +
                     path + " (trained with " + theirs + "); a checkpoint from another config");
  };
  auto take_str = [&](const char* flag, const char* key, std::string& field) {
    const std::string saved_v = str(key);
    if (is_explicit(o, flag) && field != saved_v) conflict(flag, field, saved_v);
    field = saved_v;
  };
  auto take_int = [&](const char* flag, const char* key, int64_t& field, bool must_match) {
    const int64_t saved_v = integer(key);
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
  if (!is_explicit(o, "seed")) {
    const int64_t seed = integer("seed");
    if (seed < 0)
      throw TrainError(path + ": checkpoint option 'seed' must be >= 0, got " +
                       std::to_string(seed));
    o.seed = uint64_t(seed);
  }
  if (!is_explicit(o, "start-context")) o.start_context = str("start_context");
  take_int("sample-tokens", "sample_tokens", o.sample_tokens, false);
  take_double("clip-grad", "clip_grad", o.clip_grad);
  take_int("warmup-steps", "warmup_steps", o.warmup_steps, false);
  if (!is_explicit(o, "cosine")) o.cosine = field("cosine", Kind::Bool, "true or false").b;
  take_double("initial-lr", "initial_lr", o.initial_lr);
  take_double("min-lr", "min_lr", o.min_lr);
  // The attention route changes no result beyond rounding, so it may differ from the
  // checkpoint's; resuming on the same route keeps a resumed run bit-exact. Checkpoints from
  // before the fused route ran the book's.
  if (!is_explicit(o, "attention"))
    o.attention = saved.find("attention") ? str("attention") : "book";
}

namespace {

// A value out of range: a UsageError naming the flag when the user gave it, else a TrainError
// naming the checkpoint it came from (the user never typed that flag).
[[noreturn]] void bad_option(const TrainOptions& o, const char* flag, const std::string& what) {
  if (is_explicit(o, flag) || o.resume_dir.empty())
    throw UsageError("--" + std::string(flag) + " " + what);
  std::string key = flag == std::string("context") ? "context_length" : flag;
  for (char& c : key)
    if (c == '-') c = '_';
  throw TrainError(o.resume_dir + ": checkpoint option '" + key + "' " + what);
}

void in_range(const TrainOptions& o, const char* flag, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo)
    bad_option(o, flag, "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
  if (v > hi)
    bad_option(o, flag, "must be <= " + std::to_string(hi) + ", got " + std::to_string(v));
}

void finite_at_least_0(const TrainOptions& o, const char* flag, double v) {
  if (!(v >= 0) || !std::isfinite(v)) bad_option(o, flag, "must be a number >= 0");
}

// gpt2 or bpe:N with 256 <= N <= 100000 (the session's make_tokenizer builds it).
bool valid_tokenizer_spec(const std::string& spec) {
  if (spec == "gpt2") return true;
  if (spec.rfind("bpe:", 0) != 0 || spec.size() < 7 || spec.size() > 10) return false;
  const std::string n = spec.substr(4);
  if (n.find_first_not_of("0123456789") != std::string::npos) return false;
  const long v = std::stol(n);
  return v >= 256 && v <= 100000;
}

}  // namespace

void check_options(const TrainOptions& opt) {
  constexpr int64_t kBig = int64_t(1) << 40;  // counts beyond this are typing errors
  in_range(opt, "epochs", opt.epochs, 0, 1000000);
  in_range(opt, "batch-size", opt.batch_size, 1, 1 << 20);
  in_range(opt, "eval-freq", opt.eval_freq, 1, kBig);
  in_range(opt, "eval-iter", opt.eval_iter, 1, kBig);
  in_range(opt, "sample-tokens", opt.sample_tokens, 0, 100000);
  in_range(opt, "warmup-steps", opt.warmup_steps, 0, kBig);
  finite_at_least_0(opt, "lr", opt.lr);
  finite_at_least_0(opt, "weight-decay", opt.weight_decay);
  finite_at_least_0(opt, "clip-grad", opt.clip_grad);
  finite_at_least_0(opt, "initial-lr", opt.initial_lr);
  // -1 and 0 are "not given" markers; a value from the command line or a checkpoint is real.
  const bool given_min_lr = is_explicit(opt, "min-lr") || !opt.resume_dir.empty();
  if (given_min_lr) finite_at_least_0(opt, "min-lr", opt.min_lr);
  if (opt.context_length != 0 || is_explicit(opt, "context") || !opt.resume_dir.empty())
    in_range(opt, "context", opt.context_length, 2, int64_t(1) << 20);
  if (opt.max_steps != -1) in_range(opt, "max-steps", opt.max_steps, 1, kBig);
  if (opt.attention != "fused" && opt.attention != "book")
    bad_option(opt, "attention", "must be fused or book, got '" + show_bytes(opt.attention) + "'");
  if (!opt.tokenizer.empty() && !valid_tokenizer_spec(opt.tokenizer))
    bad_option(opt, "tokenizer",
               "names an unknown tokenizer '" + show_bytes(opt.tokenizer) +
                   "' (known: gpt2, bpe:N with 256 <= N <= 100000)");
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
  cfg.attention = opt.attention;
  if (opt.tokenizer.empty()) opt.tokenizer = opt.preset == "tiny" ? "bpe:512" : "gpt2";
  if (opt.tokenizer != "gpt2" && opt.tokenizer.rfind("bpe:", 0) != 0)
    throw TrainError("unknown tokenizer '" + opt.tokenizer + "' (known: gpt2, bpe:N)");
  if (opt.text_path.empty()) opt.text_path = default_text_path();
  if (opt.min_lr < 0) opt.min_lr = 0.1 * opt.lr;
  return cfg;
}

}  // namespace tg::train
