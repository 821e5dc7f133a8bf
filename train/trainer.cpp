// Chapter 5's functions under the book's names (see trainer.h): losses, the training loop,
// generation. The session around the loop (options, resuming, checkpoints, progress, log) is
// session.cpp.
#include "train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>

#include "core/autograd.h"
#include "core/json.h"
#include "core/ops.h"
#include "dist/dist.h"
#include "dist/flat_layout.h"

namespace tg::train {

std::string to_json(const EvalPoint& p) {
  return json::object({{"step", std::to_string(p.step)},
                       {"epoch", std::to_string(p.epoch)},
                       {"train_loss", json::number(p.train_loss)},
                       {"val_loss", json::number(p.val_loss)},
                       {"tokens_seen", std::to_string(p.tokens_seen)},
                       {"lr", json::number(p.lr)},
                       {"seconds", json::number(p.seconds)}});
}

// ---- losses ----------------------------------------------------------------------------------

Tensor calc_loss_batch(const Tensor& input_batch, const Tensor& target_batch, nn::GPTModel& model) {
  const Tensor logits = model(input_batch);  // (b, T, vocab), or wider (--pad-vocab)
  // The first vocab_size columns are the classes: a padded vocabulary's are read past in place.
  return cross_entropy(logits.flatten(0, 1), target_batch.flatten(), model.cfg.vocab_size);
}

namespace {
// (inputs, targets), each int64 (rows, max_length).
std::pair<Tensor, Tensor> to_tensors(const data::Batch& b) {
  return {from_vector(b.inputs, {b.batch_size, b.max_length}),
          from_vector(b.targets, {b.batch_size, b.max_length})};
}
}  // namespace

double calc_loss_loader(const data::DataLoader& loader, nn::GPTModel& model, int64_t num_batches) {
  const int64_t n = loader.size();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  num_batches = num_batches < 0 ? n : std::min(num_batches, n);
  // `for i, batch in enumerate(loader)` starts the iterator even when it breaks at once.
  const std::vector<int64_t> order = loader.epoch_order();
  // Under mpirun each rank takes a contiguous share of the batches (dist.h); the sum below runs
  // in batch order on every rank, as one process adds them.
  std::vector<double> losses(size_t(num_batches), 0.0);
  const int64_t first = num_batches * dist::rank() / dist::size();
  const int64_t last = num_batches * (dist::rank() + 1) / dist::size();
  for (int64_t i = first; i < last; ++i) {
    const auto [x, y] = to_tensors(loader.batch(order, i));
    losses[size_t(i)] = calc_loss_batch(x, y, model).item<double>();
  }
  dist::share_batch_losses(losses);
  double total_loss = 0;
  for (const double l : losses) total_loss += l;
  return total_loss / double(num_batches);
}

std::pair<double, double> evaluate_model(nn::GPTModel& model, const data::DataLoader& train_loader,
                                         const data::DataLoader& val_loader, int64_t eval_iter) {
  model.eval();
  double train_loss, val_loss;
  {
    NoGradGuard no_grad;
    train_loss = calc_loss_loader(train_loader, model, eval_iter);
    val_loss = calc_loss_loader(val_loader, model, eval_iter);
  }
  model.train();
  return {train_loss, val_loss};
}

// ---- generation ------------------------------------------------------------------------------

namespace {

// The vocabulary's logits of position t of the first sequence: (vocab,), without the padding of
// a padded vocabulary (--pad-vocab), so no token is ever drawn from it.
Tensor vocab_row(const nn::GPTModel& model, const Tensor& logits, int64_t t) {
  return logits.select(0, 0).select(0, t).slice(0, 0, model.cfg.vocab_size).contiguous();
}

// Logits of the last position for the last context_size tokens of idx: (vocab,)
Tensor last_logits(nn::GPTModel& model, const std::vector<int64_t>& idx, int64_t context_size) {
  const int64_t n = int64_t(idx.size());
  const int64_t start = std::max<int64_t>(0, n - context_size);
  std::vector<int64_t> cond(idx.begin() + start, idx.end());
  const int64_t T = int64_t(cond.size());
  const Tensor logits = model(from_vector(cond, {1, T}));  // (1, T, vocab)
  return vocab_row(model, logits, T - 1);
}

}  // namespace

std::vector<int64_t> generate_text_simple(nn::GPTModel& model, std::vector<int64_t> idx,
                                          int64_t max_new_tokens, int64_t context_size) {
  if (idx.empty()) throw std::invalid_argument("generate_text_simple: empty start context");
  NoGradGuard no_grad;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const Tensor logits = last_logits(model, idx, context_size);
    // softmax is monotonic, so argmax(softmax(logits)) is argmax(logits)
    idx.push_back(argmax(softmax(logits, -1)).item<int64_t>());
  }
  return idx;
}

namespace {

// The book's generate() step after the logits: top-k filter, then a draw from
// softmax(logits / temperature) (torch.multinomial's draws from gen), or argmax when greedy.
int64_t next_token(Tensor logits, double temperature, int64_t top_k, Generator& gen) {
  // A bf16 model's logits widen exactly: the filter and the draw run in float32 on its values.
  if (logits.dtype() == DType::BFloat16) logits = logits.to(DType::Float32);
  const int64_t V = logits.numel();
  if (top_k > 0 && top_k < V) {
    // Keep the top-k logits: everything below the k-th largest becomes -inf.
    std::vector<float> v = logits.to_vector<float>();
    std::vector<float> sorted = v;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    const float min_val = sorted[size_t(top_k - 1)];
    for (float& x : v)
      if (x < min_val) x = -std::numeric_limits<float>::infinity();
    logits = from_vector(v, {V});
  }
  int64_t next;
  if (temperature > 0) {
    const Tensor probs = softmax(logits / temperature, -1).contiguous();
    multinomial(&next, probs.data<float>(), 1, V, 1, /*replacement=*/false, gen);
  } else {
    next = argmax(logits).item<int64_t>();
  }
  return next;
}

}  // namespace

std::vector<int64_t> generate(nn::GPTModel& model, std::vector<int64_t> idx, int64_t max_new_tokens,
                              int64_t context_size, double temperature, int64_t top_k,
                              int64_t eos_id, Generator& gen, const TokenCallback& on_token) {
  if (idx.empty()) throw std::invalid_argument("generate: empty start context");
  NoGradGuard no_grad;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t next = next_token(last_logits(model, idx, context_size), temperature, top_k, gen);
    if (eos_id >= 0 && next == eos_id) break;  // stop at end-of-sequence
    idx.push_back(next);
    if (on_token) on_token(next);
  }
  return idx;
}

std::vector<int64_t> generate_cached(nn::GPTModel& model, std::vector<int64_t> idx,
                                     int64_t max_new_tokens, int64_t context_size,
                                     double temperature, int64_t top_k, int64_t eos_id,
                                     Generator& gen, const TokenCallback& on_token) {
  if (idx.empty()) throw std::invalid_argument("generate_cached: empty start context");
  if (context_size < 1) throw std::invalid_argument("generate_cached: context_size must be >= 1");
  NoGradGuard no_grad;
  model.reset_kv_cache();
  // The cache holds idx[cache_start, cache_end) at positions 0, 1, ...
  int64_t cache_start = 0, cache_end = 0;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t n = int64_t(idx.size());
    // The book's idx_cond = idx[:, -context_size:]. Once that window slides, every token's
    // position changes, so the cache is rebuilt from the window (as the book's loop recomputes it).
    const int64_t start = std::max<int64_t>(0, n - context_size);
    if (cache_end == 0 || start != cache_start) {
      model.reset_kv_cache();
      cache_start = cache_end = start;
    }
    const std::vector<int64_t> fresh(idx.begin() + cache_end, idx.end());
    const int64_t T = int64_t(fresh.size());
    // Only the last position's logits: a rebuild of 1024 tokens would spend a quarter of its
    // FLOPs on out_head's rows for positions nobody samples from.
    const Tensor logits = model.forward(from_vector(fresh, {1, T}), /*use_cache=*/true,
                                        /*last_only=*/true);
    cache_end = n;
    const int64_t next = next_token(vocab_row(model, logits, 0), temperature, top_k, gen);
    if (eos_id >= 0 && next == eos_id) break;  // stop at end-of-sequence
    idx.push_back(next);
    if (on_token) on_token(next);
  }
  model.reset_kv_cache();  // frees the cache's memory
  return idx;
}

std::vector<int64_t> text_to_token_ids(const std::string& text, const data::Tokenizer& tok) {
  const std::vector<int> ids = tok.encode(text, data::SpecialSet::Of({"<|endoftext|>"}));
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string token_ids_to_text(const std::vector<int64_t>& ids, const data::Tokenizer& tok) {
  const std::vector<int> v(ids.begin(), ids.end());
  return tok.decode(v);
}

std::string generate_and_print_sample(nn::GPTModel& model, const data::Tokenizer& tokenizer,
                                      const std::string& start_context, std::ostream& out,
                                      int64_t max_new_tokens) {
  model.eval();
  const int64_t context_size = model.pos_emb->weight.size(0);
  const std::vector<int64_t> encoded = text_to_token_ids(start_context, tokenizer);
  const std::vector<int64_t> token_ids =
      generate_text_simple(model, encoded, max_new_tokens, context_size);
  std::string decoded_text = token_ids_to_text(token_ids, tokenizer);
  for (char& c : decoded_text)
    if (c == '\n') c = ' ';  // compact print format
  out << decoded_text << "\n" << std::flush;
  model.train();
  return decoded_text;
}

// ---- train_model_simple (§5.2) --------------------------------------------------------------

namespace {

void print_eval(std::ostream& out, const EvalPoint& p) {
  char line[128];
  std::snprintf(line, sizeof line, "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n",
                static_cast<long long>(p.epoch), static_cast<long long>(p.step), p.train_loss,
                p.val_loss);
  out << line << std::flush;
}

}  // namespace

bool train_model_simple(nn::GPTModel& model, const data::DataLoader& train_loader,
                        const data::DataLoader& val_loader, AdamW& optimizer, int64_t num_epochs,
                        int64_t eval_freq, int64_t eval_iter, const std::string& start_context,
                        const data::Tokenizer& tokenizer, TrainLoop& loop) {
  RunPosition& pos = loop.pos;  // the book's tokens_seen, global_step and loss lists, and more
  TrainHooks& hooks = loop.hooks;
  const int64_t n_batches = train_loader.size();
  while (pos.epoch < num_epochs) {
    model.train();
    // `for input_batch, target_batch in train_loader` shuffles once per epoch; a resumed epoch
    // keeps the order it was interrupted in.
    if (pos.batch == 0) pos.epoch_order = train_loader.epoch_order();
    while (pos.batch < n_batches) {
      hooks.before_step(pos.global_step + 1);
      optimizer.zero_grad();  // reset loss gradients from the previous batch
      const data::Batch batch = train_loader.batch(pos.epoch_order, pos.batch);
      double loss_value;
      if (loop.runner) {  // micro-batches or ranks (train/data_parallel.h)
        // Backward inside the scope casts nothing: the operands it saved are bf16 already.
        AutocastGuard autocast(loop.autocast);
        loss_value = loop.runner->loss_and_backward(batch, model);
        hooks.check_loss(loss_value);
        hooks.before_update();
        loop.runner->update(optimizer);
      } else {
        const auto [input_batch, target_batch] = to_tensors(batch);
        Tensor loss;
        {
          AutocastGuard autocast(loop.autocast);
          loss = calc_loss_batch(input_batch, target_batch, model);
        }
        loss_value = loss.item<double>();
        hooks.check_loss(loss_value);
        loss.backward();  // calculate loss gradients
        hooks.before_update();
        optimizer.step();  // update model weights using loss gradients
      }
      pos.tokens_seen += batch.batch_size * batch.max_length;
      ++pos.global_step;
      ++pos.batch;

      if (pos.global_step % eval_freq == 0) {  // optional evaluation step
        AutocastGuard autocast(loop.autocast);
        const auto [train_loss, val_loss] =
            evaluate_model(model, train_loader, val_loader, eval_iter);
        const EvalPoint p{pos.epoch + 1, pos.global_step, pos.tokens_seen, train_loss,
                          val_loss,      optimizer.lr,    hooks.seconds()};
        pos.history.push_back(p);
        hooks.before_print();
        print_eval(loop.out, p);
        hooks.after_eval(p);
      }
      if (hooks.after_step(loss_value)) return false;
    }
    // Print a sample text after each epoch
    hooks.before_print();
    const std::string sample = loop.print_sample
                                   ? generate_and_print_sample(model, tokenizer, start_context,
                                                               loop.out, loop.sample_tokens)
                                   : std::string();
    ++pos.epoch;
    pos.batch = 0;
    pos.epoch_order.clear();
    if (hooks.after_epoch(sample)) return false;
  }
  return true;
}

}  // namespace tg::train
