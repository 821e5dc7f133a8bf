// Input checks shared by the chapter-3 attention modules. PyTorch would fail deep inside a matmul
// or view with a message about some intermediate; these name the module, what the book expects
// and the shape that came in, so the fix is obvious.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tg::nn::detail {

// x must be (num_tokens, d_in) when rank == 2 or (b, num_tokens, d_in) when rank == 3, with
// num_tokens <= context_length when context_length >= 0. Throws std::invalid_argument.
void check_attention_input(const char* module, const Tensor& x, int64_t rank, int64_t d_in,
                           int64_t context_length = -1);

// d_out / num_heads, after the book's assert: throws std::invalid_argument "<module>: d_out must
// be divisible by num_heads (d_out=.., num_heads=..)", or "num_heads must be >= 1". The notebook's
// SDPA-style classes word their assert "d_out is indivisible by num_heads": pass it as assert_text.
int64_t checked_head_dim(const char* module, int64_t d_out, int64_t num_heads,
                         const char* assert_text = "d_out must be divisible by num_heads");
// context_length itself, or std::invalid_argument naming the module when it is below 1 (the
// causal mask it sizes would have no row).
int64_t checked_context_length(const char* module, int64_t context_length);

}  // namespace tg::nn::detail
