// Chapter 5's training loop, evaluation and generation (see trainer.h); the checkpoints it
// writes and resumes from are in checkpoint.cpp, its options in train_options.cpp.
#include "train/trainer.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "core/autograd.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/ops.h"
#include "core/threadpool.h"
#include "data/bpe_train.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/plot.h"
#include "train/safetensors.h"
#include "train/train_options.h"

namespace tg::train {

namespace fs = std::filesystem;

// ---- losses ----------------------------------------------------------------------------------

Tensor calc_loss_batch(const Tensor& input_batch, const Tensor& target_batch, nn::GPTModel& model) {
  const Tensor logits = model(input_batch);  // (b, T, vocab)
  return cross_entropy(logits.flatten(0, 1), target_batch.flatten());
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
  double total_loss = 0;
  for (int64_t i = 0; i < num_batches; ++i) {
    const auto [x, y] = to_tensors(loader.batch(order, i));
    total_loss += calc_loss_batch(x, y, model).item<double>();
  }
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

// Logits of the last position for the last context_size tokens of idx: (vocab,)
Tensor last_logits(nn::GPTModel& model, const std::vector<int64_t>& idx, int64_t context_size) {
  const int64_t n = int64_t(idx.size());
  const int64_t start = std::max<int64_t>(0, n - context_size);
  std::vector<int64_t> cond(idx.begin() + start, idx.end());
  const int64_t T = int64_t(cond.size());
  const Tensor logits = model(from_vector(cond, {1, T}));  // (1, T, vocab)
  return logits.select(0, 0).select(0, T - 1).contiguous();
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

std::vector<int64_t> generate(nn::GPTModel& model, std::vector<int64_t> idx, int64_t max_new_tokens,
                              int64_t context_size, double temperature, int64_t top_k,
                              int64_t eos_id, Generator& gen) {
  if (idx.empty()) throw std::invalid_argument("generate: empty start context");
  NoGradGuard no_grad;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    Tensor logits = last_logits(model, idx, context_size);
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
    if (eos_id >= 0 && next == eos_id) break;  // stop at end-of-sequence
    idx.push_back(next);
  }
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

void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

std::atomic<bool>& stop_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

// ---- the session -----------------------------------------------------------------------------

namespace {

std::string read_text_file(const std::string& path) {
  if (fs::is_directory(path)) throw TrainError("text file '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TrainError("cannot read text file '" + path + "' (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Byte offset of code point `n` (Python's len() counts code points, not bytes).
size_t utf8_offset_of_char(const std::string& s, size_t n) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (chars == n) return i;
      ++chars;
    }
  }
  return s.size();
}
size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::unique_ptr<data::Tokenizer> make_tokenizer(const std::string& spec,
                                                const std::string& train_text) {
  if (spec == "gpt2") {
    try {
      return std::make_unique<data::Tokenizer>(data::Tokenizer::gpt2());
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  }
  if (spec.rfind("bpe:", 0) == 0) {
    const std::string n = spec.substr(4);
    char* end = nullptr;
    const long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0' || v < 256 || v > 100000)
      throw TrainError("bad tokenizer '" + spec + "': bpe:N needs 256 <= N <= 100000");
    // Trained on the training split only, so validation text stays unseen. bpe:256 is plain
    // bytes (no merges).
    return std::make_unique<data::Tokenizer>(
        data::bpe_train(train_text, int(v), {"<|endoftext|>"}));
  }
  throw TrainError("unknown tokenizer '" + spec + "' (known: gpt2, bpe:N)");
}

std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  return buf;
}

void append_log_line(const std::string& path, const std::string& line) {
  try {
    tg::append_line(path, line);
  } catch (const std::exception& e) {
    throw TrainError(std::string("cannot write log file: ") + e.what());
  }
}

std::string fmt3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

TrainResult run_training(const TrainOptions& opt_in, std::ostream& out, std::ostream& err) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  TrainOptions opt = opt_in;
  TrainResult result;

  // --- a checkpoint to resume supplies the options not given explicitly ---
  SafeTensors ckpt;
  std::string ckpt_in;
  const bool resuming = !opt.resume_dir.empty();
  if (resuming) {
    ckpt_in = checkpoint_path(opt.resume_dir);
    if (!fs::exists(ckpt_in)) throw TrainError(ckpt_in + ": no checkpoint to resume from");
    ckpt = read_checkpoint(ckpt_in);
    const json::Value saved = options_from_checkpoint(ckpt, ckpt_in);
    merge_resume_options(opt, saved, ckpt_in);
    if (!is_explicit(opt, "out")) opt.out_dir = opt.resume_dir;
  }

  // --- options ---
  check_options(opt);
  if (opt.threads > 0) set_num_threads(opt.threads);
  if (!opt.log_path.empty()) {  // an unwritable log is found now, not after the first evaluation
    const int fd = ::open(opt.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
      throw TrainError("cannot write log file '" + opt.log_path + "' (" + std::strerror(errno) +
                       ")");
    ::close(fd);
  }

  nn::GPTConfig cfg = resolve_model_config(opt, resuming ? &ckpt : nullptr, ckpt_in);

  // --- text: the book's 90/10 split by characters ---
  const std::string text_data = read_text_file(opt.text_path);
  if (text_data.empty()) throw TrainError("text file '" + opt.text_path + "' is empty");
  const size_t n_chars = utf8_length(text_data);
  const size_t split_idx = size_t(0.90 * double(n_chars));  // int(train_ratio * len(text_data))
  const size_t split_byte = utf8_offset_of_char(text_data, split_idx);
  const std::string train_text = text_data.substr(0, split_byte);
  const std::string val_text = text_data.substr(split_byte);

  // --- tokenizer and model config ---
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (resuming) {
    tokenizer = tokenizer_from_checkpoint(ckpt, ckpt_in);
    // Before the vocabulary sizes a model: a corrupt tokenizer entry must not allocate one.
    if (tokenizer->n_vocab() > config_from_checkpoint(ckpt, ckpt_in).vocab_size)
      throw TrainError(ckpt_in + ": checkpoint tokenizer has " +
                       std::to_string(tokenizer->n_vocab()) +
                       " tokens, more than its model's vocab_size");
    if (ckpt.metadata["text_hash"] != text_hash(text_data))
      throw TrainError("'" + opt.text_path + "' is not the text checkpoint " + ckpt_in +
                       " was trained on");
  } else {
    tokenizer = make_tokenizer(opt.tokenizer, train_text);
  }
  if (opt.preset == "tiny" || opt.preset == "custom") cfg.vocab_size = tokenizer->n_vocab();
  if (tokenizer->n_vocab() > cfg.vocab_size)
    throw TrainError("tokenizer " + opt.tokenizer + " has " + std::to_string(tokenizer->n_vocab()) +
                     " tokens, more than preset " + opt.preset + "'s vocab_size " +
                     std::to_string(cfg.vocab_size));

  // --- data: train loader shuffled with drop_last, validation loader in order ---
  const int64_t T = cfg.context_length;
  auto make_dataset = [&](const std::string& txt, const char* which) {
    std::vector<int> ids;
    try {
      ids = tokenizer->encode(txt, data::SpecialSet::Of({"<|endoftext|>"}));
    } catch (const std::exception& e) {
      throw TrainError(std::string(which) + " text does not tokenize: " + e.what());
    }
    if (int64_t(ids.size()) < T + 1)
      throw TrainError("text too short: the " + std::string(which) + " split of '" + opt.text_path +
                       "' has " + std::to_string(ids.size()) + " tokens, one window of context " +
                       std::to_string(T) + " needs " + std::to_string(T + 1) +
                       " (use a longer text or a smaller --context)");
    return std::make_shared<const data::GPTDatasetV1>(std::vector<int64_t>(ids.begin(), ids.end()),
                                                      T, T);
  };
  // Both loaders draw from the global generator, as torch's do; constructing them draws nothing.
  Generator& gen = default_generator();
  const data::DataLoader train_loader(make_dataset(train_text, "training"), opt.batch_size,
                                      /*shuffle=*/true, /*drop_last=*/true, gen);
  const data::DataLoader val_loader(make_dataset(val_text, "validation"), opt.batch_size,
                                    /*shuffle=*/false, /*drop_last=*/false, gen);
  const int64_t n_batches = train_loader.size();
  if (n_batches == 0)
    throw TrainError("text too short: " + std::to_string(train_loader.dataset().size()) +
                     " training windows of " + std::to_string(T) +
                     " tokens, fewer than one batch of " + std::to_string(opt.batch_size));

  // --- model and optimizer: manual_seed, then GPTModel's draws, as the book ---
  manual_seed(opt.seed);
  nn::GPTModel model(cfg);
  AdamW optimizer(model, opt.lr, opt.weight_decay);

  RunPosition pos;  // a fresh run: no steps yet
  if (resuming) {
    if (config_from_checkpoint(ckpt, ckpt_in) != cfg)
      throw TrainError(ckpt_in + ": checkpoint config " + ckpt.metadata["config"] +
                       " differs from " + cfg.str() + " (a checkpoint from another config)");
    pos = restore_checkpoint(ckpt, ckpt_in, model, optimizer, gen, n_batches,
                             train_loader.dataset().size());
    result.evals = pos.history;
  }
  int64_t global_step = pos.global_step, tokens_seen = pos.tokens_seen;
  const int64_t epoch_start = pos.epoch, batch_start = pos.batch;

  // --- output directory ---
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec || !fs::is_directory(opt.out_dir))
    throw TrainError("cannot create output directory '" + opt.out_dir + "' (" + ec.message() + ")");
  const std::string ckpt_out = (fs::path(opt.out_dir) / kCheckpointFile).string();
  const std::string plot_out = (fs::path(opt.out_dir) / "loss.svg").string();
  std::string last_good = resuming ? ckpt_in : "";

  auto elapsed = [&] {
    return pos.seconds + std::chrono::duration<double>(Clock::now() - t_start).count();
  };
  const std::string options = options_json(opt), hash = text_hash(text_data);
  const RunRecipe recipe{cfg, opt.preset, options, opt.tokenizer, *tokenizer, hash};
  auto save = [&](int64_t epoch, int64_t batch, const std::vector<int64_t>& order) {
    const RunPosition at{global_step, tokens_seen, epoch, batch, elapsed(), order, result.evals};
    save_checkpoint(ckpt_out, model, optimizer, gen, recipe, at);
    last_good = ckpt_out;
    result.checkpoint = ckpt_out;
  };
  auto write_plot = [&] {
    try {
      plot_losses(plot_out, result.evals, opt.epochs);
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  };

  const bool show_progress = opt.progress == 1 || (opt.progress < 0 && ::isatty(2));
  auto clear_progress = [&] {
    if (show_progress) err << "\r\033[K" << std::flush;
  };
  const int64_t total_steps = n_batches * opt.epochs;
  const bool scheduled = opt.cosine || opt.warmup_steps > 0;
  const int64_t context_size = model.pos_emb->weight.size(0);
  const std::vector<int64_t> start_ids = text_to_token_ids(opt.start_context, *tokenizer);
  if (start_ids.empty()) throw TrainError("--start-context is empty");

  if (resuming)
    err << "resuming " << ckpt_in << " at epoch " << epoch_start + 1 << ", step " << global_step + 1
        << "\n";
  if (resuming && epoch_start >= opt.epochs)
    err << "nothing to do: the checkpoint has finished " << epoch_start
        << " epochs (raise --epochs)\n";
  else if (opt.epochs == 0)
    err << "nothing to do: --epochs 0\n";

  int64_t steps_this_run = 0;
  auto run_start = Clock::now();
  int64_t tokens_this_run = 0;
  for (int64_t epoch = epoch_start; epoch < opt.epochs; ++epoch) {
    model.train();
    std::vector<int64_t> order;
    int64_t b0 = 0;
    if (epoch == epoch_start && batch_start > 0) {
      order = pos.epoch_order;
      b0 = batch_start;
    } else {
      order = train_loader.epoch_order();
    }
    for (int64_t b = b0; b < n_batches; ++b) {
      if (scheduled)
        optimizer.lr = warmup_cosine_lr(global_step + 1, total_steps, opt.warmup_steps,
                                        opt.initial_lr, opt.lr, opt.min_lr);
      optimizer.zero_grad();  // reset loss gradients from the previous batch
      const auto [input_batch, target_batch] = to_tensors(train_loader.batch(order, b));
      Tensor loss = calc_loss_batch(input_batch, target_batch, model);
      const double loss_value = loss.item<double>();
      if (!std::isfinite(loss_value)) {
        clear_progress();
        const char* lv = std::isnan(loss_value) ? "nan" : loss_value > 0 ? "inf" : "-inf";
        throw TrainError("loss is " + std::string(lv) + " at epoch " + std::to_string(epoch + 1) +
                         ", step " + std::to_string(global_step + 1) + " (lr " +
                         json::number(optimizer.lr) + "); stopped, " +
                         (last_good.empty() ? std::string("no checkpoint was written yet")
                                            : "the last good checkpoint is " + last_good));
      }
      loss.backward();  // calculate loss gradients
      if (opt.clip_grad > 0) clip_grad_norm(model, opt.clip_grad);
      optimizer.step();  // update model weights using loss gradients
      tokens_seen += input_batch.numel();
      tokens_this_run += input_batch.numel();
      ++global_step;
      ++steps_this_run;
      result.step_losses.push_back(loss_value);

      if (global_step % opt.eval_freq == 0) {
        const auto [train_loss, val_loss] =
            evaluate_model(model, train_loader, val_loader, opt.eval_iter);
        EvalPoint p{epoch + 1, global_step,  tokens_seen, train_loss,
                    val_loss,  optimizer.lr, elapsed()};
        result.evals.push_back(p);
        clear_progress();
        char step[16];
        std::snprintf(step, sizeof step, "%06lld", static_cast<long long>(global_step));
        out << "Ep " << epoch + 1 << " (Step " << step << "): Train loss " << fmt3(train_loss)
            << ", Val loss " << fmt3(val_loss) << "\n"
            << std::flush;
        if (!opt.log_path.empty())
          append_log_line(opt.log_path, "{\"step\": " + std::to_string(global_step) +
                                            ", \"epoch\": " + std::to_string(epoch + 1) +
                                            ", \"train_loss\": " + json::number(train_loss) +
                                            ", \"val_loss\": " + json::number(val_loss) +
                                            ", \"tokens_seen\": " + std::to_string(tokens_seen) +
                                            ", \"lr\": " + json::number(optimizer.lr) +
                                            ", \"seconds\": " + json::number(p.seconds) + "}");
      }
      if (show_progress) {
        const double dt = std::chrono::duration<double>(Clock::now() - run_start).count();
        const double tps = dt > 0 ? double(tokens_this_run) / dt : 0;
        const int64_t done = epoch * n_batches + b + 1;
        const double per_step = dt / double(steps_this_run);
        err << "\r\033[Kep " << epoch + 1 << "/" << opt.epochs << "  step " << done << "/"
            << total_steps << "  loss " << fmt3(loss_value) << "  " << int64_t(tps)
            << " tok/s  ETA " << fmt_duration(per_step * double(total_steps - done)) << std::flush;
      }
      if (opt.on_step) opt.on_step(global_step);
      if (stop_requested().load() || (opt.max_steps >= 0 && steps_this_run >= opt.max_steps)) {
        clear_progress();
        save(epoch, b + 1, order);
        write_plot();
        err << "stopped after step " << global_step << "; checkpoint " << ckpt_out
            << " (continue with --resume " << opt.out_dir << ")\n";
        result.interrupted = true;
        result.global_step = global_step;
        return result;
      }
    }
    // Print a sample text after each epoch
    clear_progress();
    model.eval();
    const std::vector<int64_t> ids =
        generate_text_simple(model, start_ids, opt.sample_tokens, context_size);
    std::string decoded = token_ids_to_text(ids, *tokenizer);
    for (char& c : decoded)
      if (c == '\n') c = ' ';  // compact print format
    out << decoded << "\n" << std::flush;
    result.samples.push_back(decoded);
    model.train();
    save(epoch + 1, 0, {});
    write_plot();
    if (stop_requested().load()) {
      err << "stopped after epoch " << epoch + 1 << "; checkpoint " << ckpt_out << "\n";
      result.interrupted = true;
      break;
    }
  }
  result.global_step = global_step;
  if (!result.interrupted && epoch_start < opt.epochs) {
    const double minutes = std::chrono::duration<double>(Clock::now() - t_start).count() / 60;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", minutes);
    err << "Training completed in " << buf << " minutes. Checkpoint: " << ckpt_out
        << ", plot: " << plot_out << "\n";
  }
  return result;
}

}  // namespace tg::train
