// flex_attention: PyTorch's torch.nn.attention.flex_attention (2.5+) on tapegrad's fused
// attention kernel (core/kernels/attention.cpp). The mask is code, not a tensor: a mask_mod says
// whether key kv_idx takes part for query q_idx of batch b, head h; create_block_mask asks it once
// per element and sorts the kernel's tiles by the answers (full, partial, empty), keeping the
// answers of the partial tiles only, as bits. The kernel skips the empty tiles, runs the full ones
// as plain attention and masks the partial ones by their bits (and, as for is_causal, skips their
// micro-tiles past the furthest kept diagonal). Nothing of size L × S is built: causal,
// sliding-window and document masks cost what their tiles cost.
//
// Python reference: torch/nn/attention/flex_attention.py (PyTorch 2.6), names and argument order
// kept: mask_mod(b, h, q_idx, kv_idx) -> bool, score_mod(score, b, h, q_idx, kv_idx) -> score,
// create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN), flex_attention(query, key, value, score_mod,
// block_mask, scale).
//
// The computation, per (b, h) and query row i, with x the scaled score:
//   x[j] = score_mod(scale · q[i]·k[j], b, h, i, j)   where mask_mod(b, h, i, j), else -inf
//   out[i] = softmax(x) · v       (a row that no key reaches gives out = 0, as PyTorch's)
// Gradients reach query, key and value; through score_mod they use d score_mod / d score, which a
// Score (a forward-mode dual number) carries along: a score_mod written with Score's operators
// below is differentiated exactly. Values a score_mod captures from outside are constants (PyTorch
// would also give gradients to captured tensors that require grad; tapegrad does not).
//
// Not here: dropout (PyTorch's flex_attention has none either), grouped-query attention
// (enable_gqa), return_lse, kernel_options, BlockMask slicing, bfloat16. mask_mod and score_mod run
// on the kernel's worker threads, concurrently: they must only read what they capture.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg {

// A score inside a score_mod: its value and its derivative with respect to the score the
// score_mod was given. A plain number converts to a constant (derivative 0).
struct Score {
  double value = 0, grad = 0;
  Score() = default;
  Score(double v) : value(v) {}  // NOLINT: implicit, so that `score + bias` reads as in Python
  Score(double v, double g) : value(v), grad(g) {}
};
Score operator+(Score a, Score b);
Score operator-(Score a, Score b);
Score operator*(Score a, Score b);
Score operator/(Score a, Score b);
Score operator-(Score a);
Score exp(Score a);
Score tanh(Score a);  // soft-capping: cap * tanh(score / cap)

using MaskMod = std::function<bool(int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx)>;
using ScoreMod =
    std::function<Score(Score score, int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx)>;

// The standard mask_mods.
// causal: q_idx >= kv_idx (the notebook's `causal`, PyTorch's is_causal).
MaskMod causal_mask();
// sliding window of `window` keys: causal and q_idx - kv_idx < window. window >= 1.
MaskMod sliding_window_mask(int64_t window);
// Documents packed into one sequence: document_id[b][pos] per batch row (one row: shared by every
// b); a query sees the keys of its own document, causally. Throws std::out_of_range naming the
// mask when asked for a position or batch row it has no id for.
MaskMod document_causal_mask(std::vector<std::vector<int64_t>> document_id);
// Both / either (PyTorch's and_masks, or_masks).
MaskMod and_masks(MaskMod a, MaskMod b);
MaskMod or_masks(MaskMod a, MaskMod b);

// A tile of the block mask: no key takes part, some do (mask_mod asked per element), all do.
enum class BlockKind : uint8_t { empty = 0, partial = 1, full = 2 };

// create_block_mask's result: the kind of every (b, h, query block, key block) at the fused
// kernel's tile size and, for the partial blocks only, mask_mod's answers (one bit per element)
// and the furthest diagonal a kept key reaches. Memory: 9 bytes per block, plus, per partial
// block only, Q_BLOCK_SIZE × KV_BLOCK_SIZE bits and 8 bytes a row. A causal or sliding-window
// mask has O(L) partial blocks; a mask with every block partial would keep L·S bits (1/32 of a
// float mask), never L × S floats.
// A partial block's rows are also kept as spans [lo, hi) when the row keeps one run of keys (a
// causal, sliding-window or document row): the kernel masks those by span, the others by bit.
struct BlockMask {
  MaskMod mask_mod;
  int64_t B = 1, H = 1;  // 1 where create_block_mask was given none: broadcast over all
  int64_t Q_LEN = 0, KV_LEN = 0;
  int64_t Q_BLOCK_SIZE = 0, KV_BLOCK_SIZE = 0;  // the kernel's tile, rows × keys
  std::string isa;                              // the path whose tile it was made for
  std::vector<BlockKind> kinds;                 // [B, H, q_blocks, kv_blocks]
  std::vector<int64_t> partial_slot;            // the same blocks: index among the partial, or -1
  // Per partial block (by slot): Q_BLOCK_SIZE rows of words_per_row() words, bit c of row r set
  // when key c takes part for query r (counted from the block's corner); diag: kept (r, c) only
  // where c - r <= diag; and per row the keys [lo, hi) when they are all it keeps, else
  // lo = hi = -1.
  std::vector<uint64_t> bits;
  std::vector<int64_t> diag;
  std::vector<int32_t> spans;  // per partial block, Q_BLOCK_SIZE (lo, hi) pairs

  int64_t q_blocks() const { return (Q_LEN + Q_BLOCK_SIZE - 1) / Q_BLOCK_SIZE; }
  int64_t kv_blocks() const { return (KV_LEN + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE; }
  int64_t words_per_row() const { return (KV_BLOCK_SIZE + 63) / 64; }
  size_t block_index(int64_t b, int64_t h, int64_t qb, int64_t kvb) const {
    return size_t(((b * H + h) * q_blocks() + qb) * kv_blocks() + kvb);
  }
  BlockKind kind(int64_t b, int64_t h, int64_t qb, int64_t kvb) const {
    return kinds[block_index(b, h, qb, kvb)];
  }
  // Row r (from the block's corner) of a partial block's bits.
  const uint64_t* row_bits(int64_t slot, int64_t r) const {
    return bits.data() + size_t((slot * Q_BLOCK_SIZE + r) * words_per_row());
  }
  struct Counts {
    int64_t full = 0, partial = 0, empty = 0;
  };
  Counts counts() const;
  double sparsity() const;  // percent of blocks that are empty, as PyTorch's BlockMask.sparsity()
  std::string to_string() const;  // shape, tile and counts, one line
};

// Evaluates mask_mod on every (b, h, q_idx, kv_idx) once, block by block (b = 0 when B is none,
// h = 0 when H is none), and keeps each block's kind and the partial blocks' answers: the kernel
// masks with those, so a mask_mod that depends on b (or h) needs B (or H) given. Q_LEN,
// KV_LEN >= 0; B, H >= 1. Throws std::invalid_argument naming create_block_mask.
BlockMask create_block_mask(const MaskMod& mask_mod, std::optional<int64_t> B,
                            std::optional<int64_t> H, int64_t Q_LEN, int64_t KV_LEN);

// query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev) -> (B, H, L, Ev), float32 (the fused
// kernel) or float64 (the row-by-row reference, for gradient checks). score_mod null: the score
// itself; block_mask none: every key takes part; scale none: 1/sqrt(E). block_mask's B and H are
// 1 or the query's, its Q_LEN and KV_LEN are L and S, and its tile is the active kernel's (made
// after the last set_isa). One node on the tape. Throws std::invalid_argument naming flex_attention
// and the shapes.
Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                      const ScoreMod& score_mod = nullptr,
                      const std::optional<BlockMask>& block_mask = std::nullopt,
                      std::optional<double> scale = std::nullopt);

}  // namespace tg
