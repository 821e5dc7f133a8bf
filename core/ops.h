// The differentiable ops, as free functions (torch.* style). Each is defined in core/ops/*.cpp
// together with its backward. Shapes follow PyTorch: elementwise ops broadcast, reductions take a
// dim that may be negative, matmul has torch.matmul's semantics.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg {

// --- elementwise (ops/elementwise.cpp); operands broadcast, dtypes promote as in PyTorch ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor gelu(const Tensor& a);  // tanh approximation, the book's GELU
// Comparisons give bool masks (no gradient).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

// --- reductions (ops/reduce.cpp) ---
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor sum(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a);
Tensor var(const Tensor& a, int64_t dim, bool unbiased = true, bool keepdim = false);
Tensor var(const Tensor& a, bool unbiased = true);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a);
// The gradient of a broadcast: g summed back to the shape of the input it flowed from.
Tensor sum_to(const Tensor& g, const Shape& shape);

// --- normalization (ops/layer_norm.cpp) ---
// The book's LayerNorm over the last dim (§4.2): (x - mean) / sqrt(var + eps) * weight + bias, with
// the biased variance; x (..., C), weight and bias (C). Mixed float dtypes promote as the book's
// composed ops would.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// --- matmul (ops/matmul.cpp) ---
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x·wᵀ + b with w stored (out_features, in_features), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// --- einsum (ops/einsum.cpp) ---
// torch.einsum(equation, *operands) without opt_einsum: subscripts [a-zA-Z], "..." for broadcast
// dims, spaces ignored; an explicit output after "->", else ellipsis dims then the labels seen
// once, uppercase before lowercase. A label repeated in one operand takes its diagonal; size-1
// dims broadcast. Operands are contracted left to right, each pair as one batched matmul, in
// PyTorch's order of permutes and sums. Built from differentiable ops, so its backward is theirs.
// Floating operands of one dtype; a bad equation is std::invalid_argument naming einsum, the
// equation and the operand.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
// torch.diagonal (ops/view.cpp): the elements (i, i + offset) of dims dim1 and dim2 as a new last
// dim, a view; differentiable.
Tensor diagonal(const Tensor& t, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);

// --- softmax family (ops/softmax.cpp) ---
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
// Mean cross-entropy of logits (N, C) against int64 targets (N), through log-sum-exp. With
// 0 <= num_classes < C the classes are each row's first num_classes columns and the rest is
// padding (a padded vocabulary, train --pad-vocab): read in place, outside the loss, gradient 0;
// loss and gradient are those of the sliced copy logits[:, :num_classes], bit for bit.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t num_classes = -1);

// --- attention (ops/attention.cpp) ---
// PyTorch 2's F.scaled_dot_product_attention: query (..., L, E), key (..., S, E), value
// (..., S, Ev) -> (..., L, Ev), leading dims broadcast. softmax(q·kᵀ·scale + mask) · v, with
// scale 1/sqrt(E) by default; is_causal keeps key j for query i when j <= i; attn_mask is bool
// (True takes part) or additive in the query's dtype, broadcast to (..., L, S); dropout_p drops
// attention weights as F.dropout would, with the same draws from `gen` (the global generator
// when null). A row that no key reaches gives 0. One node on the tape; the float32 kernel keeps
// nothing of size L × S (core/kernels/attention.cpp).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

// --- masking, joining, indexing (ops/index.cpp) ---
// The lower / upper triangle (the rest zero), as torch.tril / torch.triu; differentiable.
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
Tensor& masked_fill_(Tensor& a, const Tensor& mask, double value);
Tensor cat(const std::vector<Tensor>& ts, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim = 0);
// Rows of `weight` (num, dim) picked by int64 `ids` of any shape: result ids.shape + (dim).
Tensor embedding(const Tensor& ids, const Tensor& weight);

// --- dropout (ops/random.cpp draws the mask, ops/dropout.cpp applies it) ---
// Inverted dropout as F.dropout: keep with probability 1-p and scale by 1/(1-p). The mask is drawn
// from `gen` (the global generator when null) exactly as PyTorch draws it.
Tensor dropout(const Tensor& a, double p, bool training = true, Generator* gen = nullptr);
// The same with a given mask of 0 / scale values (broadcastable to a); for tests and replay.
Tensor dropout_with_mask(const Tensor& a, const Tensor& mask);

// --- random creation and in-place initialisation (ops/random.cpp) ---
// Values drawn in storage order from `gen` (the global generator when null), bit for bit as
// PyTorch 1.13 draws them (core/rng.h). Float types only; never on the tape.
Tensor rand(const Shape& shape, Generator* gen = nullptr, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, Generator* gen = nullptr, DType dtype = DType::Float32);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
// t.uniform_(from, to) / t.normal_(mean, std) on a contiguous float tensor, off the tape (as
// nn.init does under no_grad).
Tensor& uniform_(Tensor& t, double from, double to, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);

// --- in-place parameter updates, off the tape (ops/update.cpp) ---
// torch.optim.AdamW's hyper-parameters for one step; step is the 1-based count after increment.
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};
// One AdamW update of p from its gradient g, with the moments exp_avg and exp_avg_sq (all
// float32, contiguous, p's shape; g may be strided), in kernels::adamw's order of operations.
void adamw_(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s);
// The same update on n floats of raw buffers: a piece of a parameter, of its contiguous gradient,
// and that piece's moments (a ZeRO-1 shard keeps only its own). Elementwise, so a piece updates
// as it would inside the whole tensor.
void adamw_span(int64_t n, float* p, const float* g, float* exp_avg, float* exp_avg_sq,
                const AdamWStep& s);
// The same update with p, g and the moments in bfloat16, as torch.optim.AdamW runs on a model
// after model.to(torch.bfloat16) (its CPU single-tensor loop): each of its ops computes in
// float32 and rounds its result to bf16 (golden tests/golden/adamw_bf16.txt).
void adamw_bf16_(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamWStep& s);

// --- autocast (ops/common.cpp) ---
// torch.autocast("cpu", dtype=torch.bfloat16) over a scope of this thread: matmul, linear and
// scaled_dot_product_attention cast float32 operands to bfloat16 (results in bfloat16, sums in
// float32); cross_entropy casts bfloat16 logits to float32; every other op computes in its
// inputs' dtype, bfloat16 + float32 promoting to float32, as PyTorch's CPU autocast lists have
// it. The casts are on the tape, so float32 parameters get float32 gradients. Run backward()
// outside the scope, as PyTorch does.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_;
};
bool autocast_enabled();

// The kernel path the ops run on ("scalar", "avx2", "avx512", "neon"; TAPEGRAD_ISA forces one):
// part of what makes two processes' float results comparable.
std::string kernel_path();
// The GEMM's block sizes on that path, "MC,KC,NC" (TAPEGRAD_GEMM_BLOCKING, else derived from the
// caches): KC, where a dot product is split, is the other part. Throws std::invalid_argument when
// TAPEGRAD_GEMM_BLOCKING is malformed.
std::string gemm_blocking();

}  // namespace tg
