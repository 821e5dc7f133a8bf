// The `tapegrad train` session around the book's loop (session.cpp): options to a model, data
// and optimizer, resuming, checkpoints, progress, the JSON log, the loss plot, and Ctrl-C.
#pragma once
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "train/trainer.h"

namespace tg::train {

struct TrainResult {
  std::vector<EvalPoint> evals;      // every evaluation so far, resumed runs included
  std::vector<std::string> samples;  // the text printed after each epoch of this run
  std::vector<double> step_losses;   // the training loss of each step of this run
  int64_t global_step = -1;
  bool interrupted = false;  // stopped by SIGINT / max_steps, checkpoint saved
  std::string checkpoint;    // path of the last checkpoint written
};

// Runs the session, printing the book's log lines to `out` and progress to `err`. Throws
// TrainError with a one-line message on bad input or a NaN loss (the last checkpoint stays).
TrainResult run_training(const TrainOptions& opt, std::ostream& out, std::ostream& err);

// Keeps freed tensor memory in the heap instead of returning it to the OS after every step
// (glibc: mmap and trim thresholds raised), which saves the page faults and zeroing of the
// step's large buffers (logits, gradients). Call once at start-up; a no-op elsewhere.
void keep_freed_memory();

// Set by the SIGINT and SIGTERM handlers the CLI installs: the trainer finishes the step, saves
// and returns.
std::atomic<bool>& stop_requested();
// The signal that set it (0: none, or set directly).
std::atomic<int>& stop_signal();
// The CLI's handlers for SIGINT and SIGTERM (a second one of either stops at once), and back.
void install_stop_handlers();
void remove_stop_handlers();
// 0, or 128 + the signal that stopped the run (130 Ctrl-C, 143 SIGTERM), as a shell reports it.
int stop_exit_status(const TrainResult& r);

// UsageError "ROLE PATH is the same file as ROLE PATH ..." for an output that would destroy an
// input or another output (core/file_io.h find_clobbered), before anything is written.
void refuse_clobbered(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

}  // namespace tg::train
