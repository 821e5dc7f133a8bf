#include "nn/multihead_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

MultiHeadAttention::MultiHeadAttention(const char* name, int64_t d_in, int64_t d_out,
                                       int64_t context_length, double dropout, int64_t num_heads,
                                       bool qkv_bias, Generator* gen)
    : Module(name),
      d_in(d_in),
      d_out(d_out),
      context_length(detail::checked_context_length(name, context_length)),
      num_heads(num_heads),
      head_dim(detail::checked_head_dim(name, d_out, num_heads)) {  // Reduce the projection dim
  register_module("W_query", &W_query, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_key", &W_key, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_value", &W_value, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("out_proj", &out_proj, std::make_shared<Linear>(d_out, d_out, true, gen));
  register_module("dropout", &this->dropout, std::make_shared<Dropout>(dropout, gen));
  register_buffer("mask", &mask, causal_mask(context_length));
}

Tensor MultiHeadAttention::forward(const Tensor& x) {
  detail::check_attention_input(type_name().c_str(), x, 3, d_in, context_length);
  const int64_t b = x.size(0), num_tokens = x.size(1);

  Tensor keys = (*W_key)(x);  // (b, num_tokens, d_out)
  Tensor queries = (*W_query)(x);
  Tensor values = (*W_value)(x);

  // Split the last dim: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, head_dim)
  keys = keys.view({b, num_tokens, num_heads, head_dim});
  values = values.view({b, num_tokens, num_heads, head_dim});
  queries = queries.view({b, num_tokens, num_heads, head_dim});

  // (b, num_tokens, num_heads, head_dim) -> (b, num_heads, num_tokens, head_dim)
  keys = keys.transpose(1, 2);
  queries = queries.transpose(1, 2);
  values = values.transpose(1, 2);

  // Scaled dot-product attention with a causal mask, every head at once
  Tensor attn_scores = matmul(queries, keys.transpose(2, 3));  // (b, num_heads, T, T)
  const Tensor mask_bool = mask.to(DType::Bool).slice(0, 0, num_tokens).slice(1, 0, num_tokens);
  attn_scores.masked_fill_(mask_bool, -std::numeric_limits<double>::infinity());

  Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  attn_weights = (*dropout)(attn_weights);

  // (b, num_heads, num_tokens, head_dim) -> (b, num_tokens, num_heads, head_dim)
  Tensor context_vec = matmul(attn_weights, values).transpose(1, 2);
  // Combine heads, d_out = num_heads * head_dim
  context_vec = context_vec.contiguous().view({b, num_tokens, d_out});
  context_vec = (*out_proj)(context_vec);  // optional projection
  return context_vec;
}

// ---- the KV cache (the book's bonus ch04/03_kv-cache) -----------------------------------------

void MultiHeadAttention::reset_cache() {
  cache_k = Tensor();
  cache_v = Tensor();
  cache_len = 0;
}

namespace {

// cache[bi, h, pos + t, :] = fresh[bi, t, h, :] for every t of fresh (b, num_tokens, num_heads,
// head_dim, contiguous) into cache (b, num_heads, context_length, head_dim).
template <class T>
void append_rows(const Tensor& fresh, Tensor& cache, int64_t pos) {
  const int64_t b = fresh.size(0), n = fresh.size(1), H = fresh.size(2), hd = fresh.size(3);
  const int64_t ctx = cache.size(2);
  const T* src = fresh.data<T>();
  T* dst = cache.data<T>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(src + ((bi * n + t) * H + h) * hd, hd,
                    dst + ((bi * H + h) * ctx + pos + t) * hd);
}

}  // namespace

void MultiHeadAttention::check_cache_room(const Tensor& x) const {
  detail::check_attention_input("MultiHeadAttention", x, 3, d_in, context_length);
  const int64_t b = x.size(0), num_tokens = x.size(1);
  if (cache_len + num_tokens > context_length)
    throw std::invalid_argument("MultiHeadAttention: the KV cache holds " +
                                std::to_string(cache_len) + " of " +
                                std::to_string(context_length) + " positions, " +
                                std::to_string(num_tokens) + " more do not fit (reset_cache())");
  if (cache_len > 0 && cache_k.size(0) != b)
    throw std::invalid_argument("MultiHeadAttention: the KV cache holds a batch of " +
                                std::to_string(cache_k.size(0)) + ", got " + std::to_string(b) +
                                " (reset_cache())");
}

int64_t MultiHeadAttention::append_to_cache(const Tensor& keys_new, const Tensor& values_new) {
  const int64_t b = keys_new.size(0), num_tokens = keys_new.size(1);
  if (cache_len == 0) {
    cache_k = zeros({b, num_heads, context_length, head_dim}, keys_new.dtype());
    cache_v = zeros({b, num_heads, context_length, head_dim}, keys_new.dtype());
  }
  const int64_t start = cache_len;
  if (keys_new.dtype() == DType::Float64) {  // after to(Float64), for gradient checks
    append_rows<double>(keys_new.contiguous(), cache_k, start);
    append_rows<double>(values_new.contiguous(), cache_v, start);
  } else if (keys_new.dtype() == DType::BFloat16) {  // after to(BFloat16): half the bytes
    append_rows<bfloat16>(keys_new.contiguous(), cache_k, start);
    append_rows<bfloat16>(values_new.contiguous(), cache_v, start);
  } else {
    append_rows<float>(keys_new.contiguous(), cache_k, start);
    append_rows<float>(values_new.contiguous(), cache_v, start);
  }
  cache_len += num_tokens;
  return start;
}

Tensor MultiHeadAttention::forward(const Tensor& x, bool use_cache) {
  if (!use_cache) return forward(x);
  check_cache_room(x);
  const int64_t b = x.size(0), num_tokens = x.size(1);

  Tensor keys_new = (*W_key)(x);  // Shape: (b, num_tokens, d_out)
  Tensor values_new = (*W_value)(x);
  Tensor queries = (*W_query)(x);
  keys_new = keys_new.view({b, num_tokens, num_heads, head_dim});
  values_new = values_new.view({b, num_tokens, num_heads, head_dim});
  queries = queries.view({b, num_tokens, num_heads, head_dim});

  // New: append to the cache, then attend over all it holds
  const int64_t start = append_to_cache(keys_new, values_new);
  const Tensor keys = cache_k.slice(2, 0, cache_len);  // (b, num_heads, cache_len, head_dim)
  const Tensor values = cache_v.slice(2, 0, cache_len);
  queries = queries.transpose(1, 2);  // (b, num_heads, num_tokens, head_dim)

  Tensor attn_scores = matmul(queries, keys.transpose(2, 3));  // (b, num_heads, T, cache_len)
  // Changed: query t sits at position start + t, so it sees keys 0 .. start + t
  const Tensor mask_bool = mask.slice(0, start, cache_len).slice(1, 0, cache_len).to(DType::Bool);
  attn_scores.masked_fill_(mask_bool, -std::numeric_limits<double>::infinity());
  Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  attn_weights = (*dropout)(attn_weights);

  Tensor context_vec = matmul(attn_weights, values).transpose(1, 2);
  context_vec = context_vec.contiguous().view({b, num_tokens, d_out});
  return (*out_proj)(context_vec);
}

}  // namespace tg::nn
