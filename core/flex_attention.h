// flex_attention: PyTorch's torch.nn.attention.flex_attention (2.5+) on tapegrad's fused
// attention kernel (core/kernels/attention.cpp). The mask is code, not a tensor: a mask_mod says
// whether key kv_idx takes part for query q_idx of batch b, head h; create_block_mask sorts the
// kernel's tiles by it once (full, partial, empty), and the kernel skips the empty tiles, runs the
// full ones as plain attention and calls mask_mod per element only on the partial ones. Nothing of
// size L × S is built: causal, sliding-window and document masks cost what their tiles cost.
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
// kernel's tile size, and the mask_mod for the partial ones. Memory: one byte per block.
struct BlockMask {
  MaskMod mask_mod;
  int64_t B = 1, H = 1;  // 1 where create_block_mask was given none: broadcast over all
  int64_t Q_LEN = 0, KV_LEN = 0;
  int64_t Q_BLOCK_SIZE = 0, KV_BLOCK_SIZE = 0;  // the kernel's tile, rows × keys
  std::string isa;                              // the path whose tile it was made for
  std::vector<BlockKind> kinds;                 // [B, H, q_blocks, kv_blocks]

  int64_t q_blocks() const { return (Q_LEN + Q_BLOCK_SIZE - 1) / Q_BLOCK_SIZE; }
  int64_t kv_blocks() const { return (KV_LEN + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE; }
  BlockKind kind(int64_t b, int64_t h, int64_t qb, int64_t kvb) const {
    return kinds[size_t(((b * H + h) * q_blocks() + qb) * kv_blocks() + kvb)];
  }
  struct Counts {
    int64_t full = 0, partial = 0, empty = 0;
  };
  Counts counts() const;
  double sparsity() const;  // percent of blocks that are empty, as PyTorch's BlockMask.sparsity()
  std::string to_string() const;  // shape, tile and counts, one line
};

// Evaluates mask_mod on every (b, h, q_idx, kv_idx) once, block by block (b = 0 when B is none,
// h = 0 when H is none), and keeps each block's kind. Q_LEN, KV_LEN >= 0; B, H >= 1. Throws
// std::invalid_argument naming create_block_mask.
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
