// `tapegrad chapter3 [--cell N]`: replays the code cells of the book's chapter-3 notebook
// (ch03/01_main-chapter-code/ch03.ipynb, In [2] to In [38]) in order, with the same seeds and
// inputs, and prints every result the way PyTorch prints it, so the output can be diffed line by
// line against the notebook (tests/golden/diff_ch03.py does that). Every printed tensor is computed
// here; nothing is pasted in.
//
// --notebook mha replays multihead-attention.ipynb instead (shapes only; see replay_mha_notebook).
// With --cell N only cell N's output is printed; the earlier cells still run (silently), because
// later cells use their variables and their random draws.
//
// Departures from the notebook text, each deliberate:
//   In [1]  prints the torch version: skipped (there is no torch here).
//   In [27] the notebook's code re-prints mask_simple, but its output is the book's listing
//           `masked_simple = attn_weights*mask_simple; print(masked_simple)`, which In [28] uses:
//           we run the book's code, so the output matches the notebook's.
//   In [36] the notebook's class has a typo (nn.Dropout(d.dropout)); we use `dropout`, as the book.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "app/cli_options.h"
#include "app/commands.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/text.h"
#include "nn/causal_attention.h"
#include "nn/causal_mask.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"
#include "nn/self_attention.h"
#include "nn/simple_attention.h"

namespace tg::cli {

namespace {

// print(x.shape) in PyTorch: torch.Size([2, 6, 3])
std::string torch_size(const Shape& s) {
  std::string out = "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "])";
}

// Python's repr of a float: the shortest round-tripping digits, always with a '.' or exponent.
std::string py_float(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

// The multi-head attention notebook's variant of the wrapper (multihead-attention.ipynb In [5]):
// the chapter's MultiHeadAttentionWrapper plus an output projection, drawn after the heads.
class WrapperWithProjection : public nn::Module {
 public:
  WrapperWithProjection(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                        int64_t num_heads)
      : Module("MultiHeadAttentionWrapper") {
    wrapper = std::make_shared<nn::MultiHeadAttentionWrapper>(d_in, d_out, context_length, dropout,
                                                              num_heads);
    add_child("heads", wrapper->heads.get());  // state_dict keys as the notebook's: heads.0...
    register_module("out_proj", &out_proj,
                    std::make_shared<nn::Linear>(d_out * num_heads, d_out * num_heads));
  }
  Tensor forward(const Tensor& x) override { return (*out_proj)((*wrapper)(x)); }
  std::shared_ptr<nn::MultiHeadAttentionWrapper> wrapper;
  std::shared_ptr<nn::Linear> out_proj;
};

// multihead-attention.ipynb, In [2]..In [8]. It prints only shapes. Its inputs come from
// tiktoken's GPT-2 encoding of small-text-sample.txt, neither of which is in this branch, so the
// token ids here are a stand-in (consecutive windows of ids 0, 1, 2, ...); the shapes, the
// layers and their draws are the notebook's.
int replay_mha_notebook(int only, std::ostream& null_stream) {
  auto cell = [&](int n) -> std::ostream& {
    if (only != 0 && n != only) return null_stream;
    if (only == 0) std::cout << (n > 2 ? "\n" : "") << "In [" << n << "]:\n";
    return std::cout;
  };
  cell(2);
  const int64_t vocab_size = 50257, output_dim = 256, max_len = 1024;
  const int64_t context_length = max_len;
  nn::Embedding token_embedding_layer(vocab_size, output_dim);
  nn::Embedding pos_embedding_layer(context_length, output_dim);
  const int64_t max_length = 4, batch_size = 8;

  cell(3);  // the first batch: 8 windows of max_length ids (stand-in ids, see above)
  const Tensor x = arange(batch_size * max_length).view({batch_size, max_length});
  const Tensor token_embeddings = token_embedding_layer(x);
  const Tensor pos_embeddings = pos_embedding_layer(arange(max_length));
  const Tensor input_embeddings = token_embeddings + pos_embeddings;
  cell(4) << torch_size(input_embeddings.shape()) << "\n";

  cell(5);
  {
    manual_seed(123);
    const int64_t d_in = output_dim, num_heads = 2, d_out = d_in / num_heads;
    WrapperWithProjection mha(d_in, d_out, max_length, 0.0, num_heads);
    const Tensor context_vecs = mha(input_embeddings);
    cell(6) << "context_vecs.shape: " << torch_size(context_vecs.shape()) << "\n";
  }
  cell(7);
  {
    manual_seed(123);
    const int64_t d_in = output_dim, d_out = d_in;
    nn::MultiHeadAttention mha(d_in, d_out, max_length, 0.0, 2);
    const Tensor context_vecs = mha(input_embeddings);
    cell(8) << "context_vecs.shape: " << torch_size(context_vecs.shape()) << "\n";
  }
  return 0;
}

namespace {

// Replays the notebook(s) as o asks; returns the exit status.
int run_chapter3(const cli::Chapter3Options& o) {
  const int only = o.only;
  std::ostream null_stream(nullptr);  // swallows the output of cells not asked for
  if (o.notebook == "mha") return replay_mha_notebook(only, null_stream);
  int last_printed = 0;
  // The notebook's cell N: returns where its print() calls go.
  auto cell = [&](int n) -> std::ostream& {
    if (only != 0 && n != only) return null_stream;
    if (only == 0) {
      if (last_printed) std::cout << "\n";
      std::cout << "In [" << n << "]:\n";
    }
    last_printed = n;
    return std::cout;
  };
  const double inf = std::numeric_limits<double>::infinity();

  // ---- §3.3.1 a simple self-attention mechanism without trainable weights ----
  cell(2);
  const Tensor inputs = nn::your_journey_inputs();  // one 3-d row per word, x^(1) .. x^(6)

  Tensor query = inputs[1];  // 2nd input token is the query
  Tensor attn_scores_2 = nn::attention_scores_for_query(inputs, query);
  cell(3) << attn_scores_2 << "\n";

  {
    std::ostream& os = cell(4);
    Tensor res = scalar_tensor(0.);  // res = 0.; res += inputs[0][idx] * query[idx]
    for (int64_t idx = 0; idx < inputs[0].numel(); ++idx) res = res + inputs[0][idx] * query[idx];
    os << res << "\n";
    os << matmul(inputs[0], query) << "\n";  // torch.dot
  }
  {
    std::ostream& os = cell(5);
    const Tensor attn_weights_2_tmp = attn_scores_2 / attn_scores_2.sum();
    os << "Attention weights: " << attn_weights_2_tmp << "\n";
    os << "Sum: " << attn_weights_2_tmp.sum() << "\n";
  }
  {
    std::ostream& os = cell(6);
    const Tensor attn_weights_2_naive = nn::softmax_naive(attn_scores_2);
    os << "Attention weights: " << attn_weights_2_naive << "\n";
    os << "Sum: " << attn_weights_2_naive.sum() << "\n";
  }
  Tensor attn_weights_2 = softmax(attn_scores_2, 0);
  cell(7) << "Attention weights: " << attn_weights_2 << "\n"
          << "Sum: " << attn_weights_2.sum() << "\n";

  query = inputs[1];
  Tensor context_vec_2 = nn::context_vector_loop(attn_weights_2, inputs);
  cell(8) << context_vec_2 << "\n";

  // ---- §3.3.2 attention weights for all input tokens ----
  Tensor attn_scores = nn::attention_scores_loop(inputs);
  cell(9) << attn_scores << "\n";
  attn_scores = matmul(inputs, inputs.T());
  cell(10) << attn_scores << "\n";
  Tensor attn_weights = softmax(attn_scores, -1);
  cell(11) << attn_weights << "\n";
  {
    std::ostream& os = cell(12);
    double row_2_sum = 0;  // Python's sum() of a list of floats, in double
    for (double v : {0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581}) row_2_sum += v;
    os << "Row 2 sum: " << py_float(row_2_sum) << "\n";
    os << "All row sums: " << attn_weights.sum(-1) << "\n";
  }
  const Tensor all_context_vecs = matmul(attn_weights, inputs);
  cell(13) << all_context_vecs << "\n";
  cell(14) << "Previous 2nd context vector: " << context_vec_2 << "\n";

  // ---- §3.4.1 computing the attention weights step by step ----
  cell(15);
  const Tensor x_2 = inputs[1];         // second input element
  const int64_t d_in = inputs.size(1);  // the input embedding size, d=3
  const int64_t d_out = 2;              // the output embedding size, d=2

  cell(16);
  manual_seed(123);
  // nn.Parameter(torch.rand(d_in, d_out), requires_grad=False): plain tensors, off the tape
  const Tensor W_query = rand({d_in, d_out});
  const Tensor W_key = rand({d_in, d_out});
  const Tensor W_value = rand({d_in, d_out});

  const Tensor query_2 = matmul(x_2, W_query);  // _2: with respect to the 2nd input element
  cell(17) << query_2 << "\n";

  Tensor keys = matmul(inputs, W_key);
  const Tensor values = matmul(inputs, W_value);
  cell(18) << "keys.shape: " << torch_size(keys.shape()) << "\n"
           << "values.shape: " << torch_size(values.shape()) << "\n";

  const Tensor keys_2 = keys[1];
  cell(19) << matmul(query_2, keys_2) << "\n";  // attn_score_22 = query_2.dot(keys_2)

  attn_scores_2 = matmul(query_2, keys.T());  // all attention scores for the given query
  cell(20) << attn_scores_2 << "\n";

  const int64_t d_k = keys.size(1);
  attn_weights_2 = softmax(attn_scores_2 / std::pow(double(d_k), 0.5), -1);
  cell(21) << attn_weights_2 << "\n";

  context_vec_2 = matmul(attn_weights_2, values);
  cell(22) << context_vec_2 << "\n";

  // ---- §3.4.2 compact self-attention classes ----
  manual_seed(123);
  nn::SelfAttention_v1 sa_v1(d_in, d_out);
  cell(23) << sa_v1(inputs) << "\n";

  manual_seed(789);
  nn::SelfAttention_v2 sa_v2(d_in, d_out);
  cell(24) << sa_v2(inputs) << "\n";

  // ---- §3.5.1 applying a causal attention mask ----
  const Tensor queries = (*sa_v2.W_query)(inputs);
  keys = (*sa_v2.W_key)(inputs);
  attn_scores = matmul(queries, keys.T());
  attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  cell(25) << attn_weights << "\n";

  int64_t context_length = attn_scores.size(0);
  const Tensor mask_simple = nn::mask_simple(context_length);
  cell(26) << mask_simple << "\n";

  const Tensor masked_simple = attn_weights * mask_simple;
  cell(27) << masked_simple << "\n";

  {
    const Tensor row_sums = masked_simple.sum(-1, /*keepdim=*/true);
    const Tensor masked_simple_norm = masked_simple / row_sums;
    cell(28) << masked_simple_norm << "\n";
  }

  const Tensor mask = nn::causal_mask(context_length);
  const Tensor masked = attn_scores.masked_fill(mask.to(DType::Bool), -inf);
  cell(29) << masked << "\n";

  attn_weights = softmax(masked / std::pow(double(keys.size(-1)), 0.5), -1);
  cell(30) << attn_weights << "\n";

  // ---- §3.5.2 masking additional attention weights with dropout ----
  {
    manual_seed(123);
    nn::Dropout dropout(0.5);  // dropout rate of 50%
    const Tensor example = ones({6, 6});
    cell(31) << dropout(example) << "\n";
  }
  manual_seed(123);
  cell(32) << tg::dropout(attn_weights, 0.5) << "\n";  // F.dropout's defaults: p=0.5, training

  // ---- §3.5.3 a compact causal attention class ----
  const Tensor batch = stack({inputs, inputs}, 0);
  cell(33) << torch_size(batch.shape()) << "\n";  // 2 inputs, 6 tokens each, 3-d embeddings

  {
    manual_seed(123);
    context_length = batch.size(1);
    nn::CausalAttention ca(d_in, d_out, context_length, 0.0);
    const Tensor context_vecs = ca(batch);
    cell(34) << context_vecs << "\n"
             << "context_vecs.shape: " << torch_size(context_vecs.shape()) << "\n";
  }

  // ---- §3.6.1 stacking multiple single-head attention layers ----
  {
    manual_seed(123);
    context_length = batch.size(1);
    nn::MultiHeadAttentionWrapper mha(3, 2, context_length, 0.0, /*num_heads=*/2);
    const Tensor context_vecs = mha(batch);
    cell(35) << context_vecs << "\n"
             << "context_vecs.shape: " << torch_size(context_vecs.shape()) << "\n";
  }

  // ---- §3.6.2 multi-head attention with weight splits ----
  {
    manual_seed(123);
    context_length = batch.size(1);
    nn::MultiHeadAttention mha(batch.size(2), /*d_out=*/2, context_length, 0.0, /*num_heads=*/2);
    const Tensor context_vecs = mha(batch);
    cell(36) << context_vecs << "\n"
             << "context_vecs.shape: " << torch_size(context_vecs.shape()) << "\n";
  }

  // (b, num_heads, num_tokens, head_dim) = (1, 2, 3, 4)
  const Tensor a = tensor({{{{0.2745, 0.6584, 0.2775, 0.8573},
                             {0.8993, 0.0390, 0.9268, 0.7388},
                             {0.7179, 0.7058, 0.9156, 0.4340}},

                            {{0.0772, 0.3565, 0.1479, 0.5331},
                             {0.4066, 0.2318, 0.4545, 0.9737},
                             {0.4606, 0.5159, 0.4220, 0.5786}}}});
  cell(37) << matmul(a, a.transpose(2, 3)) << "\n";

  {
    std::ostream& os = cell(38);
    const Tensor first_head = a[0][0];
    const Tensor first_res = matmul(first_head, first_head.T());
    os << "First head:\n " << first_res << "\n";
    const Tensor second_head = a[0][1];
    const Tensor second_res = matmul(second_head, second_head.T());
    os << "\nSecond head:\n " << second_res << "\n";
  }
  return 0;
}

}  // namespace

int chapter3_main(int argc, char** argv) {
  int rc = 0;
  try {
    const Chapter3Options o = parse_chapter3_args(argc, argv);
    if (o.help)
      std::cout << help_text(chapter3_command());
    else
      rc = run_chapter3(o);
  } catch (const UsageError& e) {
    std::cerr << "tapegrad chapter3: " << e.what() << "\n";
    return 2;
  }
  // Lost output (a full disk, a closed pipe) is a failure, not a silent exit 0.
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "tapegrad chapter3: cannot write the output to stdout (disk full or pipe "
                 "closed?)\n";
    return 1;
  }
  return rc;
}

}  // namespace tg::cli
