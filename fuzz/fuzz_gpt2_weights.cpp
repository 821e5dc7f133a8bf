// The GPT-2 loader behind `generate --gpt2 DIR` and `train --init-from DIR` (train/gpt2_weights.h):
// the input split at its first NUL byte into config.json and model.safetensors (the tokenizer is
// not read: fuzz_gpt2_files covers vocab.json + merges.txt's format). Config, header, names,
// shapes, dtypes, F16/BF16 widening and the NaN check, on any bytes: every refusal must be a
// TrainError or a safetensors error, never a crash or a huge allocation.
#include <exception>
#include <sstream>
#include <string>

#include "fuzz/fuzz.h"
#include "train/gpt2_weights.h"

using namespace tg;

TG_FUZZ_ENTRY(gpt2_weights) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view config = in.substr(0, nul);
  const std::string_view weights = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  const std::string dir = fuzz::write_temp("config.json", config);
  fuzz::write_temp("model.safetensors", weights);
  const std::string base = dir.substr(0, dir.size() - std::string("/config.json").size());
  try {
    // The loader refuses a model above the machine's memory; under libFuzzer's 2 GB RSS limit a
    // smaller bound applies, so configs asking for more are only parsed.
    const nn::GPTConfig cfg = train::gpt2_config_from_json(std::string(config), dir);
    if (train::gpt2_model_bytes(cfg) > (uint64_t(256) << 20)) return 0;
    std::ostringstream notes;
    const auto model = train::load_gpt2_weights(base, cfg, notes);
    TG_FUZZ_CHECK(model->cfg.vocab_size == cfg.vocab_size && model->cfg.n_layers == cfg.n_layers);
  } catch (const std::exception&) {
  }
  return 0;
}
