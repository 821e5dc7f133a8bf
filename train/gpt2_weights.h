// §5.5 of the book, "Loading pretrained weights from OpenAI": OpenAI's GPT-2 (124M, 355M, 774M,
// 1558M) into the book's GPTModel, read from the files most people download today, Hugging
// Face's (huggingface.co/openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl):
//   config.json        n_embd, n_layer, n_head, n_positions, vocab_size (GPT2Config's names)
//   model.safetensors  wte.weight [vocab, C], wpe.weight [n_positions, C], per block i
//                      h.i.ln_1.{weight,bias} [C], h.i.attn.c_attn.weight [C, 3C] (Conv1D: in×out),
//                      h.i.attn.c_attn.bias [3C], h.i.attn.c_proj.{weight [C, C], bias},
//                      h.i.ln_2.*, h.i.mlp.c_fc.{weight [C, 4C], bias}, h.i.mlp.c_proj.{weight
//                      [4C, C], bias}, then ln_f.{weight,bias}; optionally the causal-mask buffers
//                      h.i.attn.bias [1, 1, n_positions, n_positions] and h.i.attn.masked_bias []
//                      (skipped), lm_head.weight (ignored: GPT-2 ties it to wte), and every name
//                      prefixed with "transformer." (what GPT2LMHeadModel.save_pretrained writes)
//   vocab.json + merges.txt  the tokenizer (OpenAI's encoder.json + vocab.bpe under HF's names)
//
// The mapping is the book's load_weights_into_gpt (ch05/01_main-chapter-code/gpt_download.py's
// params, same layout): c_attn's weight split in three along its last axis into W_query, W_key,
// W_value, each transposed (Conv1D stores in×out, Linear out×in), its bias split the same way;
// c_proj, c_fc and mlp.c_proj transposed into out_proj, ff.layers.0 and ff.layers.2; ln_* into
// norm1/norm2/final_norm's scale and shift; out_head a copy of wte. The config is the book's
// NEW_CONFIG: context_length = n_positions, qkv_bias true, drop_rate 0.1 (off in eval mode).
//
// Validation, before the model is allocated: config.json's sizes (GPTConfig::validate's bounds,
// GPT-2's activation and LayerNorm epsilon), every tensor's name, shape and dtype against the
// config (missing and unexpected tensors named), the memory the model needs (refused above the
// machine's RAM). While copying: F16 and BF16 widened to float32 (with a note), NaN or inf
// refused. Every refusal is a TrainError "PATH: reason".
//
// Not here: OpenAI's original TensorFlow checkpoint files (the book's gpt_download.py: hparams.json
// and model.ckpt.*), sharded files (model-00001-of-00002.safetensors), other architectures.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "data/bpe_tokenizer.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace tg::train {

// config.json's text (`path` names it in errors) as the book's GPT config.
nn::GPTConfig gpt2_config_from_json(const std::string& text, const std::string& path);

// DIR/config.json's text, unparsed (DIR must be a directory). Throws TrainError.
std::string read_gpt2_config_text(const std::string& dir);
// DIR/config.json read and checked (DIR must be a directory). Throws TrainError.
nn::GPTConfig read_gpt2_config(const std::string& dir);

// Bytes of float32 parameters a config's GPTModel holds (out_head included).
uint64_t gpt2_model_bytes(const nn::GPTConfig& cfg);

// "DIR: gpt2-xl (1558M), n_layer 48, ..., 1557.6M parameters (6.23 GB in float32); the GPTModel
// takes ...": what loading will allocate, said before it does. Throws TrainError when that is more
// than ram_bytes (0: unknown, never refused).
std::string gpt2_memory_note(const nn::GPTConfig& cfg, const std::string& dir, uint64_t ram_bytes);
// The machine's physical memory (sysconf), 0 when unknown.
uint64_t physical_memory_bytes();

// DIR's model.safetensors as a GPTModel in eval mode; file_cfg is DIR's config.json
// (read_gpt2_config), parsed once by the caller. Says on `notes` what it is about to allocate and
// what it converted. Throws TrainError.
std::unique_ptr<nn::GPTModel> load_gpt2_weights(const std::string& dir,
                                                const nn::GPTConfig& file_cfg, std::ostream& notes);
// The same weights copied into a model that exists (`train --init-from DIR` loads the model it
// trains): its config is file_cfg's but for its dropout and a context_length of at most
// n_positions (wpe's first rows only: --context N). Says the same notes. Throws TrainError.
void load_gpt2_weights_into(nn::GPTModel& model, const std::string& dir,
                            const nn::GPTConfig& file_cfg, std::ostream& notes);

// DIR's vocab.json + merges.txt when both are there, else GPT-2's files (default_gpt2_dir()), as
// `generate --gpt2 DIR` and `train --init-from DIR` load it. Throws TrainError when only one of
// the two is in DIR, the files do not load, or they have more tokens than vocab_size (DIR's
// config.json's).
std::unique_ptr<data::Tokenizer> load_gpt2_tokenizer(const std::string& dir, int64_t vocab_size);

// The files of DIR a command reads (config.json, model.safetensors, vocab.json, merges.txt), each
// with the role "the ROLE folder's", for the check that no output overwrites one of them.
std::vector<NamedPath> gpt2_input_files(const std::string& dir, const std::string& role);

// Both, as `tapegrad generate --gpt2 DIR` loads them (tokenizer_spec "gpt2", preset "gpt2-hf");
// the tokenizer's ids must fit the model's vocab_size.
LoadedModel load_gpt2_model(const std::string& dir, std::ostream& notes);

}  // namespace tg::train
