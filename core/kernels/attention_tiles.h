// What the two fused attention drivers share (attention.cpp in float32, attention_bf16.cpp in
// bfloat16): the tile grid, the causal skips of a tile's products, the dropout bits of a tile, the
// online softmax's rescaling and final division, the backward's D, and the forward's schedule.
// Only the tile products differ between them (float32 or bf16 micro-kernels). Internal to
// core/kernels; no intrinsics.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels::attn {

// About 64 query rows and 64 keys per tile, in whole MR × NR micro-tiles: the tile's scores
// (16 KiB), its packed kᵀ and v panels stay in L1/L2 while the micro-kernel sweeps them.
struct Blocks {
  int64_t br, bc;
};
inline Blocks blocks_for(const GemmBlocking& micro_tile) {
  const int64_t MR = micro_tile.mr, NR = micro_tile.nr;
  return {MR * ((64 + MR - 1) / MR), NR * ((64 + NR - 1) / NR)};
}

// On a causal tile's diagonal, scores (r, c) with c > r + diag are zero after the softmax: the
// products of that corner can be skipped. How a tile GEMM's dims map onto (r, c):
//   cols    M = r, N = c (S = q·kᵀ, dP = dout·vᵀ): MR × NR tiles wholly past the diagonal are
//           zero-filled instead of computed;
//   k_upto  M = r, K = c (out += P·v, dq += dS·k): row panel r0.. sums only k <= r_last + diag;
//   k_from  M = c, K = r (dv += Pᵀ·dout, dk += dSᵀ·q): row panel c0.. sums only k >= c0 − diag.
struct Causal {
  enum Kind { none, cols, k_upto, k_from } kind = none;
  int64_t diag = 0;
  // The K range [k0, k1) that row panel [i0, i0 + m) sums (of K).
  std::pair<int64_t, int64_t> k_range(int64_t i0, int64_t m, int64_t K) const {
    if (kind == k_upto) return {0, std::clamp<int64_t>(i0 + m - 1 + diag + 1, 0, K)};
    if (kind == k_from) return {std::clamp<int64_t>(i0 - diag, 0, K), K};
    return {0, K};
  }
  // Whether the micro-tile of row panel [i0, i0 + m) and columns from c0 is wholly past it.
  bool past(int64_t i0, int64_t m, int64_t c0) const {
    return kind == cols && c0 > i0 + m - 1 + diag;
  }
};
// The skips of query block i0 against key block j0 (cols keys), one per mapping: only the tile
// that crosses the diagonal has products to skip.
struct CausalSkips {
  Causal cols, k_upto, k_from;
};
inline CausalSkips causal_skips(bool causal, int64_t diag, int64_t cols) {
  const bool crossing = causal && cols - 1 > diag;
  const auto skip = [&](Causal::Kind k) { return Causal{crossing ? k : Causal::none, diag}; };
  return {skip(Causal::cols), skip(Causal::k_upto), skip(Causal::k_from)};
}

// Where a tile product goes: C, rows ld apart, overwritten (into) or added to (add_to).
struct TileOut {
  float* p = nullptr;
  int64_t ld = 0;
  bool accumulate = false;
};
inline TileOut into(float* p, int64_t ld) { return {p, ld, false}; }
inline TileOut add_to(float* p, int64_t ld) { return {p, ld, true}; }

// An operand of a tile product, of float32 or bf16 elements: rows × cols, element (r, c) at
// p[r·rs + c·cs]; or, as B only, packed NR-column micro-panels (the micro-kernel's layout, float
// or bf16 pairs), micro-panel jp at p + jp·panel holding its rows from this operand's first on.
template <class T>
struct Operand {
  const T* p = nullptr;
  int64_t rows = 0, cols = 0, rs = 0, cs = 1;
  int64_t panel = 0;  // packed only: elements between micro-panels (> 0); 0: unpacked
  bool packed() const { return panel > 0; }
  Operand transposed() const { return {p, cols, rows, cs, rs, 0}; }  // unpacked only
};
template <class T>
Operand<T> row_major(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return {p, rows, cols, ld, 1, 0};
}
// Rows [r0, r0 + rows) of problem n's matrix.
template <class T>
Operand<T> rows_of(MatrixBatch<const T> m, int64_t n, int64_t r0, int64_t rows, int64_t cols) {
  return row_major(m.at(n, r0), rows, cols, m.ld);
}

// c (+)= a · b, C being a.rows × b.cols, with the causal skips of `causal`.
template <class T>
struct TileProduct {
  TileOut c;
  Operand<T> a, b;
  Causal causal;
};

// out[c] = bit (b + c) of bits, for c < n: the dropout decisions of one tile row, as bytes. Eight
// at a time: the byte of bits at b + c (it may straddle two words) spread to eight bytes.
inline void unpack_bits(const uint64_t* bits, int64_t b, int64_t n, uint8_t* out) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const int64_t at = b + c, w = at >> 6, sh = at & 63;
    uint64_t byte = bits[w] >> sh;
    if (sh > 56) byte |= bits[w + 1] << (64 - sh);
    // bit k to byte k: copies of the byte in every byte, byte k keeps its bit k, and adding
    // 0x7F carries any set bit up to bit 7 without leaving the byte
    const uint64_t t = ((byte & 0xFF) * 0x0101010101010101ull) & 0x8040201008040201ull;
    const uint64_t flags = ((t + 0x7F7F7F7F7F7F7F7Full) >> 7) & 0x0101010101010101ull;
    std::memcpy(out + c, &flags, 8);
  }
  for (; c < n; ++c) out[c] = uint8_t((bits[(b + c) >> 6] >> ((b + c) & 63)) & 1u);
}

// The tile of problem n at (i0, j0) for the tile steps (float32 scores, whatever q, k, v hold).
template <class T>
AttnTile make_tile(const AttnProblem<T, float>& p, int64_t n, int64_t i0, int64_t j0, int64_t rows,
                   int64_t cols, int64_t ld, uint8_t* keep) {
  AttnTile tl;
  tl.rows = rows, tl.cols = cols, tl.ld = ld, tl.scale = p.scale;
  if (p.mask.base != nullptr)
    tl.mask = p.mask.at(n, i0) + j0 * p.mask_cs, tl.mask_ld = p.mask.ld, tl.mask_cs = p.mask_cs;
  tl.causal = p.causal, tl.diag = i0 - j0;
  if (p.keep_bits != nullptr) {
    for (int64_t r = 0; r < rows; ++r)
      unpack_bits(p.keep_bits, (n * p.L + i0 + r) * p.S + j0, cols, keep + r * ld);
    tl.keep = keep, tl.keep_ld = ld, tl.keep_scale = p.keep_scale;
  }
  return tl;
}

// Keys a causal query block [i0, i0 + rows) can see: [0, min(S, i0 + rows)).
template <class P>
int64_t keys_seen(const P& p, int64_t i0, int64_t rows) {
  return p.causal ? std::min(p.S, i0 + rows) : p.S;
}

// The forward's running state of one query block: O [rows, Ev] (not yet divided by l) and the
// online softmax's m, l, alpha per row, in per-thread buffers.
struct OnlineSoftmax {
  float *o, *m, *l, *alpha;
  int64_t rows, Ev;
  OnlineSoftmax(Scratch& o_buf, Scratch& stat_buf, int64_t br, int64_t rows_, int64_t Ev_)
      : rows(rows_), Ev(Ev_) {
    o = o_buf.get(br * std::max<int64_t>(Ev, 1));
    m = stat_buf.get(3 * br), l = m + br, alpha = l + br;
    std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
    std::fill(l, l + rows, 0.f);
    std::fill(o, o + rows * Ev, 0.f);
  }
  // O = O·alpha, after a tile step moved m.
  void rescale() const {
    for (int64_t r = 0; r < rows; ++r)
      if (alpha[r] != 1.f)
        for (int64_t e = 0; e < Ev; ++e) o[r * Ev + e] *= alpha[r];
  }
  // O = O / l in place (0 for a row no key reaches) and lse = m + log l (-inf for such a row).
  void finish(float* lse) const {
    for (int64_t r = 0; r < rows; ++r) {
      const bool none = l[r] == 0.f;
      const float inv = none ? 0.f : 1.f / l[r];
      for (int64_t e = 0; e < Ev; ++e) o[r * Ev + e] *= inv;
      lse[r] = none ? -std::numeric_limits<float>::infinity() : m[r] + std::log(l[r]);
    }
  }
};

// A forward query block's per-thread buffers: the tile's scores s (br × bc, S = q_i · k_jᵀ, which
// attn_fwd_tile turns into P∘keep in place), the online softmax's state and the tile's dropout
// bytes.
struct ForwardBlock {
  float* s;
  OnlineSoftmax st;
  uint8_t* keep;
};
inline ForwardBlock forward_buffers(Blocks bl, int64_t rows, int64_t Ev) {
  thread_local Scratch s_buf, o_buf, stat_buf, keep_buf;
  return {s_buf.get(bl.br * bl.bc), OnlineSoftmax(o_buf, stat_buf, bl.br, rows, Ev),
          reinterpret_cast<uint8_t*>(keep_buf.get(bl.br * bl.bc / 4 + 1))};
}

// The float32 of an element of q, k, v, out or dout: itself, or a bfloat16's bits widened.
inline float widened(float x) { return x; }
inline float widened(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// D = rowsum(dout ∘ out) of problem n in float32, and dq = 0 (it accumulates over key blocks).
// Each row's sum runs e = 0, 1, … in turn; kRows rows at a time, so that the adds of one row
// do not each wait for the one before.
template <class T>
void backward_start(const AttnProblem<T, float>& p, MatrixBatch<const T> out,
                    MatrixBatch<const T> dout, MatrixBatch<float> dq, int64_t n, float* D) {
  constexpr int64_t kRows = 8;
  for (int64_t i0 = 0; i0 < p.L; i0 += kRows) {
    const int64_t rows = std::min(kRows, p.L - i0);
    const T *go[kRows], *o[kRows];
    float d[kRows];
    for (int64_t r = 0; r < kRows; ++r) {  // rows past L repeat the last one, and are dropped
      go[r] = dout.at(n, i0 + std::min(r, rows - 1)), o[r] = out.at(n, i0 + std::min(r, rows - 1));
      d[r] = 0.f;
    }
    for (int64_t e = 0; e < p.Ev; ++e)
      for (int64_t r = 0; r < kRows; ++r) d[r] += widened(go[r][e]) * widened(o[r][e]);
    for (int64_t r = 0; r < rows; ++r) {
      D[i0 + r] = d[r];
      std::fill(dq.at(n, i0 + r), dq.at(n, i0 + r) + p.E, 0.f);
    }
  }
}

// Runs block(n, i0) for every problem n and query block i0 of br rows: one problem's blocks one
// after another, so that its kᵀ and v stay in cache between them; within a problem, the blocks
// further down (which see more keys) first. Each block is one task: the same bits on any thread.
template <class F>
void for_each_query_block(int64_t batch, int64_t L, int64_t br, const F& block) {
  const int64_t nqb = (L + br - 1) / br;
  parallel_for(batch * nqb, [&](int64_t task) {
    const int64_t n = task / nqb, ib = nqb - 1 - task % nqb;
    block(n, ib * br);
  });
}

}  // namespace tg::kernels::attn
