// `tapegrad train` and `tapegrad generate`: their options (cli_options.h) into train/trainer.h's
// run_training and generate.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli_options.h"
#include "app/commands.h"
#include "core/autograd.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "core/threadpool.h"
#include "data/bpe_tokenizer.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/gpt2_weights.h"
#include "train/session.h"
#include "train/trainer.h"

namespace tg::cli {

namespace {

// Output lost (a full disk, a closed pipe) is a failure, not a silent exit 0.
void check_written(std::ostream& os) {
  os.flush();
  if (!os) throw train::TrainError("cannot write the output to stdout (disk full or pipe closed?)");
}

// How long the ranks that met an error wait for each other before it counts as one rank's own.
constexpr double kFailTogetherSeconds = 5;

// Usage errors exit 2, every other failure 1 (README: exit codes). Under mpirun an error is
// either met by every rank at one point (rank 0's files and errors are shared, data_parallel.h):
// rank 0 prints it and all exit; or met by one rank alone (its environment, its memory): that
// rank prints it naming itself and ends the whole job, as the others would wait for it for ever.
// Which of the two is agreed (dist::failed_together), not guessed from the error's type.
int report(const char* cmd, const std::exception& e) {
  const int status = dynamic_cast<const UsageError*>(&e) ? 2 : 1;
  std::cout.flush();
  if (dist::size() > 1 && !dist::failed_together(kFailTogetherSeconds)) {
    std::cerr << "tapegrad " << cmd << ": rank " << dist::rank() << ": " << e.what() << std::endl;
    dist::abort_all(status);
  }
  if (dist::rank() == 0) std::cerr << "tapegrad " << cmd << ": " << e.what() << "\n";
  return status;
}

}  // namespace

int train_main(int argc, char** argv) {
  try {
    bool help = false;
    train::TrainOptions o = parse_train_args(argc, argv, help);
    if (help) {
      std::cout << help_text(train::train_command());
      check_written(std::cout);
      return 0;
    }
    try {
      dist::init();  // several processes under mpirun (train/data_parallel.h)
    } catch (const std::runtime_error& e) {  // a build without MPI under a launcher
      if (dist::launch().rank == 0) std::cerr << "tapegrad train: " << e.what() << "\n";
      return 1;
    } catch (
        const std::invalid_argument& e) {  // this rank's TAPEGRAD_DIST_TIMEOUT: MPI not started
      const dist::Launch l = dist::launch();
      std::cerr << "tapegrad train: "
                << (l.needs_mpi() ? "rank " + std::to_string(l.rank) + ": " : "") << e.what()
                << "\n";
      return 1;
    }
    train::keep_freed_memory();
    train::install_stop_handlers();
    std::ostream quiet(nullptr);  // only rank 0 prints
    const train::TrainResult r = dist::is_root() ? train::run_training(o, std::cout, std::cerr)
                                                 : train::run_training(o, quiet, quiet);
    train::remove_stop_handlers();
    check_written(std::cout);
    // Under mpirun the signal may have reached another rank only: all stopped together.
    return train::stop_exit_status(r);
  } catch (const std::exception& e) {
    train::remove_stop_handlers();
    return report("train", e);
  }
}

// --logits: the prompt's logits (1, T, vocab) for tools/interop_check.py, with the ids in
// metadata. Generation keeps the prompt's last context_length tokens; these logits cannot.
static void write_prompt_logits(const GenerateOptions& g, const train::LoadedModel& lm,
                                const std::vector<int64_t>& ids) {
  if (int64_t(ids.size()) > lm.cfg.context_length)
    throw train::UsageError("--prompt is " + std::to_string(ids.size()) +
                            " tokens, more than the model's context length " +
                            std::to_string(lm.cfg.context_length) +
                            "; --logits needs the whole prompt in one context (shorten "
                            "--prompt)");
  NoGradGuard no_grad;
  // float32 always (a bf16 model's logits widened exactly), so the file's format stays one.
  const Tensor logits = (*lm.model)(from_vector(ids, {1, int64_t(ids.size())})).to(DType::Float32);
  std::string id_list;
  for (int64_t id : ids) id_list += std::to_string(id) + " ";
  tg::save_safetensors(g.logits, {{"logits", logits}}, {{"token_ids", id_list}});
}

int generate_main(int argc, char** argv) {
  try {
    const GenerateOptions g = parse_generate_args(argc, argv);
    if (g.help) {
      std::cout << help_text(generate_command());
      check_written(std::cout);
      return 0;
    }
    if (g.threads > 0) set_num_threads(g.threads);
    // Every file the command reads is an input: --logits may overwrite none of them.
    const std::vector<NamedPath> inputs =
        g.gpt2_dir.empty()
            ? std::vector<NamedPath>{{train::checkpoint_path(g.checkpoint), "--checkpoint"}}
            : train::gpt2_input_files(g.gpt2_dir, "--gpt2");
    train::refuse_clobbered(inputs, {{g.logits, "--logits"}});
    train::LoadedModel lm = g.gpt2_dir.empty() ? train::load_checkpoint_model(g.checkpoint)
                                               : train::load_gpt2_model(g.gpt2_dir, std::cerr);
    // model.to(torch.bfloat16): every weight rounded once from what was loaded (float32, or
    // GPT-2's F16/BF16 widened exactly); the KV cache then takes the keys' dtype.
    if (g.precision == "bf16") lm.model->to(DType::BFloat16);
    const std::vector<int64_t> ids = train::text_to_token_ids(g.prompt, *lm.tokenizer);
    if (ids.empty()) throw train::UsageError("--prompt is empty");
    int64_t eos_id = -1;
    if (g.eos)
      for (const auto& [name, id] : lm.tokenizer->specials())
        if (name == "<|endoftext|>") eos_id = id;
    if (!g.logits.empty()) write_prompt_logits(g, lm, ids);
    manual_seed(uint64_t(g.seed));
    // --stream: the prompt, then the tokens' bytes as they come. A character split over two
    // tokens waits for its second part (utf8_incomplete_tail), so the stream is the printed
    // line byte for byte; the first failed write (a closed pipe) stops the generation.
    train::TokenCallback on_token;
    std::string pending;  // bytes not yet printed: the prompt's, then each token's
    const auto print_pending = [&](bool all) {
      const size_t n = pending.size() - (all ? 0 : utf8_incomplete_tail(pending));
      std::cout << data::utf8_replace_invalid(std::string_view(pending).substr(0, n)) << std::flush;
      pending.erase(0, n);
      if (!std::cout) check_written(std::cout);
    };
    if (g.stream) {
      pending = lm.tokenizer->decode_bytes(std::vector<int>(ids.begin(), ids.end()));
      print_pending(false);
      on_token = [&](int64_t id) {
        pending += lm.tokenizer->token_bytes(int(id));
        print_pending(false);
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> out = (g.no_cache ? train::generate : train::generate_cached)(
        *lm.model, ids, g.max_new_tokens, lm.cfg.context_length, g.temperature, g.top_k, eos_id,
        default_generator(), on_token);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (g.stream) {
      print_pending(true);
      std::cout << "\n";
      check_written(std::cout);
      const size_t n = out.size() - ids.size();
      std::fprintf(stderr, "%zu tokens in %.2f s: %.2f tokens/s (%s%s)\n", n, s,
                   s > 0 ? double(n) / s : 0.0, g.no_cache ? "no cache" : "KV cache",
                   g.precision == "bf16" ? ", bf16" : "");
      return 0;
    }
    std::cout << train::token_ids_to_text(out, *lm.tokenizer) << "\n";
    check_written(std::cout);
    return 0;
  } catch (const std::exception& e) {
    return report("generate", e);
  }
}

}  // namespace tg::cli
