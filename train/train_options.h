// `tapegrad train`'s options: TrainOptions and its table (core/options.h), one row per flag, from
// which follow the parser, --help, the range checks, the options a checkpoint stores and what
// --resume does with each. Then the checks across options, the defaults that depend on the
// preset, and the merge of a checkpoint's options on --resume.
//
// A new flag is a member of TrainOptions and its row in train_command() (with its test).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/options.h"
#include "core/safetensors.h"
#include "nn/gpt.h"

namespace tg {
struct SafeTensors;  // core/safetensors.h
}

namespace tg::train {

// A one-line user error (missing file, bad checkpoint, short text, NaN loss): the CLI prints
// "tapegrad train: <what()>" and exits with status 1.
struct TrainError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A bad command line (unknown, repeated or malformed flag, a value out of range): status 2.
using UsageError = cli::UsageError;

// Upper bounds of counts: each keeps a run finite (a huge count would run for ever silently).
inline constexpr int64_t kMaxEpochs = 1000000;
inline constexpr int64_t kMaxCount = int64_t(1) << 40;  // steps, evaluations: beyond, a typo
inline constexpr int64_t kMaxSampleTokens = 100000;

struct TrainOptions {
  std::string text_path;        // empty: the bundled sample (data/sample/sample.txt)
  std::string preset = "tiny";  // gpt2-124m | tiny
  std::string tokenizer;        // gpt2 | bpe:N; empty: gpt2 for gpt2-124m, bpe:512 for tiny
  std::string attention = nn::GPTConfig().attention;  // fused | book (GPTConfig::attention)
  std::string precision = "fp32";  // fp32 | bf16 (TrainLoop::autocast) | bf16-pure
  int64_t context_length = 0;      // 0: the preset's
  double drop_rate = -1;           // < 0: the preset's
  int64_t epochs = 10, batch_size = 2;
  // Micro-batches a global batch is cut into (gradient accumulation); 0: 1, or the process count
  // under mpirun (train/data_parallel.h).
  int64_t micro_batches = 0;
  double lr = 4e-4, weight_decay = 0.1;
  int64_t eval_freq = 5, eval_iter = 5;
  uint64_t seed = 123;
  int threads = 0;  // 0: TAPEGRAD_THREADS, else the cores this process may use (default_threads)
  int64_t pad_vocab = 1;  // out_head's rows padded to a multiple of this (GPTConfig::pad_vocab)
  std::string out_dir = "out";  // checkpoint.safetensors and loss.svg go here
  std::string log_path;         // JSON lines, one per evaluation
  std::string resume_dir;       // continue from DIR/checkpoint.safetensors
  // Start from OpenAI's GPT-2 weights in Hugging Face's files (train/gpt2_weights.h): the config
  // from DIR's config.json (a "custom" run, --context at most its n_positions), the weights
  // loaded after GPTModel's initial draws (as the book loads them into a fresh GPTModel), GPT-2's
  // tokenizer.
  std::string init_from;
  std::string start_context = "Every effort moves you";
  int64_t sample_tokens = 50;
  double clip_grad = 0;      // max gradient norm; 0: no clipping
  int64_t warmup_steps = 0;  // > 0 or cosine: appendix D's schedule
  bool cosine = false;
  double initial_lr = 0, min_lr = -1;  // min_lr < 0: 0.1 * lr
  int64_t max_steps = -1;              // stop (and save) after this many steps in this run
  int progress = -1;  // 1: progress line on stderr, 0: never, -1: when stderr is a tty
  // A fresh run refuses an out_dir that already holds a checkpoint unless this is set.
  bool overwrite = false;
  // Names of the options given explicitly; on --resume the checkpoint supplies the others, and
  // explicit data-pipeline options (the rows stored as MustMatch) must match it.
  std::vector<std::string> explicit_flags;
  // Library use (tests, benches): these dims instead of a preset's ("custom" in the checkpoint);
  // vocab_size still follows the tokenizer.
  std::optional<nn::GPTConfig> config;
  std::function<void(int64_t global_step)> on_step;  // after each optimizer step (tests)
};

// The table, in the order of the checkpoint's stored options (and of --help).
namespace table {
using O = TrainOptions;
using cli::Resume;
inline const cli::Command<O> kTrain{
    "tapegrad train [options]",
    "Pretrains a GPT on a text as the book's train_model_simple (chapter 5) and prints its log.",
    {
        cli::path("text", &O::text_path, "FILE", "training text")
            .shown_default("the bundled data/sample/sample.txt")
            .stored(Resume::MayChange),
        cli::text("preset", &O::preset, "NAME", "gpt2-124m | tiny").stored(Resume::MustMatch),
        cli::text("tokenizer", &O::tokenizer, "SPEC",
                  "gpt2 | bpe:N, a BPE of N tokens trained on the text")
            .shown_default("tiny: bpe:512, gpt2-124m: gpt2")
            .stored(Resume::MustMatch),
        cli::integer("context", &O::context_length, 2, 1 << 20, "N", "context length")
            .none(0)
            .shown_default("the preset's, 256 / 64")
            .stored(Resume::MustMatch, "context_length"),
        cli::integer("epochs", &O::epochs, 0, kMaxEpochs, "N", "passes over the training text")
            .stored(Resume::MayChange),
        cli::integer("batch-size", &O::batch_size, 1, 1 << 20, "N", "windows per step")
            .stored(Resume::MustMatch),
        cli::real("lr", &O::lr, 0, cli::kInf, "X", "AdamW's learning rate")
            .stored(Resume::MayChange),
        cli::real("weight-decay", &O::weight_decay, 0, cli::kInf, "X", "AdamW's weight decay")
            .stored(Resume::MayChange),
        cli::integer("eval-freq", &O::eval_freq, 1, kMaxCount, "N", "evaluate every N steps")
            .stored(Resume::MayChange),
        cli::integer("eval-iter", &O::eval_iter, 1, kMaxCount, "N", "batches per evaluation")
            .stored(Resume::MayChange),
        // On --resume the generator's state is the checkpoint's: another seed would change no
        // draw, only the record.
        cli::integer("seed", &O::seed, 0, cli::kNoMax, "N", "torch.manual_seed of the run")
            .stored(Resume::MustMatch),
        cli::text("start-context", &O::start_context, "TXT", "the prompt of each epoch's sample")
            .stored(Resume::MayChange),
        cli::integer("sample-tokens", &O::sample_tokens, 0, kMaxSampleTokens, "N",
                     "tokens in each epoch's greedy sample")
            .stored(Resume::MayChange),
        cli::real("clip-grad", &O::clip_grad, 0, cli::kInf, "X",
                  "clip the gradient norm to X; 0: no clipping")
            .stored(Resume::MayChange),
        cli::integer("warmup-steps", &O::warmup_steps, 0, kMaxCount, "N",
                     "linear warmup steps of appendix D's schedule")
            .stored(Resume::MayChange),
        cli::flag("cosine", &O::cosine, "warmup + cosine decay (appendix D)")
            .stored(Resume::MayChange),
        cli::real("initial-lr", &O::initial_lr, 0, cli::kInf, "X", "the warmup's first rate")
            .stored(Resume::MayChange),
        cli::real("min-lr", &O::min_lr, 0, cli::kInf, "X", "the cosine's last rate")
            .none(-1)
            .shown_default("0.1 * lr")
            .stored(Resume::MayChange),
        // Checkpoints from before the fused route ran the book's.
        cli::choice("attention", &O::attention,
                    {nn::kAttentionRoutes.begin(), nn::kAttentionRoutes.end()},
                    "fused: one scaled_dot_product_attention per block; book: the\n"
                    "§3.6.2 MultiHeadAttention op by op. Same model, same numbers to rounding")
            .stored(Resume::MayChange, "", json::quote(nn::kAttentionBook)),
        cli::real("drop-rate", &O::drop_rate, 0, 1, "X", "the probability of every Dropout")
            .half_open()
            .none(-1)
            .shown_default("the preset's, 0.1")
            .stored(Resume::MustMatch, "", "-1"),  // before it: the config's
        // Stored resolved (1, or the process count): a resumed run keeps its bits under any
        // process count that divides it. Checkpoints from before it ran one batch.
        cli::integer("micro-batches", &O::micro_batches, 1, 1 << 20, "K",
                     "cut each batch into K micro-batches whose gradients are summed\n"
                     "(gradient accumulation); under mpirun -np N each rank runs K/N, with\n"
                     "--micro-batches K's numbers bit for bit")
            .none(0)
            .shown_default("1, or N under mpirun -np N")
            .stored(Resume::MayChange, "", "1"),
        // Checkpoints from before it trained in float32.
        cli::choice("precision", &O::precision, {"fp32", "bf16", "bf16-pure"},
                    "fp32: float32 throughout (the book's numbers); bf16: torch.autocast's\n"
                    "bfloat16 for matmuls, Linear and attention, with float32 weights,\n"
                    "gradients and AdamW moments; bf16-pure: the whole model in bfloat16,\n"
                    "as model.to(torch.bfloat16) (the book's ch05/10), AdamW's moments too;\n"
                    "one process, one micro-batch")
            .stored(Resume::MayChange, "", json::quote("fp32")),
        cli::integer("threads", &O::threads, 1, 1024, "N", "threads of the pool (per rank)")
            .none(0)
            .shown_default("TAPEGRAD_THREADS, or the cores it may run on"),
        // Not stored: it changes no number and no byte of the checkpoint (which keeps out_head
        // as [vocab_size, emb_dim]), so a resumed run pads as its own command line says.
        cli::integer("pad-vocab", &O::pad_vocab, 1, nn::kMaxPadVocab, "N",
                     "pad out_head's rows (the logits' vocabulary dimension) with zero rows\n"
                     "to a multiple of N, as llm.c pads 50257 to 50304; the padding takes no\n"
                     "part in the loss or the samples: the same losses and checkpoint, bit\n"
                     "for bit. Not kept by the checkpoint: give it again on --resume"),
        cli::path("out", &O::out_dir, "DIR",
                  "checkpoint.safetensors and loss.svg go here; a DIR that holds a\n"
                  "checkpoint is refused unless --resume or --overwrite is given"),
        cli::flag("overwrite", &O::overwrite, "replace the checkpoint in --out with a fresh run"),
        cli::path("log", &O::log_path, "FILE", "append one JSON line per evaluation"),
        cli::path("resume", &O::resume_dir, "DIR", "continue from DIR's checkpoint"),
        cli::path("init-from", &O::init_from, "DIR",
                  "start from OpenAI's GPT-2 weights in Hugging Face's files\n"
                  "(config.json, model.safetensors): DIR's sizes, DIR's vocab.json +\n"
                  "merges.txt (else GPT-2's tokenizer), as generate --gpt2 DIR"),
        cli::integer("max-steps", &O::max_steps, 1, kMaxCount, "N",
                     "stop (and save) after N steps of this run")
            .none(-1),
        cli::flag("progress", &O::progress, "the progress line on stderr, tty or not")
            .flag_value(1),
        cli::flag("no-progress", &O::progress, "no progress line").flag_value(0),
    },
    std::nullopt,
    "Exit status: 0 done, 1 bad input or failure, 2 bad command line.\n"
    "Ctrl-C or SIGTERM finishes the current step, saves the checkpoint and exits (status 130,\n"
    "143); so does a closed stdout (`| head`), with status 1.\n"
    "Under mpirun -np N (a build with Open MPI) the ranks share each batch; rank 0 reads the\n"
    "files, prints and writes.\n"};
}  // namespace table

inline const cli::Command<TrainOptions>& train_command() { return table::kTrain; }

// Whether --name was on the command line (TrainOptions::explicit_flags).
bool is_explicit(const TrainOptions& o, const std::string& name);

// The stored rows as the JSON object a checkpoint keeps (metadata "options").
std::string options_json(const TrainOptions& o);

// Fills the stored options the user did not give from the checkpoint's; refuses given MustMatch
// ones that differ (UsageError), stored values of the wrong type or range (TrainError).
void merge_resume_options(TrainOptions& o, const json::Value& saved, const std::string& path);

// Range checks of every row (for options set in code) and the checks across options: a
// UsageError naming the flag, or a TrainError naming the checkpoint a value came from.
void check_options(const TrainOptions& o);

// The model's config: the preset's (or o.config, or a "custom" checkpoint's) with --context and
// --drop-rate; fills the defaults that depend on it (context, drop rate, tokenizer, text,
// min_lr) into `o`.
nn::GPTConfig resolve_model_config(TrainOptions& o, const SafeTensors* ckpt,
                                   const std::string& ckpt_path);

}  // namespace tg::train
