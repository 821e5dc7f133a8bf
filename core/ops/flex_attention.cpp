// flex_attention (core/flex_attention.h): the block mask, the standard mask_mods, and the op,
// which hands the fused kernel a hook (kernels::AttnScoreMod) instead of a mask tensor.
//
// How the kernel masks a partial tile: after its S = q·kᵀ tile product (which, as for is_causal,
// skips the micro-tiles past the tile's furthest kept diagonal, BlockMask::diag), it calls the
// hook's rewrite(), which writes the final scores in place, x = score_mod(scale·S) where the block
// mask's bit (mask_mod's answer, asked once by create_block_mask) keeps the key and -inf where it
// does not; the tile step (the ISA's attn_fwd_tile / attn_bwd_tile, unchanged) then reads x with
// scale 1 and no mask. Full tiles without a score_mod take the kernel's plain path, empty ones are
// never computed.
// Backward (the kernel's, see core/ops/attention.cpp): with x = score_mod(scale·S),
//   in the forward: P = softmax(x)  so  dx = P ∘ (dP − D)           (the tile step, scale 1)
//   in the forward: x = score_mod(scale·S)  so  dS = dx ∘ scale · score_mod′(scale·S)
// where score_mod′ is the Score's derivative, written by rewrite() beside x.
#include "core/flex_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/autograd.h"
#include "core/impl.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/threadpool.h"

namespace tg {

using detail::fail;

// ---- Score: value and derivative (forward-mode dual number) ------------------------------------
Score operator+(Score a, Score b) { return {a.value + b.value, a.grad + b.grad}; }
Score operator-(Score a, Score b) { return {a.value - b.value, a.grad - b.grad}; }
Score operator*(Score a, Score b) {
  return {a.value * b.value, a.grad * b.value + a.value * b.grad};
}
Score operator/(Score a, Score b) {
  return {a.value / b.value, (a.grad * b.value - a.value * b.grad) / (b.value * b.value)};
}
Score operator-(Score a) { return {-a.value, -a.grad}; }
Score exp(Score a) {
  const double e = std::exp(a.value);
  return {e, e * a.grad};
}
Score tanh(Score a) {
  const double t = std::tanh(a.value);
  return {t, (1 - t * t) * a.grad};
}

// ---- the standard mask_mods ---------------------------------------------------------------------
MaskMod causal_mask() {
  return [](int64_t, int64_t, int64_t q_idx, int64_t kv_idx) { return q_idx >= kv_idx; };
}

MaskMod sliding_window_mask(int64_t window) {
  if (window < 1) fail("sliding_window_mask", "window must be >= 1, got ", window);
  return [window](int64_t, int64_t, int64_t q_idx, int64_t kv_idx) {
    return q_idx >= kv_idx && q_idx - kv_idx < window;
  };
}

MaskMod document_causal_mask(std::vector<std::vector<int64_t>> document_id) {
  if (document_id.empty()) fail("document_causal_mask", "document_id has no row");
  auto ids = std::make_shared<const std::vector<std::vector<int64_t>>>(std::move(document_id));
  return [ids](int64_t b, int64_t, int64_t q_idx, int64_t kv_idx) {
    const auto& row = (*ids)[ids->size() == 1 ? 0 : size_t(b)];
    if ((ids->size() > 1 && size_t(b) >= ids->size()) ||
        size_t(std::max(q_idx, kv_idx)) >= row.size())
      throw std::out_of_range(
          "document_causal_mask: document_id has " + std::to_string(ids->size()) + " row(s) of " +
          std::to_string(row.size()) + " positions, asked for b=" + std::to_string(b) +
          ", q_idx=" + std::to_string(q_idx) + ", kv_idx=" + std::to_string(kv_idx));
    return q_idx >= kv_idx && row[size_t(q_idx)] == row[size_t(kv_idx)];
  };
}

MaskMod and_masks(MaskMod a, MaskMod b) {
  return [a = std::move(a), b = std::move(b)](int64_t bi, int64_t h, int64_t q, int64_t kv) {
    return a(bi, h, q, kv) && b(bi, h, q, kv);
  };
}
MaskMod or_masks(MaskMod a, MaskMod b) {
  return [a = std::move(a), b = std::move(b)](int64_t bi, int64_t h, int64_t q, int64_t kv) {
    return a(bi, h, q, kv) || b(bi, h, q, kv);
  };
}

// ---- BlockMask
// ------------------------------------------------------------------------------------
BlockMask::Counts BlockMask::counts() const {
  Counts c;
  for (const BlockKind k : kinds)
    (k == BlockKind::full ? c.full : k == BlockKind::partial ? c.partial : c.empty) += 1;
  return c;
}

double BlockMask::sparsity() const {
  return kinds.empty() ? 0.0 : 100.0 * double(counts().empty) / double(kinds.size());
}

std::string BlockMask::to_string() const {
  const Counts c = counts();
  std::ostringstream os;
  os << "BlockMask(shape=(" << B << ", " << H << ", " << Q_LEN << ", " << KV_LEN
     << "), block=" << Q_BLOCK_SIZE << "x" << KV_BLOCK_SIZE << " (" << isa << "), full=" << c.full
     << ", partial=" << c.partial << ", empty=" << c.empty << ")";
  return os.str();
}

namespace {

constexpr const char* kCreate = "create_block_mask";
constexpr const char* kOp = "flex_attention";

// The kind of one block: mask_mod on each of its elements, until it has seen both answers.
BlockKind classify(const MaskMod& mask_mod, int64_t b, int64_t h, int64_t q0, int64_t q1,
                   int64_t k0, int64_t k1) {
  bool any = false, all = true;
  for (int64_t q = q0; q < q1 && (all || !any); ++q)
    for (int64_t kv = k0; kv < k1; ++kv) {
      const bool keep = mask_mod(b, h, q, kv);
      any = any || keep, all = all && keep;
      if (any && !all) break;
    }
  return all ? BlockKind::full : any ? BlockKind::partial : BlockKind::empty;
}

// A partial block's answers, one bit per element, and the furthest diagonal a kept key reaches.
void fill_partial(BlockMask& bm, int64_t block, int64_t slot) {
  const int64_t nq = bm.q_blocks(), nk = bm.kv_blocks();
  const int64_t b = block / (bm.H * nq * nk), h = block / (nq * nk) % bm.H;
  const int64_t q0 = block / nk % nq * bm.Q_BLOCK_SIZE, k0 = block % nk * bm.KV_BLOCK_SIZE;
  const int64_t rows = std::min(bm.Q_LEN - q0, bm.Q_BLOCK_SIZE);
  const int64_t cols = std::min(bm.KV_LEN - k0, bm.KV_BLOCK_SIZE);
  int64_t diag = std::numeric_limits<int64_t>::min();
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t* const w = bm.bits.data() + (slot * bm.Q_BLOCK_SIZE + r) * bm.words_per_row();
    int64_t lo = -1, hi = -1, kept = 0;
    for (int64_t c = 0; c < cols; ++c)
      if (bm.mask_mod(b, h, q0 + r, k0 + c)) {
        w[c / 64] |= uint64_t{1} << (c % 64), diag = std::max(diag, c - r);
        lo = lo < 0 ? c : lo, hi = c + 1, ++kept;
      }
    const bool span = kept == hi - lo;  // one run of keys (none: lo = hi = -1 also reads so)
    int32_t* const sp = bm.spans.data() + 2 * (slot * bm.Q_BLOCK_SIZE + r);
    sp[0] = int32_t(span ? std::max<int64_t>(lo, 0) : -1),
    sp[1] = int32_t(span ? std::max<int64_t>(hi, 0) : -1);
  }
  bm.diag[size_t(slot)] = diag;
}

}  // namespace

BlockMask create_block_mask(const MaskMod& mask_mod, std::optional<int64_t> B,
                            std::optional<int64_t> H, int64_t Q_LEN, int64_t KV_LEN) {
  if (!mask_mod) fail(kCreate, "mask_mod is empty");
  if ((B && *B < 1) || (H && *H < 1) || Q_LEN < 0 || KV_LEN < 0)
    fail(kCreate, "B and H must be >= 1 (or none) and Q_LEN, KV_LEN >= 0, got B=",
         B ? std::to_string(*B) : "None", ", H=", H ? std::to_string(*H) : "None",
         ", Q_LEN=", Q_LEN, ", KV_LEN=", KV_LEN);
  BlockMask bm;
  bm.mask_mod = mask_mod;
  bm.B = B.value_or(1), bm.H = H.value_or(1), bm.Q_LEN = Q_LEN, bm.KV_LEN = KV_LEN;
  const kernels::AttnTileSize tile = kernels::sdpa_tile_size();
  bm.Q_BLOCK_SIZE = tile.br, bm.KV_BLOCK_SIZE = tile.bc, bm.isa = kernels::active_isa();
  const int64_t nq = bm.q_blocks(), nk = bm.kv_blocks();
  bm.kinds.assign(size_t(bm.B * bm.H * nq * nk), BlockKind::empty);
  // One task per (b, h, query block): its row of key blocks.
  parallel_for(bm.B * bm.H * nq, [&](int64_t task) {
    const int64_t b = task / (bm.H * nq), h = task / nq % bm.H, qb = task % nq;
    const int64_t q0 = qb * tile.br, q1 = std::min(Q_LEN, q0 + tile.br);
    for (int64_t kb = 0; kb < nk; ++kb)
      bm.kinds[size_t(task * nk + kb)] =
          classify(mask_mod, b, h, q0, q1, kb * tile.bc, std::min(KV_LEN, (kb + 1) * tile.bc));
  });
  // The partial blocks' answers, in slots numbered in block order.
  std::vector<int64_t> partial;
  bm.partial_slot.assign(bm.kinds.size(), -1);
  for (size_t i = 0; i < bm.kinds.size(); ++i)
    if (bm.kinds[i] == BlockKind::partial)
      bm.partial_slot[i] = int64_t(partial.size()), partial.push_back(int64_t(i));
  bm.bits.assign(partial.size() * size_t(tile.br * bm.words_per_row()), 0);
  bm.diag.assign(partial.size(), 0);
  bm.spans.assign(partial.size() * size_t(2 * tile.br), 0);
  parallel_for(int64_t(partial.size()),
               [&](int64_t slot) { fill_partial(bm, partial[size_t(slot)], slot); });
  return bm;
}

namespace {

static_assert(uint8_t(BlockKind::partial) == uint8_t(kernels::TileKind::partial) &&
              uint8_t(BlockKind::full) == uint8_t(kernels::TileKind::full));

// Every block full: flex_attention without a block_mask.
BlockMask all_full(int64_t L, int64_t S) {
  BlockMask bm;
  bm.Q_LEN = L, bm.KV_LEN = S;
  const kernels::AttnTileSize tile = kernels::sdpa_tile_size();
  bm.Q_BLOCK_SIZE = tile.br, bm.KV_BLOCK_SIZE = tile.bc, bm.isa = kernels::active_isa();
  bm.kinds.assign(size_t(bm.q_blocks() * bm.kv_blocks()), BlockKind::full);
  bm.partial_slot.assign(bm.kinds.size(), -1);
  return bm;
}

// The kernel's hook: problem n is (b, h) = (n / H, n % H) of the query. Partial tiles are masked
// by the block mask's bits (mask_mod's answers at the block mask's b and h).
class FlexMod final : public kernels::AttnScoreMod {
 public:
  FlexMod(std::shared_ptr<const BlockMask> bm, ScoreMod score_mod, int64_t H)
      : bm_(std::move(bm)), score_mod_(std::move(score_mod)), H_(H) {
    rewrites_full = bool(score_mod_);
  }
  // The block's index in the block mask (its b, h broadcast).
  size_t block(int64_t n, int64_t ib, int64_t jb) const {
    return bm_->block_index(bm_->B == 1 ? 0 : n / H_, bm_->H == 1 ? 0 : n % H_, ib, jb);
  }
  kernels::TileInfo tile(int64_t n, int64_t ib, int64_t jb) const override {
    const size_t i = block(n, ib, jb);
    const int64_t slot = bm_->partial_slot[i];
    return {kernels::TileKind(uint8_t(bm_->kinds[i])), slot < 0 ? 0 : bm_->diag[size_t(slot)]};
  }
  bool rewrite(int64_t n, int64_t i0, int64_t j0, int64_t rows, int64_t cols, float scale, float* s,
               int64_t ld, float* grad) const override {
    const int64_t slot =
        bm_->partial_slot[block(n, i0 / bm_->Q_BLOCK_SIZE, j0 / bm_->KV_BLOCK_SIZE)];
    const int64_t b = n / H_, h = n % H_;
    const float ninf = -std::numeric_limits<float>::infinity();
    // Partial, no score_mod, scale > 0: the removed keys' S set to -inf (scale · -inf = -inf),
    // the tile step does the rest. 64 keys a word.
    const bool only_mask = !score_mod_ && scale > 0;
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t* keep = slot < 0 ? nullptr : bm_->row_bits(slot, r);
      float* x = s + r * ld;
      float* g = grad != nullptr ? grad + r * ld : nullptr;
      const int32_t* span =
          only_mask ? bm_->spans.data() + 2 * (slot * bm_->Q_BLOCK_SIZE + r) : nullptr;
      if (only_mask && span[0] >= 0) {  // one run of keys [lo, hi): -inf either side
        std::fill(x, x + std::min<int64_t>(span[0], cols), ninf);
        if (span[1] < cols) std::fill(x + span[1], x + cols, ninf);
        continue;
      }
      for (int64_t c0 = 0; c0 < cols && only_mask; c0 += 64) {
        const uint64_t w = keep[c0 >> 6];
        const int64_t m = std::min<int64_t>(64, cols - c0);
        for (int64_t c = 0; c < m; ++c) x[c0 + c] = (w >> c) & 1u ? x[c0 + c] : ninf;
      }
      if (only_mask) continue;
      for (int64_t c = 0; c < cols; ++c) {
        if (keep != nullptr && !((keep[c >> 6] >> (c & 63)) & 1u)) {
          x[c] = ninf;
          if (g != nullptr) g[c] = 0.f;
          continue;
        }
        if (!score_mod_) {  // scale <= 0
          x[c] = scale * x[c];
          if (g != nullptr) g[c] = scale;
          continue;
        }
        const Score y = score_mod_(Score(double(scale * x[c]), 1.0), b, h, i0 + r, j0 + c);
        x[c] = float(y.value);
        if (g != nullptr) g[c] = float(double(scale) * y.grad);
      }
    }
    return !only_mask;
  }
  double element(int64_t n, int64_t i, int64_t j, double scaled, double* grad) const override {
    const int64_t ib = i / bm_->Q_BLOCK_SIZE, jb = j / bm_->KV_BLOCK_SIZE;
    const size_t blk = block(n, ib, jb);
    const int64_t slot = bm_->partial_slot[blk], c = j - jb * bm_->KV_BLOCK_SIZE;
    const bool kept =
        bm_->kinds[blk] == BlockKind::full ||
        (slot >= 0 && (bm_->row_bits(slot, i - ib * bm_->Q_BLOCK_SIZE)[c >> 6] >> (c & 63)) & 1u);
    *grad = kept ? 1 : 0;
    if (!kept) return -std::numeric_limits<double>::infinity();
    if (!score_mod_) return scaled;
    const Score y = score_mod_(Score(scaled, 1.0), n / H_, n % H_, i, j);
    *grad = y.grad;
    return y.value;
  }

 private:
  std::shared_ptr<const BlockMask> bm_;
  ScoreMod score_mod_;
  int64_t H_;
};

// The shapes: query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev), and the block mask's.
std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "query " + shape_str(q.shape()) + ", key " + shape_str(k.shape()) + ", value " +
         shape_str(v.shape());
}

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (auto [name, t] : {std::pair{"query", &q}, {"key", &k}, {"value", &v}})
    if (!t->defined()) fail(kOp, name, " is an undefined tensor");
  const std::string shapes = shapes_of(q, k, v);
  if (q.dtype() != DType::Float32 && q.dtype() != DType::Float64)
    fail(kOp, "query must be float32 or float64, got ", dtype_name(q.dtype()), " (", shapes, ")");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(kOp, "query, key and value must have the same dtype, got ", dtype_name(q.dtype()), ", ",
         dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail(kOp, "query (B, H, L, E), key (B, H, S, E) and value (B, H, S, Ev) must be 4-D, got ",
         shapes);
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != q.size(1) ||
      v.size(1) != q.size(1))
    fail(kOp, "query, key and value must have the same B and H (no broadcasting, no GQA), got ",
         shapes);
  if (k.size(3) != q.size(3)) fail(kOp, "query and key must have the same E, got ", shapes);
  if (v.size(2) != k.size(2)) fail(kOp, "key and value must have the same S, got ", shapes);
}

void check_block_mask(const BlockMask& bm, const Tensor& q, const Tensor& k, const Tensor& v) {
  const std::string shapes = shapes_of(q, k, v);
  if ((bm.B != 1 && bm.B != q.size(0)) || (bm.H != 1 && bm.H != q.size(1)) ||
      bm.Q_LEN != q.size(2) || bm.KV_LEN != k.size(2))
    fail(kOp, "block_mask of shape (", bm.B, ", ", bm.H, ", ", bm.Q_LEN, ", ", bm.KV_LEN,
         ") does not fit ", shapes, " (B and H must be 1 or the query's, Q_LEN = L, KV_LEN = S)");
  const kernels::AttnTileSize tile = kernels::sdpa_tile_size();
  if (bm.Q_BLOCK_SIZE != tile.br || bm.KV_BLOCK_SIZE != tile.bc)
    fail(kOp, "block_mask was made for tiles of ", bm.Q_BLOCK_SIZE, "x", bm.KV_BLOCK_SIZE, " (",
         bm.isa, "), the active kernel's are ", tile.br, "x", tile.bc, " (", kernels::active_isa(),
         "): call create_block_mask again after set_isa");
  const size_t partial = size_t(bm.counts().partial);
  if (bm.kinds.size() != size_t(bm.B * bm.H * bm.q_blocks() * bm.kv_blocks()) ||
      bm.partial_slot.size() != bm.kinds.size() || bm.diag.size() != partial ||
      bm.spans.size() != partial * size_t(2 * bm.Q_BLOCK_SIZE) ||
      bm.bits.size() != partial * size_t(bm.Q_BLOCK_SIZE * bm.words_per_row()))
    fail(kOp, "block_mask's blocks do not add up (", bm.to_string(),
         "): make it with create_block_mask");
}

// A 4-D tensor as the kernel reads it: matrix n = (b, h) = (n / H, n % H), rows (dim 2) ld apart,
// columns adjacent (else a contiguous copy is read).
template <class T>
struct Heads {
  Tensor tensor;
  std::vector<int64_t> off;
  kernels::MatrixBatch<T> matrices() const {
    using U = std::remove_const_t<T>;
    return {const_cast<T*>(tensor.template data<U>()), tensor.strides()[2], off.data()};
  }
};
template <class T>
Heads<T> heads(const Tensor& x) {
  Heads<T> hd{x.strides()[3] == 1 || x.size(3) == 1 ? x.detach() : x.detach().contiguous(), {}};
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t h = 0; h < x.size(1); ++h)
      hd.off.push_back(b * hd.tensor.strides()[0] + h * hd.tensor.strides()[1]);
  return hd;
}

// A result (B, H, rows, cols) laid out (B, rows, H, cols) in memory, as
// scaled_dot_product_attention lays out its own when the heads sit inside the rows: the notebook's
// transpose(1, 2).contiguous() after it is then a view.
Tensor new_result(int64_t B, int64_t H, int64_t rows, int64_t cols, DType dt) {
  const Tensor buf = empty({B, rows, H, cols}, dt);
  const Shape strides = {buf.strides()[0], buf.strides()[2], buf.strides()[1], buf.strides()[3]};
  return Tensor(alias_impl(*buf.impl(), {B, H, rows, cols}, strides, 0));
}

// The kernel's problem: the operands' matrices and the hook.
template <class T>
struct FlexProblem {
  Heads<const T> q, k, v;
  kernels::AttnProblem<T> p;
  FlexProblem(const Tensor& query, const Tensor& key, const Tensor& value, double scale,
              const kernels::AttnScoreMod* mod)
      : q(heads<const T>(query)), k(heads<const T>(key)), v(heads<const T>(value)) {
    p.batch = query.size(0) * query.size(1), p.L = query.size(2), p.S = key.size(2);
    p.E = query.size(3), p.Ev = value.size(3), p.scale = T(scale), p.mod = mod;
    p.q = q.matrices(), p.k = k.matrices(), p.v = v.matrices();
  }
};

template <class T>
Tensor flex(const Tensor& query, const Tensor& key, const Tensor& value,
            std::shared_ptr<const FlexMod> mod, double scale) {
  const int64_t B = query.size(0), H = query.size(1), L = query.size(2), S = key.size(2);
  const int64_t E = query.size(3), Ev = value.size(3);
  Tensor out = new_result(B, H, L, Ev, query.dtype());
  Tensor lse = empty({B * H * L}, query.dtype());
  kernels::sdpa_forward(FlexProblem<T>(query, key, value, scale, mod.get()).p,
                        heads<T>(out).matrices(), lse.data<T>());
  if (!any_requires_grad({&query, &key, &value})) return out;
  record("FlexAttentionBackward0", {query, key, value}, {query, key, value, out, lse},
         [mod, scale, B, H, L, S, E, Ev](Node& n, const Tensor& g) -> std::vector<Tensor> {
           const Tensor &q = n.saved_tensor(0), &k = n.saved_tensor(1), &v = n.saved_tensor(2);
           const FlexProblem<T> fp(q, k, v, scale, mod.get());
           const auto dq = heads<T>(new_result(B, H, L, E, g.dtype()));
           const auto dk = heads<T>(new_result(B, H, S, E, g.dtype()));
           const auto dv = heads<T>(new_result(B, H, S, Ev, g.dtype()));
           kernels::sdpa_backward(
               fp.p, heads<const T>(n.saved_tensor(3)).matrices(), heads<const T>(g).matrices(),
               n.saved_tensor(4).template data<T>(), dq.matrices(), dk.matrices(), dv.matrices());
           return {n.needs(0) ? dq.tensor : Tensor(), n.needs(1) ? dk.tensor : Tensor(),
                   n.needs(2) ? dv.tensor : Tensor()};
         },
         {&out});
  return out;
}

}  // namespace

Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                      const ScoreMod& score_mod, const std::optional<BlockMask>& block_mask,
                      std::optional<double> scale) {
  check_operands(query, key, value);
  if (block_mask) check_block_mask(*block_mask, query, key, value);
  if (scale && !std::isfinite(*scale)) fail(kOp, "scale must be finite, got ", *scale);
  if (!scale && query.size(3) == 0)
    fail(kOp, "query and key have E = 0, where the default scale 1/sqrt(E) is undefined (pass a ",
         "scale)");
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(query.size(3)));
  auto bm = std::make_shared<const BlockMask>(block_mask ? *block_mask
                                                         : all_full(query.size(2), key.size(2)));
  auto mod = std::make_shared<const FlexMod>(std::move(bm), score_mod, query.size(1));
  if (query.dtype() == DType::Float64) return flex<double>(query, key, value, mod, sc);
  return flex<float>(query, key, value, mod, sc);
}

}  // namespace tg
