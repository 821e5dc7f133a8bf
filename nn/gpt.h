// Chapter 4's GPT: FeedForward, TransformerBlock and GPTModel, plus the named configurations.
//
// Python reference: pkg/llms_from_scratch/ch04.py (GPT_CONFIG_124M, FeedForward, TransformerBlock,
// GPTModel); the attention is chapter 3's MultiHeadAttention and LayerNorm/GELU are the book's.
//
// Submodules are built in the book's __init__ order (tok_emb, pos_emb, drop_emb, trf_blocks,
// final_norm, out_head; inside a block att, ff, norm1, norm2, drop_shortcut), so with the same
// manual_seed the weights equal PyTorch's (docs/torch_rng.md §8), and state_dict() names read as
// the book's: "trf_blocks.0.att.W_query.weight", "trf_blocks.0.ff.layers.0.bias",
// "out_head.weight". Forward draws dropout masks in the book's order too (drop_emb, then per block
// the attention weights, the shortcut after attention, the shortcut after the feed-forward).
//
// The KV cache of the book's bonus material (ch04/03_kv-cache/gpt_with_kv_cache.py) is a route
// beside the book's: forward(in_idx, use_cache=true) runs in_idx as the positions after those
// already cached (current_pos on), each block's attention appending its keys and values
// (MultiHeadAttention::forward(x, use_cache)); reset_kv_cache() starts over. forward(in_idx) is
// the book's, uncached. train/trainer.h's generate_cached drives it, rebuilding the cache whenever
// the book's loop would crop the context.
//
// out_head may carry zero rows past vocab_size (GPTConfig::pad_vocab, llm.c's padded vocabulary):
// the logits are then wider than the vocabulary and their readers (train/trainer.h's loss and
// generation) take the first vocab_size columns.
//
// Not here: weight tying with tok_emb (the book keeps them separate; the GPT-2 loader in
// train/gpt2_weights.h copies wte into both), a sliding-window cache.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "nn/containers.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "nn/sdpa_attention.h"

namespace tg::nn {

// GPTConfig::attention's values, the one list of them (options, benchmarks and errors name the
// routes from here): the default first.
inline constexpr const char* kAttentionFused = "fused";
inline constexpr const char* kAttentionBook = "book";
inline constexpr std::array<const char*, 2> kAttentionRoutes = {kAttentionFused, kAttentionBook};
bool is_attention_route(const std::string& name);
// "fused or book": the routes as errors and help lines name them.
std::string attention_routes_text();

// The largest GPTConfig::pad_vocab: far above any tile a GEMM pads for (llm.c pads to 128).
inline constexpr int64_t kMaxPadVocab = 65536;

// The book's GPT_CONFIG dictionary.
struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t context_length = 256;
  int64_t emb_dim = 768;
  int64_t n_heads = 12;
  int64_t n_layers = 12;
  double drop_rate = 0.1;
  bool qkv_bias = false;
  // Not one of the book's keys: how the blocks run their attention core. "fused": one
  // scaled_dot_product_attention call (MultiHeadAttentionSDPA, nn/sdpa_attention.h); "book": the
  // §3.6.2 MultiHeadAttention op by op. Both compute the same function of the same parameters
  // with the same dropout draws, so the choice is neither saved by str() nor compared by ==.
  std::string attention = kAttentionFused;
  // Not one of the book's keys either: out_head's rows padded with zero rows to a multiple of
  // pad_vocab (llm.c's padded_vocab_size; the book's ch05/10 pads 50257 to 50304 for speed). The
  // logits get padded_vocab_size() columns, of which the loss and sampling read the first
  // vocab_size, so the numbers are the unpadded model's. 1: no padding. A way of running the
  // model, as attention is: neither saved by str() nor compared by ==.
  int64_t pad_vocab = 1;
  int64_t padded_vocab_size() const;  // vocab_size rounded up to a multiple of pad_vocab

  bool operator==(const GPTConfig& o) const;
  std::string str() const;  // {"vocab_size": 50257, ...} (JSON, the book's keys)
  // Throws std::invalid_argument naming the first bad field (sizes < 1 or above bounds no model
  // here reaches: vocab 2^22, context 2^20, emb_dim 2^16, 1024 layers; emb_dim not divisible by
  // n_heads, drop_rate outside [0, 1), attention neither "fused" nor "book", pad_vocab outside
  // 1..kMaxPadVocab).
  void validate() const;
  // Parses str()'s output (core/json.h's reader: a key given twice is refused); throws
  // std::invalid_argument with one line naming the key or the place for a missing, mistyped or
  // malformed field. Unknown keys are ignored.
  static GPTConfig parse(const std::string& json);
};

// "gpt2-124m": GPT_CONFIG_124M with context 256 (the book's chapter-5 training setting).
// "tiny": emb 128, 4 heads, 2 layers, context 64, dropout 0.1; its vocab_size follows the
// tokenizer (the caller sets it). Throws std::invalid_argument listing the known names.
GPTConfig gpt_preset(const std::string& name);
// The longest context a preset allows (gpt2-124m: 1024, GPT-2's position table; tiny: 256).
int64_t gpt_preset_max_context(const std::string& name);

class FeedForward : public Module {
 public:
  explicit FeedForward(const GPTConfig& cfg, Generator* gen = nullptr);
  // (b, T, emb_dim) -> (b, T, emb_dim): Linear to 4*emb_dim, GELU, Linear back
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Sequential> layers;
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const GPTConfig& cfg, Generator* gen = nullptr);
  // x = x + drop_shortcut(att(norm1(x))); x = x + drop_shortcut(ff(norm2(x)))
  Tensor forward(const Tensor& x) override;
  // New (KV cache): the same, with att.forward(x, use_cache).
  Tensor forward(const Tensor& x, bool use_cache);

  std::shared_ptr<MultiHeadAttention> att;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> drop_shortcut;
};

class GPTModel : public Module {
 public:
  // Throws std::invalid_argument when cfg.validate() does.
  explicit GPTModel(const GPTConfig& cfg, Generator* gen = nullptr);
  // in_idx: int64 (b, T) with T <= context_length -> logits (b, T, vocab_size); with
  // cfg.pad_vocab > 1, (b, T, padded_vocab_size()), whose first vocab_size columns are the
  // vocabulary's (the rest are 0: out_head's zero rows).
  Tensor forward(const Tensor& in_idx) override;
  // New (KV cache): with use_cache, in_idx holds positions current_pos .. current_pos + T - 1
  // (throws std::invalid_argument past context_length) and advances current_pos. New
  // (generation): with last_only, the logits of the last position alone, (b, 1, vocab_size):
  // the row a next token is drawn from, without out_head's vocab_size x emb_dim work per row.
  Tensor forward(const Tensor& in_idx, bool use_cache, bool last_only = false);
  void reset_kv_cache();  // every block's cache, and current_pos = 0
  // New (--pad-vocab): the padding is no part of the model's state, which checkpoints keep in
  // the book's shapes. `t` has the shape of parameter `name` (the parameter, an AdamW moment):
  // unpad gives it without out_head's padding rows (a view), pad with zero rows added back (a
  // copy). Every other tensor passes through.
  Tensor unpad(const std::string& name, const Tensor& t) const;
  Tensor pad(const std::string& name, const Tensor& t) const;

  GPTConfig cfg;
  int64_t current_pos = 0;  // New: positions already in the KV cache
  std::shared_ptr<Embedding> tok_emb, pos_emb;
  std::shared_ptr<Dropout> drop_emb;
  std::shared_ptr<Sequential> trf_blocks;
  std::shared_ptr<LayerNorm> final_norm;
  std::shared_ptr<Linear> out_head;
};

}  // namespace tg::nn
