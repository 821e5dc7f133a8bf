// Fused scaled-dot-product attention: FlashAttention-2's forward and backward (Dao, 2023) on the
// CPU, over the active table's GEMM micro-kernel and its two tile steps (table.h). No intrinsics
// here. The formulas, the operand layout and the threading contract are in kernels.h.
//
// Shape legend: per problem q [L, E], k [S, E], v [S, Ev], out [L, Ev]; a tile is `rows` query
// rows from i0 by `cols` keys from j0, at most br × bc.
//
// Forward, per (problem, query block i):   m = -inf, l = 0, O = 0
//   for each key block j up to the diagonal:
//     S = q_i · k_jᵀ                          (rows × cols, micro-kernel on packed kᵀ panels)
//     attn_fwd_tile: P = exp(scale·S + mask − m'), l = l·alpha + Σ P, m = m'; S → P∘keep
//     O = O·alpha + (P∘keep) · v_j            (micro-kernel, P∘keep read in place)
//   out_i = O / l,  lse_i = m + log l
// Backward, per problem (so dq sums over key blocks in one fixed order, without atomics):
//   D = rowsum(dout ∘ out)
//   for each key block j:  for each query block i from the diagonal on:
//     S = q_i · k_jᵀ,  dP = dout_i · v_jᵀ
//     attn_bwd_tile: P = exp(scale·S + mask − lse_i),  dS = scale · P ∘ (dP∘keep − D);
//                    S → P∘keep, dP → dS (the same buffers)
//     dv_j += (P∘keep)ᵀ · dout_i,  dk_j += dSᵀ · q_i,  dq_i += dS · k_j
// Flex attention (an AttnScoreMod, kernels.h): tiles it calls empty are skipped; a partial tile
// (every tile, with a score_mod) has S rewritten by the hook into final scores x before the tile
// step, which then reads them with scale 1 and no mask; the backward's tile step then leaves dx,
// and dS = dx ∘ dx/dS (from the hook). A partial tile without a score_mod only has its removed
// keys' S set to -inf (scale > 0), and runs as any other. The ISA tile steps are the same for all.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/kernels/attention_tiles.h"
#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

using namespace attn;

using TileMatrix = Operand<float>;
using TileGemm = TileProduct<float>;
// kᵀ or vᵀ packed into NR-column micro-panels of rows × NR floats, one after another.
TileMatrix packed_panels(const float* p, int64_t rows, int64_t cols, int64_t NR) {
  return {p, rows, cols, 0, 0, rows * NR};
}

struct TileScratch {
  Scratch a, b;
};

// B's micro-panel jp from row k0 on, and its row stride: a packed panel, or a row-major B in
// place but for its edge panel (N % NR columns), which the caller packed zero-padded into edge.
std::pair<const float*, int64_t> b_panel(const TileMatrix& b, int64_t NR, const float* edge,
                                         int64_t jp, int64_t k0) {
  if (b.packed()) return {b.p + jp * b.panel + k0 * NR, NR};
  if ((jp + 1) * NR <= b.cols) return {b.p + k0 * b.rs + jp * NR, b.rs};
  return {edge + k0 * NR, NR};
}

// One tile's product: each row panel of A (read as the GEMM reads it, ASource) against each
// micro-panel of B (b_panel).
void tile_gemm(const KernelTable& t, TileScratch& sc, const TileGemm& g) {
  const int64_t MR = t.sgemm_blocking.mr, NR = t.sgemm_blocking.nr;
  const int64_t M = g.a.rows, N = g.b.cols, K = g.a.cols;
  if (M <= 0 || N <= 0) return;
  const ASource a(t, g.a.p, g.a.rs, g.a.cs, true);
  const float* edge = nullptr;
  if (!g.b.packed() && N % NR > 0) {
    float* const e = sc.b.get(std::max<int64_t>(K, 1) * NR);
    pack_b(t, K, N % NR, g.b.p + N / NR * NR * g.b.cs, g.b.rs, g.b.cs, NR, e);
    edge = e;
  }
  for (int64_t i0 = 0; i0 < M; i0 += MR) {
    const int64_t m = std::min(MR, M - i0);
    const auto [k0, k1] = g.causal.k_range(i0, m, K);
    const int64_t kc = k1 - k0;
    if (kc <= 0 && g.c.accumulate) continue;
    float* const ap = sc.a.get(std::max<int64_t>(kc, 1) * MR);
    a.pack(i0, m, k0, kc, ap);
    for (int64_t jp = 0; jp * NR < N; ++jp) {
      const int64_t n = std::min(NR, N - jp * NR);
      float* const c = g.c.p + i0 * g.c.ld + jp * NR;
      if (g.causal.past(i0, m, jp * NR)) {  // all past the diagonal
        for (int64_t i = 0; i < m && !g.c.accumulate; ++i) std::fill_n(c + i * g.c.ld, n, 0.f);
        continue;
      }
      const auto [b, ldb] = b_panel(g.b, NR, edge, jp, k0);
      a.tile(i0, k0, kc, ap, b, ldb, c, g.c.ld, m, n, g.c.accumulate);
    }
  }
}

// Flex attention (AttnScoreMod): whether the tile of query block i0 by key block j0 is skipped
// (empty), whether its scores are rewritten before the tile step, and the micro-tiles its GEMMs
// skip: past the causal diagonal, or past a partial flex tile's own.
struct FlexTile {
  bool skip = false, rewrite = false;
  CausalSkips skips;
};
FlexTile flex_tile(const AttnProblem<float>& p, Blocks bl, int64_t n, int64_t i0, int64_t j0,
                   int64_t cols) {
  if (p.mod == nullptr) return {false, false, causal_skips(p.causal, i0 - j0, cols)};
  const TileInfo ti = p.mod->tile(n, i0 / bl.br, j0 / bl.bc);
  const bool partial = ti.kind == TileKind::partial;
  return {ti.kind == TileKind::empty, partial || p.mod->rewrites_full,
          causal_skips(partial, ti.diag, cols)};
}

// One query block of the forward (see the top of the file). kt: problem n's packed kᵀ panels.
void forward_block(const KernelTable& t, const AttnProblem<float>& p, Blocks bl, const float* kt,
                   int64_t n, int64_t i0, MatrixBatch<float> out, float* lse) {
  thread_local TileScratch sc;
  const int64_t rows = std::min(bl.br, p.L - i0), NR = t.sgemm_blocking.nr;
  const auto [s, st, keep] = forward_buffers(bl, rows, p.Ev);
  const TileMatrix q_i = rows_of(p.q, n, i0, rows, p.E);
  const int64_t jend = keys_seen(p, i0, rows);
  for (int64_t j0 = 0; j0 < jend; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    const FlexTile fx = flex_tile(p, bl, n, i0, j0, cols);
    if (fx.skip) continue;
    const CausalSkips& skip = fx.skips;
    const TileMatrix kt_j = packed_panels(kt + j0 / NR * p.E * NR, p.E, cols, NR);
    const TileMatrix v_j = rows_of(p.v, n, j0, cols, p.Ev);
    // S = q_i · k_jᵀ
    tile_gemm(t, sc, {.c = into(s, bl.bc), .a = q_i, .b = kt_j, .causal = skip.cols});
    AttnTile tl = make_tile(p, n, i0, j0, rows, cols, bl.bc, keep);
    if (fx.rewrite && p.mod->rewrite(n, i0, j0, rows, cols, p.scale, s, bl.bc, nullptr))
      tl.scale = 1;
    t.attn_fwd_tile(tl, s, st.m, st.l, st.alpha);
    const TileMatrix p_keep = row_major(s, rows, cols, bl.bc);
    st.rescale();
    // O = O·alpha + (P∘keep) · v_j
    tile_gemm(t, sc, {.c = add_to(st.o, p.Ev), .a = p_keep, .b = v_j, .causal = skip.k_upto});
  }
  st.finish(lse + n * p.L + i0);  // O / l
  for (int64_t r = 0; r < rows; ++r) std::copy_n(st.o + r * p.Ev, p.Ev, out.at(n, i0 + r));
}

// One query row (L == 1, not causal, no flex hook: each step of KV-cache generation), problem n:
// forward_block's loop with its two products on the table's one-row kernels, k and v read in
// place, where forward() would pack all of kᵀ for one row's use (O(cache) writes per token). The
// same bits: S sums E whole from zero, O adds each key block's sum to O (table.h: SgemmRow).
void forward_row(const KernelTable& t, const AttnProblem<float>& p, Blocks bl, int64_t n,
                 MatrixBatch<float> out, float* lse) {
  const auto [s, st, keep] = forward_buffers(bl, 1, p.Ev);
  for (int64_t j0 = 0; j0 < p.S; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    // S = q · k_jᵀ
    t.sgemm_row_dots(cols, p.E, std::max<int64_t>(p.E, 1), p.q.at(n, 0), p.k.at(n, j0), p.k.ld, s,
                     false);
    t.attn_fwd_tile(make_tile(p, n, 0, j0, 1, cols, bl.bc, keep), s, st.m, st.l, st.alpha);
    st.rescale();
    // O = O·alpha + (P∘keep) · v_j
    t.sgemm_row_axpys(p.Ev, cols, cols, s, p.v.at(n, j0), p.v.ld, st.o, true);
  }
  st.finish(lse + n * p.L);  // O / l
  std::copy_n(st.o, p.Ev, out.at(n, 0));
}

void forward(const KernelTable& t, const AttnProblem<float>& p, MatrixBatch<float> out,
             float* lse) {
  const Blocks bl = blocks_for(t.sgemm_blocking);
  if (p.L == 1 && !p.causal && p.mod == nullptr) {
    for_each_query_block(p.batch, 1, bl.br,
                         [&](int64_t n, int64_t) { forward_row(t, p, bl, n, out, lse); });
    return;
  }
  const int64_t NR = t.sgemm_blocking.nr;
  // kᵀ of every problem, packed once: the B operand of all its score tiles.
  const int64_t kt_size = (p.S + NR - 1) / NR * NR * std::max<int64_t>(p.E, 1);
  Scratch kt_buf;
  float* kt = kt_buf.get(std::max<int64_t>(p.batch * kt_size, 1));
  parallel_for(p.batch, [&](int64_t n) {
    if (p.S > 0) pack_b(t, p.E, p.S, p.k.at(n, 0), 1, p.k.ld, NR, kt + n * kt_size);
  });
  for_each_query_block(p.batch, p.L, bl.br, [&](int64_t n, int64_t i0) {
    forward_block(t, p, bl, kt + n * kt_size, n, i0, out, lse);
  });
}

// The backward of problem n (see the top of the file).
void backward_problem(const KernelTable& t, const AttnProblem<float>& p, Blocks bl,
                      MatrixBatch<const float> out, MatrixBatch<const float> dout, const float* lse,
                      MatrixBatch<float> dq, MatrixBatch<float> dk, MatrixBatch<float> dv,
                      int64_t n) {
  thread_local TileScratch sc;
  thread_local Scratch s_buf, dp_buf, kt_buf, vt_buf, d_buf, keep_buf, g_buf;
  const int64_t NR = t.sgemm_blocking.nr;
  const int64_t panels = (bl.bc + NR - 1) / NR * NR;
  // S = q_i · k_jᵀ and dP = dout_i · v_jᵀ, which attn_bwd_tile turns into P∘keep and dS in place.
  float* const s = s_buf.get(bl.br * bl.bc);
  float* const dp = dp_buf.get(bl.br * bl.bc);
  float* const g = g_buf.get(p.mod != nullptr ? bl.br * bl.bc : 1);  // dx/dS of a rewritten tile
  float* const kt = kt_buf.get(panels * std::max<int64_t>(p.E, 1));
  float* const vt = vt_buf.get(panels * std::max<int64_t>(p.Ev, 1));
  float* const D = d_buf.get(std::max<int64_t>(p.L, 1));
  auto* keep = reinterpret_cast<uint8_t*>(keep_buf.get(bl.br * bl.bc / 4 + 1));
  backward_start(p, out, dout, dq, n, D);
  for (int64_t j0 = 0; j0 < p.S; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    pack_b(t, p.E, cols, p.k.at(n, j0), 1, p.k.ld, NR, kt);
    pack_b(t, p.Ev, cols, p.v.at(n, j0), 1, p.v.ld, NR, vt);
    for (int64_t c = 0; c < cols; ++c) {
      std::fill(dk.at(n, j0 + c), dk.at(n, j0 + c) + p.E, 0.f);
      std::fill(dv.at(n, j0 + c), dv.at(n, j0 + c) + p.Ev, 0.f);
    }
    const TileMatrix kt_j = packed_panels(kt, p.E, cols, NR);
    const TileMatrix vt_j = packed_panels(vt, p.Ev, cols, NR);
    const TileMatrix k_j = rows_of(p.k, n, j0, cols, p.E);
    const TileOut dk_j = add_to(dk.at(n, j0), dk.ld), dv_j = add_to(dv.at(n, j0), dv.ld);
    // Causal: query blocks wholly above key j0 see none of this block.
    for (int64_t i0 = p.causal ? j0 / bl.br * bl.br : 0; i0 < p.L; i0 += bl.br) {
      const FlexTile fx = flex_tile(p, bl, n, i0, j0, cols);
      if (fx.skip) continue;
      const CausalSkips& skip = fx.skips;
      const int64_t rows = std::min(bl.br, p.L - i0);
      const TileMatrix q_i = rows_of(p.q, n, i0, rows, p.E);
      const TileMatrix dout_i = rows_of(dout, n, i0, rows, p.Ev);
      const TileOut dq_i = add_to(dq.at(n, i0), dq.ld);
      // S = q_i · k_jᵀ,  dP = dout_i · v_jᵀ
      tile_gemm(t, sc, {.c = into(s, bl.bc), .a = q_i, .b = kt_j, .causal = skip.cols});
      tile_gemm(t, sc, {.c = into(dp, bl.bc), .a = dout_i, .b = vt_j, .causal = skip.cols});
      AttnTile tl = make_tile(p, n, i0, j0, rows, cols, bl.bc, keep);
      const bool final = fx.rewrite && p.mod->rewrite(n, i0, j0, rows, cols, p.scale, s, bl.bc, g);
      if (final) tl.scale = 1;
      t.attn_bwd_tile(tl, s, dp, lse + n * p.L + i0, D + i0);
      // final scores x: the tile step left dx in dp; dS = dx ∘ dx/dS
      for (int64_t r = 0; r < rows && final; ++r)
        for (int64_t c = 0; c < cols; ++c) dp[r * bl.bc + c] *= g[r * bl.bc + c];
      const TileMatrix p_keep = row_major(s, rows, cols, bl.bc);
      const TileMatrix ds = row_major(dp, rows, cols, bl.bc);
      // dv_j += (P∘keep)ᵀ · dout_i,  dk_j += dSᵀ · q_i,  dq_i += dS · k_j
      tile_gemm(t, sc, {.c = dv_j, .a = p_keep.transposed(), .b = dout_i, .causal = skip.k_from});
      tile_gemm(t, sc, {.c = dk_j, .a = ds.transposed(), .b = q_i, .causal = skip.k_from});
      tile_gemm(t, sc, {.c = dq_i, .a = ds, .b = k_j, .causal = skip.k_upto});
    }
  }
}

}  // namespace

AttnTileSize sdpa_tile_size() {
  const Blocks bl = blocks_for(active_table().sgemm_blocking);
  return {bl.br, bl.bc};
}

void sdpa_forward(const AttnProblem<float>& p, MatrixBatch<float> out, float* lse) {
  forward(active_table(), p, out, lse);
}

void sdpa_backward(const AttnProblem<float>& p, MatrixBatch<const float> out,
                   MatrixBatch<const float> dout, const float* lse, MatrixBatch<float> dq,
                   MatrixBatch<float> dk, MatrixBatch<float> dv) {
  const KernelTable& t = active_table();
  const Blocks bl = blocks_for(t.sgemm_blocking);
  parallel_for(p.batch,
               [&](int64_t n) { backward_problem(t, p, bl, out, dout, lse, dq, dk, dv, n); });
}

}  // namespace tg::kernels
