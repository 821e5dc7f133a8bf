// `tapegrad train` and `tapegrad generate`: option parsing around train/trainer.h.
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/threadpool.h"
#include "train/cli_options.h"
#include "train/commands.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace tg::cli {

namespace {

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
  --epochs N           (10, at most 1000000)
  --batch-size N       (2)
  --lr X               (4e-4)          --weight-decay X    (0.1)
  --eval-freq N        (5)             --eval-iter N       (5)
  --seed N             (123)           --threads N         (TAPEGRAD_THREADS or all cores)
  --out DIR            checkpoint.safetensors and loss.svg go here (default out); a DIR that
                       holds a checkpoint is refused unless --resume or --overwrite is given
  --overwrite          replace the checkpoint in --out with a fresh run
  --log FILE           append one JSON line per evaluation
  --resume DIR         continue from DIR's checkpoint (options default to the checkpoint's)
  --start-context TXT  the sample's prompt (default "Every effort moves you")
  --sample-tokens N    tokens in each epoch's greedy sample (50, at most 100000)
  --clip-grad X        clip the gradient norm to X          --max-steps N  stop after N steps
  --cosine             warmup + cosine schedule (appendix D); --warmup-steps N, --initial-lr X,
                       --min-lr X (default 0.1 * lr)
  --progress / --no-progress   force the progress line on stderr on or off (default: on a tty)
Each flag at most once. Exit status: 0 done, 1 bad input or failure, 2 bad command line.
Ctrl-C finishes the current step, saves the checkpoint and exits (status 130).
)";

const char* kGenerateHelp =
    R"(usage: tapegrad generate --checkpoint DIR [options]
Continues a prompt with the book's generate() (chapter 5.3).

  --checkpoint DIR     a directory written by `tapegrad train` (or its checkpoint.safetensors)
  --prompt TEXT        (default "Every effort moves you")
  --max-new-tokens N   (50, at most 100000)
  --temperature T      0 = greedy (default); 0.001 to 1000 samples from softmax(logits / T)
  --top-k K            keep only the K most likely tokens (0, the default: all)
  --seed S             torch.manual_seed before sampling (123)
  --eos                stop at <|endoftext|>
  --threads N
  --logits FILE        also write the prompt's logits (1, T, vocab) as safetensors (interop check)
)";

// Output lost (a full disk, a closed pipe) is a failure, not a silent exit 0.
void check_written(std::ostream& os) {
  os.flush();
  if (!os) throw train::TrainError("cannot write the output to stdout (disk full or pipe closed?)");
}

// Usage errors exit 2, every other failure 1 (README: exit codes).
int report(const char* cmd, const std::exception& e) {
  std::cout.flush();
  std::cerr << "tapegrad " << cmd << ": " << e.what() << "\n";
  return dynamic_cast<const train::UsageError*>(&e) ? 2 : 1;
}

}  // namespace

int train_main(int argc, char** argv) {
  try {
    bool help = false;
    train::TrainOptions o = parse_train_args(argc, argv, help);
    if (help) {
      std::cout << kTrainHelp;
      check_written(std::cout);
      return 0;
    }
    train::keep_freed_memory();
    std::signal(SIGINT, on_sigint);
    const train::TrainResult r = train::run_training(o, std::cout, std::cerr);
    std::signal(SIGINT, SIG_DFL);
    check_written(std::cout);
    return r.interrupted && train::stop_requested().load() ? 130 : 0;
  } catch (const std::exception& e) {
    std::signal(SIGINT, SIG_DFL);
    return report("train", e);
  }
}

int generate_main(int argc, char** argv) {
  try {
    const GenerateOptions g = parse_generate_args(argc, argv);
    if (g.help) {
      std::cout << kGenerateHelp;
      check_written(std::cout);
      return 0;
    }
    if (g.threads > 0) set_num_threads(g.threads);
    train::LoadedModel lm = train::load_checkpoint_model(g.checkpoint);
    const std::vector<int64_t> ids = train::text_to_token_ids(g.prompt, *lm.tokenizer);
    if (ids.empty()) throw train::UsageError("--prompt is empty");
    int64_t eos_id = -1;
    if (g.eos)
      for (const auto& [name, id] : lm.tokenizer->specials())
        if (name == "<|endoftext|>") eos_id = id;
    if (!g.logits.empty()) {
      // The prompt's logits (1, T, vocab) for tools/interop_check.py, with the ids in metadata.
      NoGradGuard no_grad;
      const Tensor logits = (*lm.model)(from_vector(ids, {1, int64_t(ids.size())}));
      std::string id_list;
      for (int64_t id : ids) id_list += std::to_string(id) + " ";
      train::save_safetensors(g.logits, {{"logits", logits}}, {{"token_ids", id_list}});
    }
    manual_seed(uint64_t(g.seed));
    const std::vector<int64_t> out =
        train::generate(*lm.model, ids, g.max_new_tokens, lm.cfg.context_length, g.temperature,
                        g.top_k, eos_id, default_generator());
    std::cout << train::token_ids_to_text(out, *lm.tokenizer) << "\n";
    check_written(std::cout);
    return 0;
  } catch (const std::exception& e) {
    return report("generate", e);
  }
}

}  // namespace tg::cli
