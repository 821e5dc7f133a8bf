// The tables of `tapegrad train`, `generate` and `chapter3` (see cli_options.h).
#include "app/cli_options.h"

namespace tg::cli {

train::TrainOptions parse_train_args(int argc, char** argv, bool& help) {
  train::TrainOptions o;
  const Parsed p = parse(train::train_command(), argc, argv, o);
  help = p.help;
  if (help) return train::TrainOptions{};
  auto given = [&](const char* name) { return train::is_explicit(o, name); };
  o.explicit_flags = p.given;
  if (given("progress") && given("no-progress"))
    throw UsageError("--progress and --no-progress contradict each other");
  if (given("resume") && given("overwrite"))
    throw UsageError("--overwrite starts afresh; it does not go with --resume");
  if (given("init-from") && given("resume"))
    throw UsageError("--init-from starts a run from GPT-2's weights; it does not go with --resume");
  return o;
}

const Command<GenerateOptions>& generate_command() {
  using G = GenerateOptions;
  static const Command<G> c{
      "tapegrad generate (--checkpoint DIR | --gpt2 DIR) [options]",
      "Continues a prompt with the book's generate() (chapter 5.3), through a KV cache.",
      {
          path("checkpoint", &G::checkpoint, "DIR",
               "a directory written by `tapegrad train` (or its checkpoint.safetensors)"),
          path("gpt2", &G::gpt2_dir, "DIR",
               "OpenAI's GPT-2 in Hugging Face's files (config.json, model.safetensors,\n"
               "vocab.json + merges.txt), loaded as the book's §5.5 does"),
          text("prompt", &G::prompt, "TEXT", "the text to continue"),
          integer("max-new-tokens", &G::max_new_tokens, 0, kMaxNewTokens, "N", "tokens to append"),
          real("temperature", &G::temperature, kMinTemperature, kMaxTemperature, "T",
               "sample from softmax(logits / T)")
              .zero_means("greedy"),
          integer("top-k", &G::top_k, 0, kNoMax, "K", "keep only the K most likely tokens; 0: all"),
          integer("seed", &G::seed, 0, kNoMax, "S", "torch.manual_seed before sampling"),
          flag("eos", &G::eos, "stop at <|endoftext|>"),
          flag("stream", &G::stream,
               "print each token as it comes, and the tokens/s on stderr at the end"),
          flag("no-cache", &G::no_cache,
               "the book's loop, recomputing the whole context for every token (same ids)"),
          choice("precision", &G::precision, {"fp32", "bf16"},
                 "fp32: float32 weights and KV cache; bf16: the model converted to bfloat16\n"
                 "once loaded (as model.to(torch.bfloat16)), its KV cache too: half the\n"
                 "bytes per token, float32 sums"),
          integer("threads", &G::threads, 1, 1024, "N", "threads of the pool")
              .none(0)
              .shown_default("TAPEGRAD_THREADS or all cores"),
          path("logits", &G::logits, "FILE",
               "also write the prompt's logits (1, T, vocab) as safetensors (interop check)"),
      }};
  return c;
}

GenerateOptions parse_generate_args(int argc, char** argv) {
  GenerateOptions g;
  g.help = parse(generate_command(), argc, argv, g).help;
  if (g.help) return g;
  if (g.checkpoint.empty() == g.gpt2_dir.empty())
    throw UsageError(g.checkpoint.empty() ? "--checkpoint DIR or --gpt2 DIR is required"
                                          : "--checkpoint and --gpt2 both name a model; give one");
  return g;
}

const Command<Chapter3Options>& chapter3_command() {
  using C = Chapter3Options;
  static const Command<C> c{
      "tapegrad chapter3 [--notebook ch03|mha] [--cell N]",
      "Replays the chapter-3 notebook's code cells In [2]..In [38] (or the multihead-attention\n"
      "notebook's In [2]..In [8]) and prints their output as PyTorch does.",
      {
          choice("notebook", &C::notebook, {"ch03", "mha"},
                 "the chapter's notebook, or the bonus multihead-attention one"),
          integer("cell", &C::only, kChapter3FirstCell, kChapter3LastCell, "N",
                  "print only cell N (the earlier cells still run, silently)")
              .none(0),
      }};
  return c;
}

Chapter3Options parse_chapter3_args(int argc, char** argv) {
  Chapter3Options o;
  o.help = parse(chapter3_command(), argc, argv, o).help;
  if (!o.help && o.notebook == "mha" && o.only > kMhaLastCell)
    throw UsageError("the mha notebook has cells 2 to " + std::to_string(kMhaLastCell) +
                     ", got --cell " + std::to_string(o.only));
  return o;
}

}  // namespace tg::cli
