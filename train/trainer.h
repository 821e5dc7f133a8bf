// Chapter 5's pretraining loop on tapegrad, under the book's names: calc_loss_batch,
// calc_loss_loader, evaluate_model, train_model_simple, generate_and_print_sample (trainer.cpp),
// generate_text_simple (ch. 4) and generate (§5.3). The `tapegrad train` session around the loop
// is session.h's run_training.
//
// Python reference: pkg/llms_from_scratch/ch05.py and ch05/01_main-chapter-code/gpt_train.py.
// The order of random draws is the book's: manual_seed(seed), GPTModel's initialisation, then per
// epoch `for batch in train_loader` (two W64 for the shuffle, docs/torch_rng.md §6) and the dropout
// masks of each forward; every evaluation iterates train_loader (two W64) and val_loader (one
// W64, it does not shuffle). So with the same seed the losses follow PyTorch's run.
//
// Gradient accumulation and several processes plug in through TrainLoop::runner
// (train/data_parallel.h). Mixed precision is TrainLoop::autocast.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "data/bpe_tokenizer.h"
#include "data/gpt_dataset.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/train_options.h"

namespace tg::train {

// cross_entropy(logits.flatten(0, 1), target_batch.flatten()), over the first vocab_size columns
// of a padded vocabulary's logits (--pad-vocab: the same loss, read in place)
Tensor calc_loss_batch(const Tensor& input_batch, const Tensor& target_batch, nn::GPTModel& model);
// Mean loss over the first num_batches batches (all when num_batches < 0); NaN for an empty
// loader (without drawing, as the book returns before iterating). Draws from the loader's
// generator as one iter(loader) does.
double calc_loss_loader(const data::DataLoader& loader, nn::GPTModel& model, int64_t num_batches);
// (train_loss, val_loss) over eval_iter batches each, in eval mode and without gradients.
std::pair<double, double> evaluate_model(nn::GPTModel& model, const data::DataLoader& train_loader,
                                         const data::DataLoader& val_loader, int64_t eval_iter);

// Greedy decoding of one sequence (chapter 4): appends max_new_tokens argmax tokens, each
// predicted from the last context_size tokens.
std::vector<int64_t> generate_text_simple(nn::GPTModel& model, std::vector<int64_t> idx,
                                          int64_t max_new_tokens, int64_t context_size);
// Called with each new token as it is appended (generate --stream).
using TokenCallback = std::function<void(int64_t)>;
// The book's generate(): top_k > 0 masks all but the k largest logits with -inf; temperature > 0
// samples from softmax(logits / temperature) with torch.multinomial's draws from `gen`;
// temperature == 0 is greedy. Stops early when eos_id >= 0 is produced (it is not appended).
std::vector<int64_t> generate(nn::GPTModel& model, std::vector<int64_t> idx, int64_t max_new_tokens,
                              int64_t context_size, double temperature, int64_t top_k,
                              int64_t eos_id, Generator& gen, const TokenCallback& on_token = {});
// The same tokens as generate() through the model's KV cache (GPTModel::forward(x, true), the
// book's bonus generate_text_simple_cached with generate()'s sampling): the prompt runs once, then
// each new token is one row through the model. Past context_size tokens the book's loop crops the
// context to its last context_size tokens, which moves every position, so from there each step
// rebuilds the cache from the cropped context (the uncached cost). context_size must not exceed
// the model's context_length. Leaves the model's cache empty.
std::vector<int64_t> generate_cached(nn::GPTModel& model, std::vector<int64_t> idx,
                                     int64_t max_new_tokens, int64_t context_size,
                                     double temperature, int64_t top_k, int64_t eos_id,
                                     Generator& gen, const TokenCallback& on_token = {});

// The book's text_to_token_ids / token_ids_to_text.
std::vector<int64_t> text_to_token_ids(const std::string& text, const data::Tokenizer& tok);
std::string token_ids_to_text(const std::vector<int64_t>& ids, const data::Tokenizer& tok);

// max_new_tokens greedy tokens after start_context, printed on one line (newlines as spaces),
// in eval mode; returns the line.
std::string generate_and_print_sample(nn::GPTModel& model, const data::Tokenizer& tokenizer,
                                      const std::string& start_context, std::ostream& out,
                                      int64_t max_new_tokens = 50);

// --- train_model_simple (§5.2) --------------------------------------------------------------

struct EvalPoint {
  int64_t epoch = 0, step = 0, tokens_seen = 0;
  double train_loss = 0, val_loss = 0, lr = 0, seconds = 0;
};

// {"step": 0, "epoch": 1, "train_loss": …, "val_loss": …, "tokens_seen": …, "lr": …,
// "seconds": …}: a line of --log and an entry of a checkpoint's history.
std::string to_json(const EvalPoint& p);

// Where a run stands after its last optimizer step.
struct RunPosition {
  int64_t global_step = -1, tokens_seen = 0;
  int64_t epoch = 0;                 // epochs completed, or the epoch in progress when batch > 0
  int64_t batch = 0;                 // batches of that epoch already trained
  double seconds = 0;                // training time so far, earlier runs included
  std::vector<int64_t> epoch_order;  // the epoch's window order, kept when batch > 0
  std::vector<EvalPoint> history;    // every evaluation so far: the book's three loss lists
};

// What a session adds to the book's loop. Every default does nothing, so with TrainHooks{} the
// loop is the book's.
class TrainHooks {
 public:
  virtual ~TrainHooks() = default;
  virtual void before_step(int64_t /*step*/) {}               // before zero_grad (the lr schedule)
  virtual void check_loss(double /*loss*/) {}                 // before backward (refuse a NaN)
  virtual void before_update() {}                             // before optimizer.step() (clipping)
  virtual void before_print() {}                              // before a log line or a sample
  virtual double seconds() { return 0; }                      // EvalPoint::seconds
  virtual void after_eval(const EvalPoint& /*p*/) {}          // after its line is printed
  virtual bool after_step(double /*loss*/) { return false; }  // true: stop
  virtual bool after_epoch(const std::string& /*sample*/) { return false; }  // true: stop
};

// How a step makes and applies its gradient when it is more than the book's one batch:
// micro-batches, or several processes (train/data_parallel.h).
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // The global batch's mean loss; its gradient is in the parameters' .grad() (on several ranks:
  // at least this rank's shard of it).
  virtual double loss_and_backward(const data::Batch& batch, nn::GPTModel& model) = 0;
  // optimizer.step()'s place.
  virtual void update(AdamW& optimizer) = 0;
};

// train_model_simple's arguments beyond the book's: where its print() goes, where it starts (a
// fresh RunPosition, or a checkpoint's) and is kept up to date, the hooks, the sample's length,
// and a StepRunner for micro-batches or ranks (none: the book's step).
struct TrainLoop {
  std::ostream& out;
  RunPosition& pos;
  TrainHooks& hooks;
  int64_t sample_tokens = 50;
  StepRunner* runner = nullptr;
  bool print_sample = true;  // false on the ranks that do not print (rank 0 prints)
  // --precision bf16: each forward (training and evaluation) under AutocastGuard (core/ops.h),
  // as `with torch.autocast("cpu", dtype=torch.bfloat16):` around the book's calls.
  bool autocast = false;
};

// The book's loop: for each epoch, for each batch of train_loader: zero_grad, calc_loss_batch,
// backward, optimizer.step(); every eval_freq steps evaluate_model over eval_iter batches and
// print "Ep 1 (Step 000000): Train loss 9.781, Val loss 9.933"; after each epoch
// generate_and_print_sample. Evaluations are appended to loop.pos.history. Returns false when a
// hook stopped it early.
bool train_model_simple(nn::GPTModel& model, const data::DataLoader& train_loader,
                        const data::DataLoader& val_loader, AdamW& optimizer, int64_t num_epochs,
                        int64_t eval_freq, int64_t eval_iter, const std::string& start_context,
                        const data::Tokenizer& tokenizer, TrainLoop& loop);

}  // namespace tg::train
