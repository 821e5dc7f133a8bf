// §3.6.2 multi-head attention with weight splits: one projection of width d_out for all heads,
// split into num_heads heads of head_dim = d_out / num_heads by view + transpose, then an output
// projection.
//
// Python reference: pkg/llms_from_scratch/ch03.py (MultiHeadAttention); ch03.ipynb cell 36.
//   keys = W_key(x).view(b, num_tokens, num_heads, head_dim).transpose(1, 2)
//                                                       (b, num_heads, num_tokens, head_dim)
//   attn_scores = queries @ keys.transpose(2, 3)        (b, num_heads, num_tokens, num_tokens)
//   masked_fill_(-inf), softmax(/ sqrt(head_dim)), dropout
//   context_vec = (attn_weights @ values).transpose(1, 2)   (b, num_tokens, num_heads, head_dim)
//                 .contiguous().view(b, num_tokens, d_out)
//   out_proj(context_vec)                               (b, num_tokens, d_out)
//
// Equal to MultiHeadAttentionWrapper(d_out = head_dim) when W_query stacks the heads' weights and
// out_proj is the identity with zero bias (tested).
//
// Beside the book's forward, the KV cache of the book's bonus material (ch04/03_kv-cache,
// gpt_with_kv_cache.py and its optimized variant): forward(x, use_cache=true) appends x's keys and
// values to cache_k / cache_v (preallocated (b, num_heads, context_length, head_dim), as the
// optimized variant does) and lets x's queries attend to every cached position up to their own.
// The book's forward(x) is untouched and never reads the cache.
//
// Not here: a fused kernel (MultiHeadAttentionSDPA, nn/sdpa_attention.h, runs its core, cached
// or not, as one scaled_dot_product_attention call), grouped-query attention, a sliding-window
// cache (a full cache is an error; the GPT's caller rebuilds it, see GPTModel).
#pragma once
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tg::nn {

class MultiHeadAttention : public Module {
 public:
  // Throws std::invalid_argument "d_out must be divisible by num_heads" (the book's assert).
  // Draws W_query, W_key, W_value, out_proj in that order.
  MultiHeadAttention(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                     int64_t num_heads, bool qkv_bias = false, Generator* gen = nullptr)
      : MultiHeadAttention("MultiHeadAttention", d_in, d_out, context_length, dropout, num_heads,
                           qkv_bias, gen) {}
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;
  // New (KV cache): with use_cache, x (b, num_tokens, d_in) holds the tokens at positions
  // cache_len .. cache_len + num_tokens - 1; their keys and values join the cache. Throws
  // std::invalid_argument when they do not fit in context_length or b changes mid-sequence.
  // Without use_cache this is forward(x).
  virtual Tensor forward(const Tensor& x, bool use_cache);
  void reset_cache();  // drops the cached keys and values (cache_len = 0)

  int64_t d_in, d_out, context_length, num_heads, head_dim;
  std::shared_ptr<Linear> W_query, W_key, W_value;
  std::shared_ptr<Linear> out_proj;  // New: combines the heads' outputs
  std::shared_ptr<Dropout> dropout;
  Tensor mask;  // buffer triu(ones(context_length, context_length), 1)
  // New: not buffers (the book registers them with persistent=False), so not in state_dict().
  // (b, num_heads, context_length, head_dim), in the keys' dtype (bfloat16 after to(BFloat16):
  // half the bytes per token); cache_len rows filled
  Tensor cache_k, cache_v;
  int64_t cache_len = 0;

 protected:
  // The same class under another name (the notebook's Ch03_MHA), which its errors then give.
  MultiHeadAttention(const char* name, int64_t d_in, int64_t d_out, int64_t context_length,
                     double dropout, int64_t num_heads, bool qkv_bias, Generator* gen);
  // New (KV cache), for every route's forward(x, use_cache): x's checks and the errors above,
  void check_cache_room(const Tensor& x) const;
  // and keys_new / values_new (b, num_tokens, num_heads, head_dim) written at cache_len (the
  // cache allocated on first use); returns the position of their first row.
  int64_t append_to_cache(const Tensor& keys_new, const Tensor& values_new);
};

}  // namespace tg::nn
