// `tapegrad demo`: section 3.3 of the book on the engine, printed as the notebook prints it.
// (The trainer replaces this as `make demo`'s program once it exists.)
#include <iostream>
#include <string>

#include "core/ops.h"
#include "train/commands.h"

namespace tg::cli {

int demo_main(int argc, char** argv) {
  if (argc > 1) {
    std::cerr << "tapegrad demo: takes no options, got '" << argv[1] << "'\n";
    return 2;
  }
  // "Your journey starts with one step", each token a 3-d embedding (§3.3.1)
  const Tensor inputs = tensor({{0.43, 0.15, 0.89},    // Your     (x^1)
                                {0.55, 0.87, 0.66},    // journey  (x^2)
                                {0.57, 0.85, 0.64},    // starts   (x^3)
                                {0.22, 0.58, 0.33},    // with     (x^4)
                                {0.77, 0.25, 0.10},    // one      (x^5)
                                {0.05, 0.80, 0.55}});  // step     (x^6)
  std::cout << "inputs (6 tokens, 3-d embeddings):\n" << inputs << "\n\n";

  const Tensor query = inputs[1];  // the second token is the query
  const Tensor attn_scores_2 = matmul(inputs, query);
  std::cout << "3.3.1 attention scores for x^(2):\n" << attn_scores_2 << "\n";
  const Tensor attn_weights_2 = softmax(attn_scores_2, 0);
  std::cout << "Attention weights: " << attn_weights_2 << "\n";
  std::cout << "Sum: " << attn_weights_2.sum() << "\n";
  std::cout << "Context vector z^(2): " << matmul(attn_weights_2, inputs) << "\n\n";

  const Tensor attn_scores = matmul(inputs, inputs.T());  // §3.3.2, all pairs at once
  std::cout << "3.3.2 attention scores (inputs @ inputs.T):\n" << attn_scores << "\n";
  const Tensor attn_weights = softmax(attn_scores, -1);
  std::cout << "attention weights (softmax over the last dim):\n" << attn_weights << "\n";
  std::cout << "All row sums: " << attn_weights.sum(-1) << "\n";
  std::cout << "context vectors (attn_weights @ inputs):\n" << matmul(attn_weights, inputs) << "\n";
  return 0;
}

}  // namespace tg::cli
