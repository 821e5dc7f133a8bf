// `tapegrad train` and `tapegrad generate`: option parsing around train/trainer.h.
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/threadpool.h"
#include "train/commands.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace tg::cli {

namespace {

// --name value / --name=value, and bare --name for boolean flags.
struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> order;  // names as given

  static Args parse(int argc, char** argv, const std::vector<std::string>& valued,
                    const std::vector<std::string>& flags) {
    Args a;
    auto known = [](const std::vector<std::string>& v, const std::string& n) {
      for (const auto& x : v)
        if (x == n) return true;
      return false;
    };
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0)
        throw train::TrainError("unexpected argument '" + arg + "' (options start with --)");
      std::string name = arg.substr(2), value;
      const size_t eq = name.find('=');
      const bool has_eq = eq != std::string::npos;
      if (has_eq) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (known(flags, name)) {
        if (has_eq) throw train::TrainError("--" + name + " takes no value");
        value.assign(1, '1');  // not = "1": GCC 12 -Wrestrict false positive
      } else if (known(valued, name)) {
        if (!has_eq) {
          if (i + 1 >= argc) throw train::TrainError("--" + name + " needs a value");
          value = argv[++i];
        }
      } else {
        throw train::TrainError("unknown option --" + name + " (see --help)");
      }
      a.values[name] = value;
      a.order.push_back(name);
    }
    return a;
  }
  bool has(const std::string& n) const { return values.count(n) > 0; }
  std::string str(const std::string& n, const std::string& def) const {
    return has(n) ? values.at(n) : def;
  }
  int64_t integer(const std::string& n, int64_t def) const {
    if (!has(n)) return def;
    const std::string& v = values.at(n);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0)
      throw train::TrainError("--" + n + " expects an integer, got '" + v + "'");
    return x;
  }
  double real(const std::string& n, double def) const {
    if (!has(n)) return def;
    const std::string& v = values.at(n);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0')
      throw train::TrainError("--" + n + " expects a number, got '" + v + "'");
    return x;
  }
};

void on_sigint(int) {
  train::stop_requested().store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once
}

const char* kTrainHelp =
    R"(usage: tapegrad train [options]
Pretrains a GPT on a text as the book's train_model_simple (chapter 5) and prints its log.

  --text FILE          training text (default: the bundled data/sample/sample.txt)
  --preset NAME        gpt2-124m | tiny (default tiny)
  --tokenizer SPEC     gpt2 | bpe:N, a BPE of N tokens trained on the text (tiny: bpe:512,
                       gpt2-124m: gpt2)
  --context N          context length (default: the preset's, 256 / 64)
  --attention ROUTE    fused: one scaled_dot_product_attention per block (default); book: the
                       §3.6.2 MultiHeadAttention op by op. Same model, same numbers to rounding
  --epochs N           (10)            --batch-size N      (2)
  --lr X               (4e-4)          --weight-decay X    (0.1)
  --eval-freq N        (5)             --eval-iter N       (5)
  --seed N             (123)           --threads N         (TAPEGRAD_THREADS or all cores)
  --out DIR            checkpoint.safetensors and loss.svg go here (default out)
  --log FILE           append one JSON line per evaluation
  --resume DIR         continue from DIR's checkpoint (options default to the checkpoint's)
  --start-context TXT  the sample's prompt (default "Every effort moves you")
  --sample-tokens N    tokens in each epoch's greedy sample (50)
  --clip-grad X        clip the gradient norm to X          --max-steps N  stop after N steps
  --cosine             warmup + cosine schedule (appendix D); --warmup-steps N, --initial-lr X,
                       --min-lr X (default 0.1 * lr)
  --progress / --no-progress   force the progress line on stderr on or off (default: on a tty)
Ctrl-C finishes the current step, saves the checkpoint and exits (status 130).
)";

const char* kGenerateHelp =
    R"(usage: tapegrad generate --checkpoint DIR [options]
Continues a prompt with the book's generate() (chapter 5.3).

  --checkpoint DIR     a directory written by `tapegrad train` (or its checkpoint.safetensors)
  --prompt TEXT        (default "Every effort moves you")
  --max-new-tokens N   (50)
  --temperature T      0 = greedy (default); > 0 samples from softmax(logits / T)
  --top-k K            keep only the K most likely tokens (0, the default: all)
  --seed S             torch.manual_seed before sampling (123)
  --eos                stop at <|endoftext|>
  --threads N
  --logits FILE        also write the prompt's logits (1, T, vocab) as safetensors (interop check)
)";

// --threads N, range-checked before any narrowing (the pool's limit, as for TAPEGRAD_THREADS).
int thread_count(const Args& a) {
  const int64_t t = a.integer("threads", 1);
  if (t < 1 || t > 1024)
    throw train::TrainError("--threads must be from 1 to 1024, got " + std::to_string(t));
  return int(t);
}

}  // namespace

int train_main(int argc, char** argv) {
  const std::vector<std::string> valued = {
      "text",         "preset",       "tokenizer", "context",       "epochs",        "batch-size",
      "lr",           "weight-decay", "eval-freq", "eval-iter",     "seed",          "threads",
      "out",          "log",          "resume",    "start-context", "sample-tokens", "clip-grad",
      "warmup-steps", "initial-lr",   "min-lr",    "max-steps",     "attention"};
  const std::vector<std::string> flags = {"cosine", "progress", "no-progress", "help"};
  try {
    const Args a = Args::parse(argc, argv, valued, flags);
    if (a.has("help")) {
      std::cout << kTrainHelp;
      return 0;
    }
    train::TrainOptions o;
    o.text_path = a.str("text", "");
    o.preset = a.str("preset", o.preset);
    o.tokenizer = a.str("tokenizer", "");
    o.context_length = a.integer("context", 0);
    o.attention = a.str("attention", o.attention);
    o.epochs = a.integer("epochs", o.epochs);
    o.batch_size = a.integer("batch-size", o.batch_size);
    o.lr = a.real("lr", o.lr);
    o.weight_decay = a.real("weight-decay", o.weight_decay);
    o.eval_freq = a.integer("eval-freq", o.eval_freq);
    o.eval_iter = a.integer("eval-iter", o.eval_iter);
    const int64_t seed = a.integer("seed", int64_t(o.seed));
    if (seed < 0) throw train::TrainError("--seed must be >= 0");
    o.seed = uint64_t(seed);
    if (a.has("threads")) o.threads = thread_count(a);
    o.out_dir = a.str("out", o.out_dir);
    o.log_path = a.str("log", "");
    o.resume_dir = a.str("resume", "");
    o.start_context = a.str("start-context", o.start_context);
    o.sample_tokens = a.integer("sample-tokens", o.sample_tokens);
    o.clip_grad = a.real("clip-grad", 0);
    o.warmup_steps = a.integer("warmup-steps", 0);
    o.cosine = a.has("cosine");
    o.initial_lr = a.real("initial-lr", 0);
    o.min_lr = a.real("min-lr", -1);
    o.max_steps = a.integer("max-steps", -1);
    if (a.has("progress")) o.progress = 1;
    if (a.has("no-progress")) o.progress = 0;
    o.explicit_flags = a.order;
    train::keep_freed_memory();
    std::signal(SIGINT, on_sigint);
    const train::TrainResult r = train::run_training(o, std::cout, std::cerr);
    std::signal(SIGINT, SIG_DFL);
    return r.interrupted && train::stop_requested().load() ? 130 : 0;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "tapegrad train: " << e.what() << "\n";
    return 1;
  }
}

int generate_main(int argc, char** argv) {
  const std::vector<std::string> valued = {"checkpoint", "prompt", "max-new-tokens", "temperature",
                                           "top-k",      "seed",   "threads",        "logits"};
  const std::vector<std::string> flags = {"eos", "help"};
  try {
    const Args a = Args::parse(argc, argv, valued, flags);
    if (a.has("help")) {
      std::cout << kGenerateHelp;
      return 0;
    }
    if (!a.has("checkpoint")) throw train::TrainError("--checkpoint DIR is required");
    const std::string prompt = a.str("prompt", "Every effort moves you");
    const int64_t max_new = a.integer("max-new-tokens", 50);
    const double temperature = a.real("temperature", 0);
    const int64_t top_k = a.integer("top-k", 0);
    const int64_t seed = a.integer("seed", 123);
    if (max_new < 0) throw train::TrainError("--max-new-tokens must be >= 0");
    if (!(temperature >= 0)) throw train::TrainError("--temperature must be >= 0");
    if (top_k < 0) throw train::TrainError("--top-k must be >= 0");
    if (seed < 0) throw train::TrainError("--seed must be >= 0");
    if (a.has("threads")) set_num_threads(thread_count(a));
    train::LoadedModel lm = train::load_checkpoint_model(a.str("checkpoint", ""));
    const std::vector<int64_t> ids = train::text_to_token_ids(prompt, *lm.tokenizer);
    if (ids.empty()) throw train::TrainError("--prompt is empty");
    int64_t eos_id = -1;
    if (a.has("eos"))
      for (const auto& [name, id] : lm.tokenizer->specials())
        if (name == "<|endoftext|>") eos_id = id;
    if (a.has("logits")) {
      // The prompt's logits (1, T, vocab) for tools/interop_check.py, with the ids in metadata.
      NoGradGuard no_grad;
      const Tensor logits = (*lm.model)(from_vector(ids, {1, int64_t(ids.size())}));
      std::string id_list;
      for (int64_t id : ids) id_list += std::to_string(id) + " ";
      train::save_safetensors(a.str("logits", ""), {{"logits", logits}}, {{"token_ids", id_list}});
    }
    manual_seed(uint64_t(seed));
    const std::vector<int64_t> out =
        train::generate(*lm.model, ids, max_new, lm.cfg.context_length, temperature, top_k, eos_id,
                        default_generator());
    std::cout << train::token_ids_to_text(out, *lm.tokenizer) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tapegrad generate: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace tg::cli
