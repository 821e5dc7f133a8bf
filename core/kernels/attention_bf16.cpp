// Fused scaled-dot-product attention in bfloat16: attention.cpp's FlashAttention-2 with q, k, v in
// bf16, their products on the active table's bf16 GEMM micro-kernel (float32 chains, table.h) and
// the softmax in float32 through the same tile steps as the float32 kernel. The roundings are
// where PyTorch's CPU flash attention source (FlashAttentionKernel.cpp) puts them for a reduced
// floating type: the softmax's weights before they multiply v (forward) and the weights and dS
// before they multiply dout, q and k (backward); the statistics and every accumulator stay
// float32. (Measured, the PyTorch 2.6 build here also rounds q·kᵀ and P·v: tests/test_bf16.cpp.)
// Formulas and threading contract: kernels.h. No intrinsics here.
//
// Shape legend: per problem q [L, E], k [S, E], v [S, Ev], out [L, Ev]; a tile is `rows` query
// rows from i0 by `cols` keys from j0, at most br × bc. bf16(x): x rounded to bfloat16.
//
// Forward, per (problem, query block i):   m = -inf, l = 0, O = 0 (float32)
//   for each key block j up to the diagonal:
//     S = q_i · k_jᵀ                          (bf16 micro-kernel; kᵀ packed once per problem,
//                                              q_i once per block)
//     attn_fwd_tile: P = exp(scale·S + mask − m'), l = l·alpha + Σ P, m = m'; S → P∘keep
//     O = O·alpha + bf16(P∘keep) · v_j        (bf16 micro-kernel; v packed once per problem)
//   out_i = bf16(O / l),  lse_i = m + log l
// Backward, per problem: D = rowsum(dout ∘ out) in float32, q and dout packed once (as A and as B
// panels); for each key block j (kᵀ_j, vᵀ_j and k_j packed once), for each query block i from the
// diagonal on:
//     S = q_i · k_jᵀ,  dP = dout_i · v_jᵀ      (bf16 micro-kernel)
//     attn_bwd_tile: S → P∘keep, dP → dS = scale · P ∘ (dP∘keep − D)   (float32)
//     attn_bf16_panels: bf16(P∘keep)ᵀ and bf16(dS)ᵀ rounded straight into packed A panels,
//                       bf16(dS) also row-major (one pass each; table.h)
//     dv_j += bf16(P∘keep)ᵀ · dout_i,  dk_j += bf16(dS)ᵀ · q_i,  dq_i += bf16(dS) · k_j
//   dk_j, dv_j rounded to bf16 precision once their query loop ends; dq once the problem ends.
// Not here: flex attention (an AttnScoreMod; flex_attention takes float32 and float64 only).
#include <algorithm>
#include <stdexcept>

#include "core/kernels/attention_tiles.h"
#include "core/kernels/packing.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

using namespace attn;

using Bf16Matrix = Operand<uint16_t>;

// The packed bf16 NR-column micro-panels (kp pairs each) of a K × N B operand at p, and their
// size in bf16.
Bf16Matrix packed_at(const KernelTable& t, int64_t K, int64_t N, const uint16_t* p) {
  return {p, K, N, 0, 0, std::max<int64_t>(t.gemm_bf16_blocking.nr * 2 * ((K + 1) / 2), 1)};
}
int64_t packed_size(const KernelTable& t, int64_t K, int64_t N) {
  const int64_t NR = t.gemm_bf16_blocking.nr;
  return std::max<int64_t>((N + NR - 1) / NR * NR * 2 * ((K + 1) / 2), 1);
}
// B = M[0:K, 0:N] (rows rs, columns cs apart) packed into out.
Bf16Matrix pack_b16(const KernelTable& t, int64_t K, int64_t N, const uint16_t* M, int64_t rs,
                    int64_t cs, uint16_t* out) {
  if (K > 0 && N > 0) pack_b_bf16(t, K, N, M, rs, cs, t.gemm_bf16_blocking.nr, out);
  return packed_at(t, K, N, out);
}
// A = M[0:rows, 0:K] packed into bf16 MR-row micro-panels (kp pairs each) at out, read in place
// by tile_gemm (panel: elements between row panels). Only for products that sum all of K (no
// causal K range: a pair's odd half past a range would not be zero).
Bf16Matrix pack_a16(const KernelTable& t, int64_t rows, int64_t K, const uint16_t* M, int64_t rs,
                    int64_t cs, uint16_t* out) {
  const int64_t MR = t.gemm_bf16_blocking.mr;
  if (rows > 0 && K > 0) pack_a_bf16(t, rows, K, M, rs, cs, MR, out);
  return {out, rows, K, 0, 0, std::max<int64_t>(MR * 2 * ((K + 1) / 2), 1)};
}
// The A panels (kp pairs each) of the transpose of a K × rows tile, as attn_bf16_panels writes
// them: the operands bf16(P∘keep)ᵀ and bf16(dS)ᵀ of dv and dk. Their causal skips are k_from
// ranges, which end at K: tile_gemm reads them from their first pair on, as its own packing of
// that range would hold them.
Bf16Matrix transposed_panels(const KernelTable& t, int64_t rows, int64_t K, const uint16_t* p) {
  return {p, rows, K, 0, 0, std::max<int64_t>(t.gemm_bf16_blocking.mr * 2 * ((K + 1) / 2), 1)};
}
int64_t packed_a_size(const KernelTable& t, int64_t rows, int64_t K) {
  const int64_t MR = t.gemm_bf16_blocking.mr;
  return std::max<int64_t>((rows + MR - 1) / MR * MR * 2 * ((K + 1) / 2), 1);
}
// Rows [i0, i0 + rows) (i0 a multiple of MR) of packed A panels.
Bf16Matrix sub_rows(const Bf16Matrix& a, int64_t MR, int64_t i0, int64_t rows) {
  return {a.p + i0 / MR * a.panel, rows, a.cols, 0, 0, a.panel};
}
// Rows [k0, k0 + K) (k0 even) and columns [j0, j0 + N) (j0 a multiple of NR) of packed panels.
Bf16Matrix sub_panels(const Bf16Matrix& b, int64_t NR, int64_t k0, int64_t K, int64_t j0,
                      int64_t N) {
  return {b.p + j0 / NR * b.panel + k0 * NR, K, N, 0, 0, b.panel};
}

using TileGemm16 = TileProduct<uint16_t>;

struct TileScratch16 {
  ScratchOf<uint16_t> a, b;
};

// One tile's product: each row panel of A, packed over the K range it sums (its start rounded
// down to a whole pair: the keys it adds have weight 0) unless it came packed, against each
// micro-panel of B (packed here unless it came packed).
void tile_gemm(const KernelTable& t, TileScratch16& sc, const TileGemm16& g) {
  const int64_t MR = t.gemm_bf16_blocking.mr, NR = t.gemm_bf16_blocking.nr;
  const int64_t M = g.a.rows, N = g.b.cols, K = g.a.cols;
  if (M <= 0 || N <= 0) return;
  Bf16Matrix b = g.b;
  if (!b.packed()) b = pack_b16(t, K, N, b.p, b.rs, b.cs, sc.b.get(packed_size(t, K, N)));
  uint16_t* const ap =
      g.a.packed() ? nullptr : sc.a.get(MR * 2 * std::max<int64_t>((K + 1) / 2, 1));
  for (int64_t i0 = 0; i0 < M; i0 += MR) {
    const int64_t m = std::min(MR, M - i0);
    auto [k0, k1] = g.causal.k_range(i0, m, K);
    k0 = k0 / 2 * 2;  // B's pairs start at even k
    const int64_t kc = std::max<int64_t>(k1 - k0, 0);
    if (kc == 0 && g.c.accumulate) continue;
    const uint16_t* a = ap;
    if (g.a.packed())
      a = g.a.p + i0 / MR * g.a.panel + k0 * MR;
    else
      pack_a_bf16(t, m, kc, g.a.p + i0 * g.a.rs + k0 * g.a.cs, g.a.rs, g.a.cs, MR, ap);
    for (int64_t j = 0; j < N; j += NR) {
      const int64_t n = std::min(NR, N - j);
      float* const c = g.c.p + i0 * g.c.ld + j;
      if (g.causal.past(i0, m, j)) {  // all past the diagonal
        for (int64_t i = 0; i < m && !g.c.accumulate; ++i) std::fill_n(c + i * g.c.ld, n, 0.f);
        continue;
      }
      t.gemm_bf16_ukernel((kc + 1) / 2, a, b.p + j / NR * b.panel + k0 * NR, c, g.c.ld, m, n,
                          g.c.accumulate, Bf16TileOut{});
    }
  }
}

// dst = bf16(src), rows × cols, both rows ld apart: a tile step's float32 output as an A operand.
void round_tile(const KernelTable& t, const float* src, int64_t rows, int64_t cols, int64_t ld,
                uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) t.f32_to_bf16(cols, src + r * ld, dst + r * ld);
}

// x = float32(bf16(x)) for `rows` rows of n elements, ld apart: an accumulator's single rounding.
void round_rows(const KernelTable& t, float* x, int64_t rows, int64_t n, int64_t ld,
                uint16_t* tmp) {
  for (int64_t r = 0; r < rows; ++r) {
    t.f32_to_bf16(n, x + r * ld, tmp);
    t.bf16_to_f32(n, tmp, x + r * ld);
  }
}

// Problem n's operands packed once for the forward: kᵀ (E × S) and v (S × Ev).
struct ForwardPanels {
  Bf16Matrix kt, v;
};

// One query block of the forward (see the top of the file).
void forward_block(const KernelTable& t, const AttnProblemBf16& p, Blocks bl,
                   const ForwardPanels& pn, int64_t n, int64_t i0, MatrixBatch<uint16_t> out,
                   float* lse) {
  thread_local TileScratch16 sc;
  thread_local ScratchOf<uint16_t> p_buf, q_buf;
  const int64_t rows = std::min(bl.br, p.L - i0), NR = t.gemm_bf16_blocking.nr;
  const auto [s, st, keep] = forward_buffers(bl, rows, p.Ev);
  uint16_t* const p16 = p_buf.get(bl.br * bl.bc);  // bf16(P∘keep)
  // q_i packed once: the A operand of every score tile of this block.
  const Bf16Matrix q_i =
      pack_a16(t, rows, p.E, p.q.at(n, i0), p.q.ld, 1, q_buf.get(packed_a_size(t, bl.br, p.E)));
  const int64_t jend = keys_seen(p, i0, rows);
  for (int64_t j0 = 0; j0 < jend; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    const CausalSkips skip = causal_skips(p.causal, i0 - j0, cols);
    const Bf16Matrix kt_j = sub_panels(pn.kt, NR, 0, p.E, j0, cols);
    const Bf16Matrix v_j = sub_panels(pn.v, NR, j0, cols, 0, p.Ev);
    // S = q_i · k_jᵀ
    tile_gemm(t, sc, {.c = into(s, bl.bc), .a = q_i, .b = kt_j, .causal = skip.cols});
    t.attn_fwd_tile(make_tile(p, n, i0, j0, rows, cols, bl.bc, keep), s, st.m, st.l, st.alpha);
    round_tile(t, s, rows, cols, bl.bc, p16);
    st.rescale();
    // O = O·alpha + bf16(P∘keep) · v_j
    tile_gemm(t, sc,
              {.c = add_to(st.o, p.Ev),
               .a = row_major(p16, rows, cols, bl.bc),
               .b = v_j,
               .causal = skip.k_upto});
  }
  st.finish(lse + n * p.L + i0);  // O / l, rounded once below
  for (int64_t r = 0; r < rows; ++r) t.f32_to_bf16(p.Ev, st.o + r * p.Ev, out.at(n, i0 + r));
}

// One query row (L == 1, not causal: each step of KV-cache generation), problem n: forward_block's
// loop with k and v read in place by the table's one-row kernels (gemv_rows_bf16 for S, the bf16
// axpys for O), where forward() would pack all of kᵀ and v for one row's use. The same chains:
// S from +0 over E, O continued from O over each key block's pairs.
void forward_row(const KernelTable& t, const AttnProblemBf16& p, Blocks bl, int64_t n,
                 MatrixBatch<uint16_t> out, float* lse) {
  thread_local ScratchOf<uint16_t> p_buf;
  const auto [s, st, keep] = forward_buffers(bl, 1, p.Ev);
  uint16_t* const p16 = p_buf.get(bl.bc);  // bf16(P∘keep)
  for (int64_t j0 = 0; j0 < p.S; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    // S = q · k_jᵀ
    t.gemv_rows_bf16(cols, p.E, p.k.at(n, j0), p.k.ld, p.q.at(n, 0), nullptr, s);
    t.attn_fwd_tile(make_tile(p, n, 0, j0, 1, cols, bl.bc, keep), s, st.m, st.l, st.alpha);
    t.f32_to_bf16(cols, s, p16);
    st.rescale();
    // O = O·alpha + bf16(P∘keep) · v_j
    t.gemm_bf16_row_axpys(p.Ev, cols, p16, p.v.at(n, j0), p.v.ld, st.o, true);
  }
  st.finish(lse + n * p.L);  // O / l, rounded once below
  t.f32_to_bf16(p.Ev, st.o, out.at(n, 0));
}

void forward(const KernelTable& t, const AttnProblemBf16& p, MatrixBatch<uint16_t> out,
             float* lse) {
  const Blocks bl = blocks_for(t.gemm_bf16_blocking);
  if (p.L == 1 && !p.causal) {
    for_each_query_block(p.batch, 1, bl.br,
                         [&](int64_t n, int64_t) { forward_row(t, p, bl, n, out, lse); });
    return;
  }
  // kᵀ and v of every problem, packed once: the B operands of all its tiles.
  const int64_t kt_size = packed_size(t, p.E, p.S), v_size = packed_size(t, p.S, p.Ev);
  ScratchOf<uint16_t> kt_buf, v_buf;
  uint16_t* const kt = kt_buf.get(p.batch * kt_size);
  uint16_t* const v = v_buf.get(p.batch * v_size);
  if (p.S > 0)
    parallel_for(p.batch, [&](int64_t n) {
      pack_b16(t, p.E, p.S, p.k.at(n, 0), 1, p.k.ld, kt + n * kt_size);
      pack_b16(t, p.S, p.Ev, p.v.at(n, 0), p.v.ld, 1, v + n * v_size);
    });
  const auto panels = [&](int64_t n) {
    return ForwardPanels{packed_at(t, p.E, p.S, kt + n * kt_size),
                         packed_at(t, p.S, p.Ev, v + n * v_size)};
  };
  for_each_query_block(p.batch, p.L, bl.br, [&](int64_t n, int64_t i0) {
    forward_block(t, p, bl, panels(n), n, i0, out, lse);
  });
}

// The operands of problem n's backward and its per-thread buffers.
struct BackwardIo {
  MatrixBatch<const uint16_t> out, dout;
  const float* lse;
  MatrixBatch<float> dq, dk, dv;
};

// Query block i0 against key block j0 (cols keys), whose kᵀ, vᵀ and k are packed: the tile step
// and the three gradient products.
struct KeyBlock {
  int64_t j0, cols;
  Bf16Matrix kt, vt, k;
};
// Problem n's q and dout packed once, as A operands (q_i·kᵀ, dout_i·vᵀ) and as B operands
// (dSᵀ·q_i, Pᵀ·dout_i) of every tile.
struct QueryPanels {
  Bf16Matrix q_a, q_b, dout_a, dout_b;
};
QueryPanels pack_queries(const KernelTable& t, const AttnProblemBf16& p, const BackwardIo& io,
                         int64_t n) {
  thread_local ScratchOf<uint16_t> qa, qb, da, db;
  const int64_t L = p.L, E = p.E, Ev = p.Ev;
  const uint16_t *q = p.q.at(n, 0), *dout = io.dout.at(n, 0);
  return {pack_a16(t, L, E, q, p.q.ld, 1, qa.get(packed_a_size(t, L, E))),
          pack_b16(t, L, E, q, p.q.ld, 1, qb.get(packed_size(t, L, E))),
          pack_a16(t, L, Ev, dout, io.dout.ld, 1, da.get(packed_a_size(t, L, Ev))),
          pack_b16(t, L, Ev, dout, io.dout.ld, 1, db.get(packed_size(t, L, Ev)))};
}
void backward_tile(const KernelTable& t, const AttnProblemBf16& p, Blocks bl, const BackwardIo& io,
                   const QueryPanels& qp, const float* D, int64_t n, int64_t i0,
                   const KeyBlock& kb) {
  thread_local TileScratch16 sc;
  thread_local Scratch s_buf, dp_buf, keep_buf;
  thread_local ScratchOf<uint16_t> ds_buf, pt_buf, dst_buf;
  const int64_t rows = std::min(bl.br, p.L - i0), cols = kb.cols, ld = bl.bc;
  float* const s = s_buf.get(bl.br * bl.bc);
  float* const dp = dp_buf.get(bl.br * bl.bc);
  uint16_t* const ds16 = ds_buf.get(bl.br * bl.bc);
  auto* keep = reinterpret_cast<uint8_t*>(keep_buf.get(bl.br * bl.bc / 4 + 1));
  const CausalSkips skip = causal_skips(p.causal, i0 - kb.j0, cols);
  const int64_t MR = t.gemm_bf16_blocking.mr, NR = t.gemm_bf16_blocking.nr;
  // S = q_i · k_jᵀ,  dP = dout_i · v_jᵀ
  tile_gemm(
      t, sc,
      {.c = into(s, ld), .a = sub_rows(qp.q_a, MR, i0, rows), .b = kb.kt, .causal = skip.cols});
  tile_gemm(
      t, sc,
      {.c = into(dp, ld), .a = sub_rows(qp.dout_a, MR, i0, rows), .b = kb.vt, .causal = skip.cols});
  const AttnTile tl = make_tile(p, n, i0, kb.j0, rows, cols, ld, keep);
  t.attn_bwd_tile(tl, s, dp, io.lse + n * p.L + i0, D + i0);
  // bf16(P∘keep)ᵀ and bf16(dS)ᵀ as packed A panels, bf16(dS) also row-major: no pass of its own
  const int64_t pt_size = packed_a_size(t, cols, rows);
  uint16_t *const pt = pt_buf.get(pt_size), *const dst = dst_buf.get(pt_size);
  t.attn_bf16_panels(rows, cols, s, ld, MR, pt, nullptr);
  t.attn_bf16_panels(rows, cols, dp, ld, MR, dst, ds16);
  const Bf16Matrix pk_t = transposed_panels(t, cols, rows, pt);
  const Bf16Matrix ds_t = transposed_panels(t, cols, rows, dst);
  const Bf16Matrix ds = row_major(ds16, rows, cols, ld);
  // dv_j += bf16(P∘keep)ᵀ · dout_i,  dk_j += bf16(dS)ᵀ · q_i,  dq_i += bf16(dS) · k_j
  const TileOut dv_j = add_to(io.dv.at(n, kb.j0), io.dv.ld);
  const TileOut dk_j = add_to(io.dk.at(n, kb.j0), io.dk.ld);
  const Bf16Matrix dout_i = sub_panels(qp.dout_b, NR, i0, rows, 0, p.Ev);
  const Bf16Matrix q_i = sub_panels(qp.q_b, NR, i0, rows, 0, p.E);
  tile_gemm(t, sc, {.c = dv_j, .a = pk_t, .b = dout_i, .causal = skip.k_from});
  tile_gemm(t, sc, {.c = dk_j, .a = ds_t, .b = q_i, .causal = skip.k_from});
  tile_gemm(t, sc,
            {.c = add_to(io.dq.at(n, i0), io.dq.ld), .a = ds, .b = kb.k, .causal = skip.k_upto});
}

// The backward of problem n (see the top of the file).
void backward_problem(const KernelTable& t, const AttnProblemBf16& p, Blocks bl,
                      const BackwardIo& io, int64_t n) {
  thread_local Scratch d_buf;
  thread_local ScratchOf<uint16_t> kt_buf, vt_buf, k_buf, tmp_buf;
  float* const D = d_buf.get(std::max<int64_t>(p.L, 1));
  uint16_t* const tmp = tmp_buf.get(std::max<int64_t>(std::max(p.E, p.Ev), 1));
  backward_start(p, io.out, io.dout, io.dq, n, D);
  const QueryPanels qp = pack_queries(t, p, io, n);
  for (int64_t j0 = 0; j0 < p.S; j0 += bl.bc) {
    const int64_t cols = std::min(bl.bc, p.S - j0);
    const uint16_t* const k = p.k.at(n, j0);
    const KeyBlock kb{
        j0, cols, pack_b16(t, p.E, cols, k, 1, p.k.ld, kt_buf.get(packed_size(t, p.E, cols))),
        pack_b16(t, p.Ev, cols, p.v.at(n, j0), 1, p.v.ld, vt_buf.get(packed_size(t, p.Ev, cols))),
        pack_b16(t, cols, p.E, k, p.k.ld, 1, k_buf.get(packed_size(t, cols, p.E)))};
    for (int64_t c = 0; c < cols; ++c) {
      std::fill_n(io.dk.at(n, j0 + c), p.E, 0.f);
      std::fill_n(io.dv.at(n, j0 + c), p.Ev, 0.f);
    }
    // Causal: query blocks wholly above key j0 see none of this block.
    for (int64_t i0 = p.causal ? j0 / bl.br * bl.br : 0; i0 < p.L; i0 += bl.br)
      backward_tile(t, p, bl, io, qp, D, n, i0, kb);
    round_rows(t, io.dk.at(n, j0), cols, p.E, io.dk.ld, tmp);
    round_rows(t, io.dv.at(n, j0), cols, p.Ev, io.dv.ld, tmp);
  }
  round_rows(t, io.dq.at(n, 0), p.L, p.E, io.dq.ld, tmp);
}

void check_no_mod(const AttnProblemBf16& p) {
  if (p.mod != nullptr)
    throw std::invalid_argument(
        "sdpa_forward_bf16/sdpa_backward_bf16: flex attention (a score mod) takes the float32 "
        "kernel");
}

}  // namespace

AttnTileSize sdpa_bf16_tile_size() {
  const Blocks bl = blocks_for(active_table().gemm_bf16_blocking);
  return {bl.br, bl.bc};
}

void sdpa_forward_bf16(const AttnProblemBf16& p, MatrixBatch<uint16_t> out, float* lse) {
  check_no_mod(p);
  forward(active_table(), p, out, lse);
}

void sdpa_backward_bf16(const AttnProblemBf16& p, MatrixBatch<const uint16_t> out,
                        MatrixBatch<const uint16_t> dout, const float* lse, MatrixBatch<float> dq,
                        MatrixBatch<float> dk, MatrixBatch<float> dv) {
  check_no_mod(p);
  const KernelTable& t = active_table();
  const Blocks bl = blocks_for(t.gemm_bf16_blocking);
  const BackwardIo io{out, dout, lse, dq, dk, dv};
  parallel_for(p.batch, [&](int64_t n) { backward_problem(t, p, bl, io, n); });
}

}  // namespace tg::kernels
