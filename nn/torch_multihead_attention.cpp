#include "nn/torch_multihead_attention.h"

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"

namespace tg::nn {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("MultiheadAttention: " + what);
}

std::string str(int64_t v) { return std::to_string(v); }

// nn.init's xavier std, gain 1, in Python's double order: sqrt(2.0 / float(fan_in + fan_out)).
double xavier_std(int64_t fan_in, int64_t fan_out) {
  return std::sqrt(2.0 / double(fan_in + fan_out));
}

void xavier_uniform_(Tensor& w, Generator* gen) {  // w (fan_out, fan_in)
  const double a = std::sqrt(3.0) * xavier_std(w.size(1), w.size(0));
  uniform_(w, -a, a, gen);
}

void xavier_normal_(Tensor& b, Generator* gen) {  // b (1, 1, E): fan_in = fan_out = E
  normal_(b, 0.0, xavier_std(b.size(1) * b.size(2), b.size(0) * b.size(2)), gen);
}

// _mha_shape_check: the ranks of query, key, value and the masks; returns whether batched.
bool check_ranks(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kpm,
                 const Tensor& attn_mask) {
  if (!q.defined() || !k.defined() || !v.defined())
    fail("query, key and value must be defined tensors");
  if (q.dim() != 2 && q.dim() != 3)
    fail("query should be unbatched 2D or batched 3D tensor but received " + str(q.dim()) +
         "-D query tensor");
  const bool batched = q.dim() == 3;
  const std::string which =
      batched ? "For batched (3-D) `query`, expected " : "For unbatched (2-D) `query`, expected ";
  if (k.dim() != q.dim() || v.dim() != q.dim())
    fail(which + "`key` and `value` to be " + str(q.dim()) + "-D but found " + str(k.dim()) +
         "-D and " + str(v.dim()) + "-D tensors respectively");
  if (kpm.defined() && kpm.dim() != q.dim() - 1)
    fail(which + "`key_padding_mask` to be `None` or " + str(q.dim() - 1) + "-D but found " +
         str(kpm.dim()) + "-D tensor instead");
  if (attn_mask.defined() && attn_mask.dim() != 2 && attn_mask.dim() != 3)
    fail(which + "`attn_mask` to be `None`, 2-D or 3-D but found " + str(attn_mask.dim()) +
         "-D tensor instead");
  for (auto [name, m] : {std::pair{"key_padding_mask", &kpm}, {"attn_mask", &attn_mask}})
    if (m->defined() && m->dtype() != DType::Bool && !is_floating(m->dtype()))
      fail(std::string("only bool and floating types of ") + name + " are supported, got " +
           dtype_name(m->dtype()));
  return batched;
}

// The sizes: embedding dims, key against value, batch sizes, and the masks against (N, L, S).
void check_sizes(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& kpm, const Tensor& attn_mask) {
  const bool batched = q.dim() == 3;
  if (q.size(-1) != m.embed_dim)
    fail("was expecting embedding dimension of " + str(m.embed_dim) + ", but got " +
         str(q.size(-1)) + " (query " + shape_str(q.shape()) + ")");
  const Shape ks(k.shape().begin(), k.shape().end() - 1),
      vs(v.shape().begin(), v.shape().end() - 1);
  if (m.qkv_same_embed_dim && k.shape() != v.shape())
    fail("key shape " + shape_str(k.shape()) + " does not match value shape " +
         shape_str(v.shape()));
  if (ks != vs)
    fail("key's sequence and batch dims " + shape_str(ks) + " do not match value's " +
         shape_str(vs));
  if (k.size(-1) != m.kdim || v.size(-1) != m.vdim)
    fail("expected key (..., kdim=" + str(m.kdim) + ") and value (..., vdim=" + str(m.vdim) +
         "), got key " + shape_str(k.shape()) + " and value " + shape_str(v.shape()));
  const int64_t bdim = m.batch_first ? 0 : 1, sdim = batched ? 1 - bdim : 0;
  const int64_t N = batched ? q.size(bdim) : 1, L = q.size(sdim), S = k.size(sdim);
  if (batched && k.size(bdim) != N)
    fail("query's batch size " + str(N) + " does not match key's " + str(k.size(bdim)) +
         " (query " + shape_str(q.shape()) + ", key " + shape_str(k.shape()) + ")");
  const Shape want_kpm = batched ? Shape{N, S} : Shape{S};
  if (kpm.defined() && kpm.shape() != want_kpm)
    fail("Expected key_padding_mask.shape to be " + shape_str(want_kpm) + ", but got " +
         shape_str(kpm.shape()));
  if (!attn_mask.defined()) return;
  const Shape want = attn_mask.dim() == 2 ? Shape{L, S} : Shape{N * m.num_heads, L, S};
  if (attn_mask.shape() != want)
    fail("The shape of the " + str(attn_mask.dim()) + "D attn_mask is " +
         shape_str(attn_mask.shape()) + ", but should be " + shape_str(want) + ".");
}

// _canonical_mask: a bool mask (True: not allowed) becomes 0 / -inf in `dtype`; a float mask is
// added as it is.
Tensor additive(const Tensor& mask, DType dtype) {
  if (!mask.defined() || mask.dtype() != DType::Bool) return mask;
  return zeros(mask.shape(), dtype).masked_fill(mask, -std::numeric_limits<double>::infinity());
}

// One more source position that every query may attend: a 0 column at the end of the last dim.
Tensor pad_source(const Tensor& mask) {
  if (!mask.defined()) return mask;
  Shape s = mask.shape();
  s.back() = 1;
  return cat({mask, zeros(s, mask.dtype())}, -1);
}

// (N, T, E) batch-first, whatever layout came in.
Tensor batch_major(const Tensor& t, bool batched, bool batch_first) {
  if (!batched) return t.unsqueeze(0);
  return batch_first ? t : t.transpose(0, 1);
}

// _in_projection_packed / _in_projection: q, k, v (N, T, E).
std::array<Tensor, 3> in_projection(const MultiheadAttention& m, const Tensor& query,
                                    const Tensor& key, const Tensor& value) {
  const int64_t E = m.embed_dim;
  std::array<Tensor, 3> w{m.q_proj_weight, m.k_proj_weight, m.v_proj_weight}, b;
  for (int64_t i = 0; i < 3; ++i) {
    if (m.qkv_same_embed_dim) w[i] = m.in_proj_weight.slice(0, i * E, (i + 1) * E);
    if (m.in_proj_bias.defined()) b[i] = m.in_proj_bias.slice(0, i * E, (i + 1) * E);
  }
  return {linear(query, w[0], b[0]), linear(key, w[1], b[1]), linear(value, w[2], b[2])};
}

// attn_mask (L, S) or (N·H, L, S) and key_padding_mask (N, S), both additive, as one mask that
// broadcasts to (N, H, L, S).
Tensor merge_masks(const Tensor& attn_mask, const Tensor& kpm, int64_t N, int64_t H) {
  Tensor a = attn_mask, p = kpm;
  if (a.defined() && a.dim() == 3) a = a.reshape({N, H, a.size(1), a.size(2)});
  if (p.defined()) p = p.reshape({N, 1, 1, p.size(1)});
  if (!a.defined()) return p;
  return p.defined() ? a + p : a;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout,
                                       bool bias, bool add_bias_kv, bool add_zero_attn,
                                       int64_t kdim, int64_t vdim, bool batch_first, Generator* gen)
    : Module("MultiheadAttention"),
      embed_dim(embed_dim),
      kdim(kdim ? kdim : embed_dim),
      vdim(vdim ? vdim : embed_dim),
      num_heads(num_heads),
      head_dim(num_heads > 0 ? embed_dim / num_heads : 0),
      dropout(dropout),
      batch_first(batch_first),
      add_zero_attn(add_zero_attn),
      qkv_same_embed_dim(this->kdim == embed_dim && this->vdim == embed_dim),
      gen(gen) {
  if (embed_dim <= 0 || num_heads <= 0)
    fail("embed_dim and num_heads must be greater than 0, got embed_dim=" + str(embed_dim) +
         " and num_heads=" + str(num_heads) + " instead");
  if (head_dim * num_heads != embed_dim)
    fail("embed_dim must be divisible by num_heads (embed_dim=" + str(embed_dim) +
         ", num_heads=" + str(num_heads) + ")");
  if (kdim < 0 || vdim < 0)
    fail("kdim and vdim must be >= 0 (0: embed_dim), got kdim=" + str(kdim) +
         " and vdim=" + str(vdim));
  if (!(dropout >= 0 && dropout <= 1))
    fail("dropout probability has to be between 0 and 1, but got " + std::to_string(dropout));
  const int64_t E = embed_dim;
  if (qkv_same_embed_dim) {
    register_parameter("in_proj_weight", &in_proj_weight, empty({3 * E, E}));
  } else {
    register_parameter("q_proj_weight", &q_proj_weight, empty({E, E}));
    register_parameter("k_proj_weight", &k_proj_weight, empty({E, this->kdim}));
    register_parameter("v_proj_weight", &v_proj_weight, empty({E, this->vdim}));
  }
  if (bias) register_parameter("in_proj_bias", &in_proj_bias, empty({3 * E}));
  // Built (and drawn) here, before _reset_parameters, as in __init__.
  register_module("out_proj", &out_proj, std::make_shared<Linear>(E, E, bias, gen));
  if (add_bias_kv) {
    register_parameter("bias_k", &bias_k, empty({1, 1, E}));
    register_parameter("bias_v", &bias_v, empty({1, 1, E}));
  }
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  NoGradGuard no_grad;  // nn.init runs under torch.no_grad()
  if (qkv_same_embed_dim) {
    xavier_uniform_(in_proj_weight, gen);
  } else {
    for (Tensor* w : {&q_proj_weight, &k_proj_weight, &v_proj_weight}) xavier_uniform_(*w, gen);
  }
  if (in_proj_bias.defined()) {
    in_proj_bias.zero_();
    out_proj->bias.zero_();
  }
  if (bias_k.defined()) {
    xavier_normal_(bias_k, gen);
    xavier_normal_(bias_v, gen);
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights, bool is_causal) {
  const bool batched = check_ranks(query, key, value, key_padding_mask, attn_mask);
  check_sizes(*this, query, key, value, key_padding_mask, attn_mask);
  if (is_causal && !attn_mask.defined())
    fail(
        "Need attn_mask if specifying the is_causal hint (a bool (L, S) mask, True above the "
        "diagonal)");
  const Tensor q_in = batch_major(query, batched, batch_first);  // (N, L, E)
  const int64_t N = q_in.size(0), L = q_in.size(1), H = num_heads;
  Tensor kpm = additive(key_padding_mask, query.dtype());
  if (kpm.defined() && !batched) kpm = kpm.unsqueeze(0);  // (N, S)
  // The is_causal hint replaces attn_mask only on the fused path without a padding mask.
  const bool sdpa_causal = is_causal && !kpm.defined() && !need_weights;
  Tensor mask = sdpa_causal ? Tensor() : additive(attn_mask, query.dtype());

  auto [q, k, v] = in_projection(*this, q_in, batch_major(key, batched, batch_first),
                                 batch_major(value, batched, batch_first));
  if (bias_k.defined()) {  // bias_k, bias_v as one more source position (N, S + 1, E)
    k = cat({k, bias_k.expand({N, 1, embed_dim})}, 1);
    v = cat({v, bias_v.expand({N, 1, embed_dim})}, 1);
    mask = pad_source(mask), kpm = pad_source(kpm);
  }
  // (N, T, E) -> (N, H, T, head_dim)
  q = q.view({N, L, H, head_dim}).transpose(1, 2);
  k = k.reshape({N, k.size(1), H, head_dim}).transpose(1, 2);
  v = v.reshape({N, v.size(1), H, head_dim}).transpose(1, 2);
  if (add_zero_attn) {  // a zero key and value as one more source position
    k = cat({k, zeros({N, H, 1, head_dim}, k.dtype())}, 2);
    v = cat({v, zeros({N, H, 1, head_dim}, v.dtype())}, 2);
    mask = pad_source(mask), kpm = pad_source(kpm);
  }
  mask = merge_masks(mask, kpm, N, H);  // broadcasts to (N, H, L, S')
  const double p = is_training() ? dropout : 0.0;

  Tensor out, weights;  // (N, H, L, head_dim), (N, H, L, S')
  if (need_weights) {
    weights = matmul(q * std::sqrt(1.0 / double(head_dim)), k.transpose(-2, -1));
    if (mask.defined()) weights = weights + mask;
    weights = softmax(weights, -1);
    if (p > 0) weights = tg::dropout(weights, p, true, gen);
    out = matmul(weights, v);
  } else {
    out = scaled_dot_product_attention(q, k, v, mask, p, sdpa_causal, std::nullopt, gen);
  }
  // (N, H, L, head_dim) -> (N, L, E), out_proj, then the layout that came in
  out = (*out_proj)(out.transpose(1, 2).contiguous().view({N, L, embed_dim}));
  out = !batched ? out.squeeze(0) : batch_first ? out : out.transpose(0, 1);
  if (weights.defined() && average_attn_weights) weights = weights.mean(1);
  if (weights.defined() && !batched) weights = weights.squeeze(0);
  return {out, weights};
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x).first; }

}  // namespace tg::nn
