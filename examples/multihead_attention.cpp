// Chapter 3's MultiHeadAttention (§3.6.2) on the book's six-token input "Your journey starts with
// one step", built as the notebook builds it: a batch of two copies, manual_seed(123), d_out = 2,
// two heads, no dropout. Prints context_vecs exactly as the book does, then one backward pass:
// the gradient of the context vectors' sum with respect to W_query's weight.
//
// With tapegrad installed (make install PREFIX=...):
//   c++ -std=c++20 multihead_attention.cpp $(pkg-config --cflags --libs tapegrad)
#include <iostream>

#include "core/ops.h"
#include "core/rng.h"
#include "nn/multihead_attention.h"
#include "nn/simple_attention.h"

using namespace tg;

int main() {
  // The book's tensor([[0.43, 0.15, 0.89], ...]): "Your journey starts with one step", one 3-d
  // embedding per word.
  const Tensor inputs = nn::your_journey_inputs();  // (6, 3)
  const Tensor batch = stack({inputs, inputs}, 0);  // (2, 6, 3)

  manual_seed(123);
  const int64_t context_length = batch.size(1), d_in = batch.size(2), d_out = 2;
  nn::MultiHeadAttention mha(d_in, d_out, context_length, /*dropout=*/0.0, /*num_heads=*/2);
  const Tensor context_vecs = mha(batch);  // (2, 6, d_out)
  std::cout << context_vecs << "\n";
  std::cout << "context_vecs.shape: torch.Size(" << shape_str(context_vecs.shape()) << ")\n";

  context_vecs.sum().backward();
  std::cout << "W_query.weight.grad:\n" << mha.W_query->weight.grad() << "\n";
  return 0;
}
