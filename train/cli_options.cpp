// `tapegrad train` / `generate` option parsing (see cli_options.h).
#include "train/cli_options.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

namespace tg::cli {

namespace {

using train::UsageError;

bool contains(const std::vector<std::string>& v, const std::string& n) {
  for (const auto& x : v)
    if (x == n) return true;
  return false;
}

// --name value / --name=value, and bare --name for boolean flags; each at most once.
struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> order;  // names as given

  static Args parse(int argc, char** argv, const std::vector<std::string>& valued,
                    const std::vector<std::string>& flags) {
    Args a;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0)
        throw UsageError("unexpected argument '" + show_bytes(arg) + "' (options start with --)");
      std::string name = arg.substr(2), value;
      const size_t eq = name.find('=');
      const bool has_eq = eq != std::string::npos;
      if (has_eq) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (contains(flags, name)) {
        if (has_eq) throw UsageError("--" + name + " takes no value");
        value.assign(1, '1');  // not = "1": GCC 12 -Wrestrict false positive
      } else if (contains(valued, name)) {
        if (!has_eq) {
          if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
          value = argv[++i];
        }
      } else {
        throw UsageError("unknown option --" + show_bytes(name) + " (see --help)");
      }
      if (a.values.count(name)) throw UsageError("--" + name + " is given twice");
      a.values[name] = value;
      a.order.push_back(name);
    }
    return a;
  }
  bool has(const std::string& n) const { return values.count(n) > 0; }
  std::string str(const std::string& n, const std::string& def) const {
    return has(n) ? values.at(n) : def;
  }
  // A value that names something (a file, a prompt): given, it must not be empty.
  std::string nonempty(const std::string& n, const std::string& def) const {
    if (has(n) && values.at(n).empty()) throw UsageError("--" + n + " is empty");
    return str(n, def);
  }
  int64_t integer(const std::string& n, int64_t def) const {
    if (!has(n)) return def;
    const std::string& v = values.at(n);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0)
      throw UsageError("--" + n + " expects an integer, got '" + show_bytes(v) + "'");
    return x;
  }
  // An integer in [lo, hi].
  int64_t integer_in(const std::string& n, int64_t def, int64_t lo, int64_t hi) const {
    const int64_t x = integer(n, def);
    if (has(n) && (x < lo || x > hi))
      throw UsageError("--" + n + " must be from " + std::to_string(lo) + " to " +
                       std::to_string(hi) + ", got " + std::to_string(x));
    return x;
  }
  double real(const std::string& n, double def) const {
    if (!has(n)) return def;
    const std::string& v = values.at(n);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0')
      throw UsageError("--" + n + " expects a number, got '" + show_bytes(v) + "'");
    return x;
  }
};

// --threads N, range-checked before any narrowing (the pool's limit, as for TAPEGRAD_THREADS).
int thread_count(const Args& a) {
  const int64_t t = a.integer("threads", 1);
  if (t < 1 || t > 1024)
    throw UsageError("--threads must be from 1 to 1024, got " + std::to_string(t));
  return int(t);
}

}  // namespace

train::TrainOptions parse_train_args(int argc, char** argv, bool& help) {
  const std::vector<std::string> valued = {
      "text",         "preset",       "tokenizer", "context",       "epochs",        "batch-size",
      "lr",           "weight-decay", "eval-freq", "eval-iter",     "seed",          "threads",
      "out",          "log",          "resume",    "start-context", "sample-tokens", "clip-grad",
      "warmup-steps", "initial-lr",   "min-lr",    "max-steps",     "attention"};
  const std::vector<std::string> flags = {"cosine", "progress", "no-progress", "overwrite", "help"};
  const Args a = Args::parse(argc, argv, valued, flags);
  help = a.has("help");
  train::TrainOptions o;
  if (help) return o;
  if (a.has("progress") && a.has("no-progress"))
    throw UsageError("--progress and --no-progress contradict each other");
  if (a.has("resume") && a.has("overwrite"))
    throw UsageError("--overwrite starts afresh; it does not go with --resume");
  o.text_path = a.nonempty("text", "");
  o.preset = a.nonempty("preset", o.preset);
  o.tokenizer = a.nonempty("tokenizer", "");
  // 0 and -1 below are internal "not given" markers, so given values are checked here.
  o.context_length = a.integer_in("context", 0, 2, int64_t(1) << 20);
  o.attention = a.str("attention", o.attention);
  o.epochs = a.integer("epochs", o.epochs);
  o.batch_size = a.integer("batch-size", o.batch_size);
  o.lr = a.real("lr", o.lr);
  o.weight_decay = a.real("weight-decay", o.weight_decay);
  o.eval_freq = a.integer("eval-freq", o.eval_freq);
  o.eval_iter = a.integer("eval-iter", o.eval_iter);
  const int64_t seed = a.integer("seed", int64_t(o.seed));
  if (seed < 0) throw UsageError("--seed must be >= 0, got " + std::to_string(seed));
  o.seed = uint64_t(seed);
  if (a.has("threads")) o.threads = thread_count(a);
  o.out_dir = a.nonempty("out", o.out_dir);
  o.log_path = a.nonempty("log", "");
  o.resume_dir = a.nonempty("resume", "");
  o.start_context = a.nonempty("start-context", o.start_context);
  o.sample_tokens = a.integer("sample-tokens", o.sample_tokens);
  o.clip_grad = a.real("clip-grad", 0);
  o.warmup_steps = a.integer("warmup-steps", 0);
  o.cosine = a.has("cosine");
  o.initial_lr = a.real("initial-lr", 0);
  o.min_lr = a.real("min-lr", -1);
  if (a.has("min-lr") && !(o.min_lr >= 0 && std::isfinite(o.min_lr)))
    throw UsageError("--min-lr must be a number >= 0");
  o.max_steps = a.integer("max-steps", -1);
  if (a.has("max-steps") && o.max_steps < 1)
    throw UsageError("--max-steps must be >= 1, got " + std::to_string(o.max_steps));
  if (a.has("progress")) o.progress = 1;
  if (a.has("no-progress")) o.progress = 0;
  o.overwrite = a.has("overwrite");
  o.explicit_flags = a.order;
  return o;
}

GenerateOptions parse_generate_args(int argc, char** argv) {
  const std::vector<std::string> valued = {"checkpoint", "prompt", "max-new-tokens", "temperature",
                                           "top-k",      "seed",   "threads",        "logits"};
  const std::vector<std::string> flags = {"eos", "help"};
  const Args a = Args::parse(argc, argv, valued, flags);
  GenerateOptions g;
  g.help = a.has("help");
  if (g.help) return g;
  if (!a.has("checkpoint")) throw UsageError("--checkpoint DIR is required");
  g.checkpoint = a.nonempty("checkpoint", "");
  g.prompt = a.nonempty("prompt", g.prompt);
  g.logits = a.nonempty("logits", "");
  g.max_new_tokens = a.integer_in("max-new-tokens", g.max_new_tokens, 0, kMaxNewTokens);
  g.temperature = a.real("temperature", 0);
  if (g.temperature != 0 && !(g.temperature >= kMinTemperature && g.temperature <= kMaxTemperature))
    throw UsageError("--temperature must be 0 (greedy) or from 0.001 to 1000, got " +
                     show_bytes(a.str("temperature", "")));
  g.top_k = a.integer("top-k", 0);
  if (g.top_k < 0) throw UsageError("--top-k must be >= 0");
  g.seed = a.integer("seed", g.seed);
  if (g.seed < 0) throw UsageError("--seed must be >= 0");
  if (a.has("threads")) g.threads = thread_count(a);
  g.eos = a.has("eos");
  return g;
}

Chapter3Options parse_chapter3_args(int argc, char** argv) {
  Chapter3Options o;
  bool seen_cell = false, seen_notebook = false;
  std::vector<std::string> args;  // --name=VALUE as --name VALUE, as the other commands take it
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (eq != std::string::npos && (name == "--cell" || name == "--notebook")) {
      args.push_back(name);
      args.push_back(a.substr(eq + 1));
    } else {
      args.push_back(a);
    }
  }
  const size_t n_args = args.size();
  for (size_t i = 0; i < n_args; ++i) {
    const std::string& a = args[i];
    if ((a == "--notebook" && seen_notebook) || (a == "--cell" && seen_cell))
      throw train::UsageError(a + " is given twice");
    if ((a == "--notebook" || a == "--cell") && i + 1 >= n_args)
      throw train::UsageError(a + " needs a value");
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    }
    if (a == "--notebook") {
      const std::string& nb = args[++i];
      if (nb != "ch03" && nb != "mha")
        throw train::UsageError("--notebook expects ch03 or mha, got '" + show_bytes(nb) + "'");
      o.mha_notebook = nb == "mha";
      seen_notebook = true;
    } else if (a == "--cell") {
      const std::string& v = args[++i];
      int n = 0;  // from_chars: the whole value, no sign or blanks, no overflow
      const auto [end, err] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (err != std::errc() || end != v.data() + v.size() || n < kChapter3FirstCell ||
          n > kChapter3LastCell)
        throw train::UsageError(
            "--cell expects a number from " + std::to_string(kChapter3FirstCell) + " to " +
            std::to_string(kChapter3LastCell) + ", got '" + show_bytes(v) + "'");
      o.only = n;
      seen_cell = true;
    } else {
      throw train::UsageError("unknown option '" + show_bytes(a) + "' (try --help)");
    }
  }
  if (o.mha_notebook && o.only > kMhaLastCell)
    throw train::UsageError("the mha notebook has cells 2 to 8, got --cell " +
                            std::to_string(o.only));
  return o;
}

}  // namespace tg::cli
