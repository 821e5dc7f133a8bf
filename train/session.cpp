// The `tapegrad train` session (see trainer.h): everything around the book's loop. It reads the
// options (and on --resume the checkpoint's) and the text, prepares the book's data from it
// (data/training_data.h: the split, the tokenizer, the loaders), builds the model in the book's
// order of random draws, then runs train_model_simple with hooks for the learning-rate schedule,
// clipping, the progress line, the JSON log, checkpoints and Ctrl-C.
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/file_io.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "core/threadpool.h"
#include "data/training_data.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dist_setup.h"
#include "train/gpt2_weights.h"
#include "train/optim.h"
#include "train/plot.h"
#include "train/session.h"
#include "train/train_options.h"
#include "train/trainer.h"

namespace tg::train {

namespace fs = std::filesystem;

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

std::atomic<int>& stop_signal() {
  static std::atomic<int> sig{0};
  return sig;
}

namespace {

void on_stop_signal(int sig) {
  stop_signal().store(sig);
  stop_requested().store(true);
  std::signal(sig, SIG_DFL);  // a second one stops at once
}

// "SIGTERM" for the stop messages; a stop requested without a signal (tests) is Ctrl-C's.
std::string stop_signal_name() { return stop_signal().load() == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace

void install_stop_handlers() {
  stop_signal().store(0);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

void remove_stop_handlers() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

int stop_exit_status(const TrainResult& r) {
  if (!r.interrupted || !stop_requested().load()) return 0;
  return 128 + (stop_signal().load() == SIGTERM ? SIGTERM : SIGINT);
}

namespace {

// Training texts beyond this are refused, as tokenize and bpe-train refuse them (a text of that
// size would not fit in memory with its tokens, windows and the model anyway).
constexpr uint64_t kMaxTextBytes = uint64_t(1) << 30;

std::string read_text_file(const std::string& path) {
  try {
    return read_regular_file(path, kMaxTextBytes, "text");
  } catch (const std::exception& e) {
    throw TrainError(std::string("cannot read text file ") + e.what());
  }
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

std::string fmt3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// An unwritable log is found before training, not after the first evaluation. O_NONBLOCK: a
// FIFO without a reader would block the open; only a regular file is a log.
void check_log_writable(const std::string& path) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENXIO)  // a FIFO nobody reads
    throw TrainError("cannot write log file '" + path + "' (not a regular file)");
  if (fd < 0)
    throw TrainError("cannot write log file '" + path + "' (" + std::strerror(errno) + ")");
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  if (!regular) throw TrainError("cannot write log file '" + path + "' (not a regular file)");
}

// Moves the default generator on as one more GPTModel(cfg) would, without building it: runs from
// --init-from have always continued there (the loader once built a model of its own), so their
// dropout stays. `words`: what the last initialisation drew, from a fresh seed's empty Box-Muller
// cache. From an empty cache the same draws take as many words and leave it empty, so a skip
// lands exactly; a cache left full (a position embedding under 16 values, an odd count: normal()'s
// scalar path) is only reproduced by drawing, from a model that small.
void skip_model_init(const nn::GPTConfig& cfg, uint64_t words) {
  if (default_generator().has_next_double_normal()) {
    const nn::GPTModel replay(cfg);
    return;
  }
  default_generator().discard(words);
}

using Clock = std::chrono::steady_clock;

// One run of `tapegrad train`: set-up in the constructor (each step may throw a TrainError),
// then run() drives train_model_simple, whose hooks are the methods below.
class Session final : public TrainHooks {
 public:
  Session(const TrainOptions& opt, std::ostream& out, std::ostream& err);
  TrainResult run();

 private:
  void resume_options();
  void init_from_gpt2();
  void load_text_and_tokenizer();
  void make_loaders();
  void make_model();
  void load_gpt2_into_model(uint64_t init_words);
  void claim_outputs();
  void open_output_dir();
  void refuse_overwrite() const;

  // hooks
  void before_step(int64_t step) override;
  void check_loss(double loss) override;
  void before_update() override;
  void before_print() override;
  double seconds() override;
  void after_eval(const EvalPoint& p) override;
  bool after_step(double loss) override;
  bool after_epoch(const std::string& sample) override;

  void stop_if_stdout_lost();
  void save();
  void write_plot();
  void show_progress(double loss);

  // The output folder: made by this run (removed again if left empty), locked while it runs.
  struct OutputDir {
    std::string path;
    bool created = false;
    DirLock lock;
    ~OutputDir() {
      lock.release();
      if (created) ::rmdir(path.c_str());  // fails, as it should, unless the run wrote nothing
    }
  };

  const Clock::time_point t_start_ = Clock::now();
  OutputDir out_dir_;
  TrainOptions opt_;
  std::ostream& out_;
  std::ostream& err_;
  TrainResult result_;
  // --resume: the checkpoint read, and its path
  bool resuming_ = false;
  SafeTensors ckpt_;
  std::string ckpt_in_;
  nn::GPTConfig cfg_;
  std::string text_data_;
  data::TextSplits splits_;  // the text, 90/10
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::optional<data::DataLoader> train_loader_, val_loader_;
  std::unique_ptr<nn::GPTModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<DataParallelStep> runner_;  // micro-batches or ranks; none: the book's step
  RunPosition pos_;                           // a fresh run: no steps yet
  double seconds_before_ = 0;                 // training time of the runs this one resumes
  std::string ckpt_out_, plot_out_, last_good_, options_, hash_;
  // progress
  bool show_progress_ = false;
  Clock::time_point run_start_;
  int64_t steps_this_run_ = 0, tokens_at_start_ = 0;
};

Session::Session(const TrainOptions& opt, std::ostream& out, std::ostream& err)
    : opt_(opt), out_(out), err_(err) {
  check_same_options(opt_);  // under mpirun: one build, one set of options
  resuming_ = !opt_.resume_dir.empty();
  if (resuming_) resume_options();
  check_options(opt_);
  resolve_micro_batches(opt_);
  if (opt_.precision == "bf16-pure" && opt_.micro_batches > 1)  // their exchange is float32
    throw UsageError("--precision bf16-pure runs one micro-batch in one process, not " +
                     (dist::size() > 1
                          ? "under mpirun -np " + std::to_string(dist::size())
                          : "with --micro-batches " + std::to_string(opt_.micro_batches)));
  const int cores = default_threads();  // on every rank: a collective under mpirun
  if (opt_.threads > 0)
    set_num_threads(opt_.threads);
  else if (!std::getenv("TAPEGRAD_THREADS"))  // the cores this rank may use (its affinity)
    set_num_threads(cores);
  if (!opt_.init_from.empty()) init_from_gpt2();  // every rank: its config sizes the model
  cfg_ = resolve_model_config(opt_, resuming_ ? &ckpt_ : nullptr, ckpt_in_);
  // Files are rank 0's (data_parallel.h): its errors reach every rank.
  on_root([&] { claim_outputs(); });
  on_root([&] { load_text_and_tokenizer(); });
  dist::broadcast(&cfg_.vocab_size, sizeof cfg_.vocab_size);
  // The other ranks never encode, print or save: a byte tokenizer stands in for rank 0's.
  if (!tokenizer_)
    tokenizer_ = std::make_unique<data::Tokenizer>(data::Tokenizer::from_merges({}, {}));
  make_loaders();
  make_model();
  on_root([&] {
    open_output_dir();
    if (text_to_token_ids(opt_.start_context, *tokenizer_).empty())
      throw UsageError("--start-context is empty");
  });
}

// A checkpoint to resume supplies the options not given explicitly.
void Session::resume_options() {
  ckpt_in_ = checkpoint_path(opt_.resume_dir);
  ckpt_ = read_checkpoint_on_root(ckpt_in_);  // read by rank 0, parsed by every rank
  const json::Value saved = options_from_checkpoint(ckpt_, ckpt_in_);
  merge_resume_options(opt_, saved, ckpt_in_);
  if (!is_explicit(opt_, "out")) opt_.out_dir = opt_.resume_dir;
}

// --init-from DIR: the run's config is DIR's (the book's NEW_CONFIG for GPT-2), its tokenizer
// DIR's vocab.json + merges.txt or GPT-2's (load_text_and_tokenizer); make_model loads the
// weights.
void Session::init_from_gpt2() {
  if (resuming_)
    throw UsageError("--init-from starts a run from GPT-2's weights; it does not go with --resume");
  if (is_explicit(opt_, "preset"))
    throw UsageError(
        "--init-from takes the model's sizes from DIR's config.json; it does not go "
        "with --preset");
  if (opt_.tokenizer.empty()) opt_.tokenizer = "gpt2";
  if (opt_.tokenizer != "gpt2")
    throw UsageError("--init-from trains GPT-2 with GPT-2's tokenizer, not --tokenizer " +
                     opt_.tokenizer);
  // Rank 0 reads DIR (the other machines need no copy of it) and sends its config.json.
  std::string text;
  on_root([&] { text = read_gpt2_config_text(opt_.init_from); });
  dist::broadcast(text);
  opt_.config = gpt2_config_from_json(text, (fs::path(opt_.init_from) / "config.json").string());
}

void Session::load_text_and_tokenizer() {
  try {
    text_data_ = read_text_file(opt_.text_path);
  } catch (const TrainError& e) {
    // A relative path stored by the run that wrote the checkpoint is relative to where it ran.
    if (!resuming_ || is_explicit(opt_, "text") || fs::path(opt_.text_path).is_absolute()) throw;
    throw TrainError(std::string(e.what()) + " (the --text stored in " + ckpt_in_ +
                     ", relative to the folder that run started in; give --text)");
  }
  if (text_data_.empty()) throw TrainError("text file '" + opt_.text_path + "' is empty");
  splits_ = data::split_train_val(text_data_);
  hash_ = text_hash(text_data_);
  std::string().swap(text_data_);  // the splits hold it; a large text is not kept three times
  if (resuming_) {
    tokenizer_ = tokenizer_from_checkpoint(ckpt_, ckpt_in_);
    // Before the vocabulary sizes a model: a corrupt tokenizer entry must not allocate one.
    if (tokenizer_->n_vocab() > config_from_checkpoint(ckpt_, ckpt_in_).vocab_size)
      throw TrainError(ckpt_in_ + ": checkpoint tokenizer has " +
                       std::to_string(tokenizer_->n_vocab()) +
                       " tokens, more than its model's vocab_size");
    if (ckpt_.metadata["text_hash"] != hash_)
      throw TrainError("'" + opt_.text_path + "' is not the text checkpoint " + ckpt_in_ +
                       " was trained on");
  } else if (!opt_.init_from.empty()) {
    // generate --gpt2 DIR's tokenizer (DIR's own files, else GPT-2's), fitting config.json.
    tokenizer_ = load_gpt2_tokenizer(opt_.init_from, cfg_.vocab_size);
  } else {
    tokenizer_ = data::make_training_tokenizer(opt_.tokenizer, splits_.train, opt_.text_path, err_);
  }
  if ((opt_.preset == "tiny" || opt_.preset == "custom") && opt_.init_from.empty())
    cfg_.vocab_size = tokenizer_->n_vocab();
  // Left for this check: a --preset with a fixed vocabulary (gpt2-124m's 50257) and a larger
  // --tokenizer (--init-from's and a checkpoint's were checked against their own config).
  if (tokenizer_->n_vocab() > cfg_.vocab_size)
    throw TrainError("--tokenizer " + opt_.tokenizer + " has " +
                     std::to_string(tokenizer_->n_vocab()) + " tokens, more than --preset " +
                     opt_.preset + "'s vocab_size " + std::to_string(cfg_.vocab_size));
}

// The book's two loaders (data/training_data.h). Rank 0 tokenizes, every rank gets the ids.
void Session::make_loaders() {
  data::SplitIds ids;
  on_root([&] { ids = data::encode_splits(*tokenizer_, splits_); });
  dist::broadcast_ids(ids.train);
  dist::broadcast_ids(ids.val);
  // The ids stand for the text from here on.
  std::string().swap(splits_.train);
  std::string().swap(splits_.val);
  try {
    data::TrainValLoaders loaders = data::create_train_val_loaders(
        std::move(ids), cfg_.context_length, opt_.batch_size, default_generator(), opt_.text_path);
    train_loader_.emplace(std::move(loaders.train));
    val_loader_.emplace(std::move(loaders.val));
  } catch (const std::runtime_error& e) {
    throw TrainError(e.what());  // every rank meets it: rank 0 alone prints it
  }
}

// manual_seed, then GPTModel's draws, as the book; a resumed run then loads its state.
void Session::make_model() {
  manual_seed(opt_.seed);
  const uint64_t seeded_at = default_generator().words_drawn();
  model_ = std::make_unique<nn::GPTModel>(cfg_);
  optimizer_ = std::make_unique<AdamW>(*model_, opt_.lr, opt_.weight_decay);
  if (!opt_.init_from.empty()) load_gpt2_into_model(default_generator().words_drawn() - seeded_at);
  if (opt_.micro_batches > 1)
    runner_ = std::make_unique<DataParallelStep>(*model_, opt_.micro_batches, opt_.clip_grad > 0);
  if (resuming_) {
    if (config_from_checkpoint(ckpt_, ckpt_in_) != cfg_)
      throw TrainError(ckpt_in_ + ": checkpoint config " + ckpt_.metadata["config"] +
                       " differs from " + cfg_.str() + " (a checkpoint from another config)");
    pos_ = restore_checkpoint(ckpt_, ckpt_in_, *model_, *optimizer_, default_generator(),
                              train_loader_->size(), train_loader_->dataset().size());
    seconds_before_ = pos_.seconds;
  }
  if (runner_) runner_->take_moments(*optimizer_);  // ZeRO-1: this rank's shard only
  if (opt_.precision == "bf16-pure") {
    // model.to(torch.bfloat16) after loading, as the book's ch05/10: the weights (and a resumed
    // run's moments, kept as float32 in the checkpoint) round to bf16 once.
    model_->to(DType::BFloat16);
    optimizer_->to(DType::BFloat16);
  }
}

// --init-from: rank 0 reads DIR's weights into the model and sends them, so the ranks start equal,
// as from one seed, and only rank 0's machine needs DIR. init_words: what the model's own
// initialisation drew.
void Session::load_gpt2_into_model(uint64_t init_words) {
  on_root([&] {
    load_gpt2_weights_into(*model_, opt_.init_from, *opt_.config, err_);
    skip_model_init(cfg_, init_words);
  });
  for (const Tensor& p : model_->parameters())
    dist::broadcast(p.data<float>(), size_t(p.numel()) * sizeof(float));
  // Every rank continues from rank 0's generator.
  std::vector<uint8_t> state = default_generator().get_state();
  dist::broadcast(state.data(), state.size());
  default_generator().set_state(state);
}

// Before any work, and before anything is written: no output is an input or another output,
// one run per --out (a lock held until the run ends), and every output can be written.
void Session::claim_outputs() {
  const fs::path dir(opt_.out_dir);
  ckpt_out_ = (dir / kCheckpointFile).string();
  plot_out_ = (dir / "loss.svg").string();
  const std::vector<NamedPath> outputs = {{ckpt_out_, "the checkpoint"},
                                          {plot_out_, "the plot"},
                                          {opt_.log_path, "--log"},
                                          {(dir / DirLock::kFileName).string(), "the lock file"}};
  std::vector<NamedPath> inputs = {{opt_.text_path, "--text"}};
  if (!opt_.init_from.empty())
    for (const NamedPath& f : gpt2_input_files(opt_.init_from, "--init-from")) inputs.push_back(f);
  // The checkpoint --resume reads may be the one this run replaces: it is read whole first.
  const std::vector<NamedPath> resumed = {{ckpt_in_, "--resume"}};
  if (resuming_ && find_clobbered(resumed, {outputs[0]}).empty()) inputs.push_back(resumed[0]);
  refuse_clobbered(inputs, outputs);

  std::error_code ec;
  out_dir_.path = opt_.out_dir;
  out_dir_.created = !fs::is_directory(dir, ec);
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw TrainError("cannot create output directory '" + opt_.out_dir + "' (" + ec.message() +
                     ")");
  long holder = 0;
  bool locked = false;
  try {
    locked = out_dir_.lock.acquire(opt_.out_dir, holder);
  } catch (const std::exception& e) {
    throw TrainError("--out " + std::string(e.what()));
  }
  if (!locked)
    throw TrainError("--out " + opt_.out_dir + " is in use by another run (PID " +
                     (holder > 0 ? std::to_string(holder) : std::string("unknown")) +
                     "); wait for it to end or choose another --out");
  refuse_overwrite();
  try {
    check_writable(ckpt_out_);
    check_writable(plot_out_);
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
  check_log_writable(opt_.log_path);
}

// A fresh run never replaces a checkpoint silently (hours of training may be in it); found
// before any work is done.
void Session::refuse_overwrite() const {
  const std::string out = (fs::path(opt_.out_dir) / kCheckpointFile).string();
  std::error_code ec;
  if (!fs::exists(out, ec) || opt_.overwrite) return;
  if (resuming_ && fs::equivalent(ckpt_in_, out, ec)) return;
  throw UsageError("--out " + opt_.out_dir + " already holds a checkpoint; continue it with " +
                   "--resume " + opt_.out_dir + ", or replace it with --overwrite");
}

void Session::open_output_dir() {
  last_good_ = resuming_ ? ckpt_in_ : "";
  // The text's absolute path, so that --resume from another folder finds it.
  TrainOptions stored = opt_;
  std::error_code ec;
  const fs::path abs = fs::absolute(opt_.text_path, ec);
  if (!ec) stored.text_path = abs.lexically_normal().string();
  options_ = options_json(stored);
}

TrainResult Session::run() {
  const int64_t epoch_start = pos_.epoch;
  if (resuming_)
    err_ << "resuming " << ckpt_in_ << " at epoch " << epoch_start + 1 << ", step "
         << pos_.global_step + 1 << "\n";
  if (resuming_ && epoch_start >= opt_.epochs)
    err_ << "nothing to do: the checkpoint has finished " << epoch_start
         << " epochs (raise --epochs)\n";
  else if (opt_.epochs == 0)
    err_ << "nothing to do: --epochs 0\n";

  show_progress_ = opt_.progress == 1 || (opt_.progress < 0 && ::isatty(2));
  run_start_ = Clock::now();
  tokens_at_start_ = pos_.tokens_seen;
  TrainLoop loop{out_,
                 pos_,
                 *this,
                 opt_.sample_tokens,
                 runner_.get(),
                 dist::is_root(),
                 opt_.precision == "bf16"};
  const bool finished =
      train_model_simple(*model_, *train_loader_, *val_loader_, *optimizer_, opt_.epochs,
                         opt_.eval_freq, opt_.eval_iter, opt_.start_context, *tokenizer_, loop);
  if (runner_ && dist::size() > 1) err_ << runner_->summary() << "\n";
  result_.evals = pos_.history;
  result_.global_step = pos_.global_step;
  result_.interrupted = !finished;
  if (finished && epoch_start < opt_.epochs) {
    const double minutes = std::chrono::duration<double>(Clock::now() - t_start_).count() / 60;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", minutes);
    err_ << "Training completed in " << buf << " minutes. Checkpoint: " << ckpt_out_
         << ", plot: " << plot_out_ << "\n";
  }
  return result_;
}

// ---- the hooks ---------------------------------------------------------------------------------

// Appendix D's schedule, when asked for.
void Session::before_step(int64_t step) {
  if (opt_.cosine || opt_.warmup_steps > 0)
    optimizer_->lr = warmup_cosine_lr(step, train_loader_->size() * opt_.epochs, opt_.warmup_steps,
                                      opt_.initial_lr, opt_.lr, opt_.min_lr);
}

void Session::check_loss(double loss) {
  if (std::isfinite(loss)) return;
  before_print();
  const char* lv = std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf";
  throw TrainError("loss is " + std::string(lv) + " at epoch " + std::to_string(pos_.epoch + 1) +
                   ", step " + std::to_string(pos_.global_step + 1) + " (lr " +
                   json::number(optimizer_->lr) + "); stopped, " +
                   (last_good_.empty() ? std::string("no checkpoint was written yet")
                                       : "the last good checkpoint is " + last_good_));
}

void Session::before_update() {
  if (opt_.clip_grad > 0) clip_grad_norm(*model_, opt_.clip_grad);
}

// Clears the progress line, so that stdout's lines do not land inside it on a terminal.
void Session::before_print() {
  if (show_progress_) err_ << "\r\033[K" << std::flush;
}

double Session::seconds() {
  return seconds_before_ + std::chrono::duration<double>(Clock::now() - t_start_).count();
}

void Session::after_eval(const EvalPoint& p) {
  if (opt_.log_path.empty()) return;
  on_root([&] {
    try {
      tg::append_line(opt_.log_path, to_json(p));
    } catch (const std::exception& e) {
      throw TrainError(std::string("cannot write log file: ") + e.what());
    }
  });
}

// A stop asked of any rank stops all of them after this step (a tiny collective), and every rank
// takes the same signal for its exit status (SIGTERM over SIGINT), so mpirun's status does not
// depend on which rank exits first. The answer is the vote's: a signal that lands during or after
// it stops the next step, on every rank (the flag read again here would stop one rank alone and
// leave the others waiting in the next step's exchange).
bool agree_on_stop() {
  if (!dist::any(stop_requested().load())) return false;
  if (dist::size() > 1) {
    std::vector<int> sigs(static_cast<size_t>(dist::size()));
    const int mine = stop_signal().load();
    dist::gather_all_equal(&mine, sigs.data(), sizeof mine);
    stop_signal().store(*std::max_element(sigs.begin(), sigs.end()));
  }
  stop_requested().store(true);
  return true;
}

// Progress, the test hook, and a stop (Ctrl-C or --max-steps) that saves mid-epoch.
bool Session::after_step(double loss) {
  result_.step_losses.push_back(loss);
  ++steps_this_run_;
  if (show_progress_) show_progress(loss);
  if (opt_.on_step) opt_.on_step(pos_.global_step);
  stop_if_stdout_lost();
  const bool stop = agree_on_stop();
  if (!stop && (opt_.max_steps < 0 || steps_this_run_ < opt_.max_steps)) return false;
  before_print();
  save();
  write_plot();
  err_ << "stopped " << (stop ? "by " + stop_signal_name() + " " : "") << "after step "
       << pos_.global_step << "; checkpoint " << ckpt_out_ << " (continue with --resume "
       << opt_.out_dir << ")\n";
  return true;
}

// The log cannot be printed any more (`tapegrad train | head -2`, a full disk): the run stops at
// this step boundary with its checkpoint saved, in one line, rather than train unseen or die of
// SIGPIPE (the CLI ignores it) without a checkpoint.
void Session::stop_if_stdout_lost() {
  // Rank 0's stdout (the others print nowhere), agreed by all: save() below is a collective.
  if (!dist::any(dist::is_root() && !out_)) return;
  before_print();
  save();
  write_plot();
  throw TrainError(
      "cannot write the output to stdout (disk full or pipe closed?); stopped after "
      "step " +
      std::to_string(pos_.global_step) + " with checkpoint " + ckpt_out_ +
      " (continue with --resume " + opt_.out_dir + ")");
}

// Every epoch ends with a checkpoint and the plot; Ctrl-C during it stops here.
bool Session::after_epoch(const std::string& sample) {
  result_.samples.push_back(sample);
  save();
  write_plot();
  stop_if_stdout_lost();
  if (!agree_on_stop()) return false;
  err_ << "stopped by " << stop_signal_name() << " after epoch " << pos_.epoch << "; checkpoint "
       << ckpt_out_ << "\n";
  return true;
}

void Session::show_progress(double loss) {
  const double dt = std::chrono::duration<double>(Clock::now() - run_start_).count();
  const double tps = dt > 0 ? double(pos_.tokens_seen - tokens_at_start_) / dt : 0;
  const int64_t total_steps = train_loader_->size() * opt_.epochs;
  const int64_t done = pos_.epoch * train_loader_->size() + pos_.batch;
  const double per_step = dt / double(steps_this_run_);
  err_ << "\r\033[Kep " << pos_.epoch + 1 << "/" << opt_.epochs << "  step " << done << "/"
       << total_steps << "  loss " << fmt3(loss) << "  " << int64_t(tps) << " tok/s  ETA "
       << fmt_duration(per_step * double(total_steps - done)) << std::flush;
}

void Session::save() {
  RunPosition at = pos_;
  at.seconds = seconds();
  if (runner_) runner_->gather_moments(*optimizer_);  // ZeRO-1: the whole moments on rank 0
  on_root([&] {
    const RunRecipe recipe{cfg_, options_, opt_.tokenizer, *tokenizer_, hash_};
    save_checkpoint(ckpt_out_, *model_, *optimizer_, default_generator(), recipe, at);
  });
  if (runner_) runner_->release_moments(*optimizer_);
  last_good_ = ckpt_out_;
  result_.checkpoint = ckpt_out_;
}

void Session::write_plot() {
  on_root([&] {
    try {
      plot_losses(plot_out_, pos_.history, opt_.epochs);
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  });
}

}  // namespace

void refuse_clobbered(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  const std::string clash = find_clobbered(inputs, outputs);
  if (!clash.empty()) throw UsageError(clash);
}

TrainResult run_training(const TrainOptions& opt, std::ostream& out, std::ostream& err) {
  return Session(opt, out, err).run();
}

}  // namespace tg::train
