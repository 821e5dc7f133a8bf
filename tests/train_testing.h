// The small GPT the trainer tests share: tests/golden/gen_train.py's setup (vocab 257 = bytes
// and <|endoftext|>, context 16, emb 32, 4 heads, 2 layers).
#pragma once
#include "nn/gpt.h"

namespace tg::testing {

inline nn::GPTConfig small_config() {
  nn::GPTConfig c;
  c.vocab_size = 257;
  c.context_length = 16;
  c.emb_dim = 32;
  c.n_heads = 4;
  c.n_layers = 2;
  c.drop_rate = 0.1;
  c.qkv_bias = false;
  return c;
}

}  // namespace tg::testing
