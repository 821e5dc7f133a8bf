// The bfloat16 fused attention kernel (core/kernels/attention_bf16.cpp) on every path this machine
// runs: within bf16's precision of the float32 reference on the widened inputs (a bound derived
// per element from where the kernel rounds), bit for bit equal to its algorithm written plainly
// (the path's own tile steps, gemm_bf16_ref for every product), and the same bits for 1, 2 and 3
// threads. Shapes at and around the block edges, L ≠ S, odd E and Ev (edge panels, an odd last
// pair of k), causal, additive and broadcast masks, dropout, rows no key reaches, no key at all.
// Built into test_kernels, so NEON runs it under qemu too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/attention_tiles.h"
#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "tests/attention_kernel_testing.h"
#include "tests/kernel_testing.h"

namespace k = tg::kernels;
using tg::testing::for_each_isa;
using tg::testing::randv;
using tg::testing::same_bits;
using namespace tg::testing::attention;

namespace {

// x rounded to bf16 in place (so that the float32 reference reads the widened bf16 values), and
// those bf16 bits.
std::vector<uint16_t> round_in_place(std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  k::f32_to_bf16_ref(int64_t(x.size()), x.data(), h.data());
  k::bf16_to_f32_ref(int64_t(h.size()), h.data(), x.data());
  return h;
}
std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> x(h.size());
  k::bf16_to_f32_ref(int64_t(h.size()), h.data(), x.data());
  return x;
}

// A float32 problem (attention_kernel_testing.h) whose q, k, v are bf16 values, and the same
// problem in bf16 bits, laid out alike; the mask and the dropout bits are shared.
struct Problem16 {
  Problem f;
  std::vector<uint16_t> q, k, v;
  k::AttnProblemBf16 p;
  Problem16(Shape5 s, bool causal, int mask_kind, bool dropout, std::mt19937& g, int64_t pad = 5)
      : f(s, causal, mask_kind, dropout, g, pad) {
    q = round_in_place(f.q), k = round_in_place(f.k), v = round_in_place(f.v);
    p.batch = s.batch, p.L = s.L, p.S = s.S, p.E = s.E, p.Ev = s.Ev;
    p.scale = f.p.scale, p.causal = causal;
    p.q = {q.data(), f.qld, f.qo.data()}, p.k = {k.data(), f.kld, f.ko.data()};
    p.v = {v.data(), f.vld, f.vo.data()};
    p.mask = f.p.mask, p.mask_cs = f.p.mask_cs;
    p.keep_bits = f.p.keep_bits, p.keep_scale = f.p.keep_scale;
  }
};

// Dense [batch, rows, cols] bf16 buffers (out, dout).
struct Out16 {
  std::vector<uint16_t> x;
  std::vector<int64_t> off;
  int64_t ld;
  Out16(int64_t batch, int64_t rows, int64_t cols)
      : x(size_t(batch * rows * cols), 0xFFFF), ld(cols) {
    for (int64_t n = 0; n < batch; ++n) off.push_back(n * rows * cols);
  }
  k::MatrixBatch<uint16_t> op() { return {x.data(), ld, off.data()}; }
  k::MatrixBatch<const uint16_t> cop() const { return {x.data(), ld, off.data()}; }
};

struct Result16 {
  Out16 out;
  std::vector<float> lse;
  Out dq, dk, dv;
  explicit Result16(const Shape5& s)
      : out(s.batch, s.L, s.Ev),
        lse(size_t(s.batch * s.L)),
        dq(s.batch, s.L, s.E),
        dk(s.batch, s.S, s.E),
        dv(s.batch, s.S, s.Ev) {}
  bool operator==(const Result16& o) const {
    return out.x == o.out.x && same_bits(lse, o.lse) && same_bits(dq.x, o.dq.x) &&
           same_bits(dk.x, o.dk.x) && same_bits(dv.x, o.dv.x);
  }
};

// Forward, then backward with dout, by the bf16 kernel.
Result16 run16(const Problem16& pr, const Out16& dout) {
  Result16 r(pr.f.d);
  k::sdpa_forward_bf16(pr.p, r.out.op(), r.lse.data());
  k::sdpa_backward_bf16(pr.p, r.out.cop(), dout.cop(), r.lse.data(), r.dq.op(), r.dk.op(),
                        r.dv.op());
  return r;
}

// ---- within bf16's precision of the float32 reference -------------------------------------------
// With u = 2^-8 (bf16 keeps 8 significant bits: a rounding to nearest is off by at most half a
// step, 2^-8 of the value) and w = P∘keep the normalised weights, the kernel's roundings move
// (first order, per element):
//   out:  bf16(w)·v summed: u·Σ_j w|v|;  out itself rounded: u·|out|
//   D:    from the bf16 out: δD = Σ_e |dout|·δout
//   dS:   from D: scale·P·δD;  dS rounded: u·|dS|            (dS = scale·P∘(dP∘keep − D))
//   dv = Σ_i bf16(w)·dout: u·Σ_i w|dout|;  dq = Σ_j bf16(dS)·k and dk = Σ_i bf16(dS)·q: the dS
//   errors times |k| or |q|;  each gradient rounded once: u·|grad|
// plus s = 2^-12 of the same absolute sums for everything float32 does differently from the
// double reference (S's chain over E products, the tile steps' exp and sums): a few float32 ulps
// times E, far below u, so an error past these roundings' (a wrong operand, a rounding where
// kernels.h has none) shows. A row no key reaches has bound 0: exact zeros.
struct Bounds {
  std::vector<double> out, dq, dk, dv;
};
constexpr double kU = 1.0 / 256, kSlack = 1.0 / 4096, kTiny = 1e-30;

// The dropout factor of (n, i, j): keep_scale or 0, 1 without dropout.
double keep_of(const k::AttnProblem<float>& p, int64_t n, int64_t i, int64_t j) {
  if (p.keep_bits == nullptr) return 1;
  const int64_t b = (n * p.L + i) * p.S + j;
  return (p.keep_bits[b >> 6] >> (b & 63)) & 1u ? p.keep_scale : 0;
}

// The bound of each element of problem pr (its float32 form) with dout, from want's out.
Bounds bf16_bounds(const Problem& pr, const Result& want, const std::vector<float>& dout) {
  const k::AttnProblem<float>& p = pr.p;
  const Shape5& d = pr.d;
  Bounds b{std::vector<double>(want.out.x.size()), std::vector<double>(want.dq.x.size()),
           std::vector<double>(want.dk.x.size()), std::vector<double>(want.dv.x.size())};
  std::vector<double> P(size_t(d.S)), dP(size_t(d.S)), dP_abs(size_t(d.S));
  for (int64_t n = 0; n < d.batch; ++n)
    for (int64_t i = 0; i < d.L; ++i) {
      const float* q = p.q.at(n, i);
      const double lse = want.lse[size_t(n * d.L + i)];
      const int64_t oi = (n * d.L + i) * d.Ev;
      for (int64_t j = 0; j < d.S; ++j) {  // P and dP of row i
        const float* kj = p.k.at(n, j);
        const float* vj = p.v.at(n, j);
        double x = 0, dp = 0, dp_abs = 0;
        for (int64_t e = 0; e < d.E; ++e) x += double(q[e]) * kj[e];
        for (int64_t e = 0; e < d.Ev; ++e) {
          dp += double(dout[size_t(oi + e)]) * vj[e];
          dp_abs += std::fabs(double(dout[size_t(oi + e)]) * vj[e]);
        }
        dP_abs[size_t(j)] = dp_abs;
        x = p.scale * x + (p.mask.base ? p.mask.at(n, i)[j * p.mask_cs] : 0.f);
        const bool removed = (p.causal && j > i) || lse == -INFINITY;
        P[size_t(j)] = removed ? 0 : std::exp(x - lse), dP[size_t(j)] = dp;
      }
      double dD = 0, D = 0, D_abs = 0;
      for (int64_t e = 0; e < d.Ev; ++e) {
        double A = 0;  // Σ_j w |v|
        for (int64_t j = 0; j < d.S; ++j)
          A += P[size_t(j)] * keep_of(p, n, i, j) * std::fabs(p.v.at(n, j)[e]);
        const double o = want.out.x[size_t(oi + e)];
        b.out[size_t(oi + e)] = kU * (A + std::fabs(o)) + kSlack * A + kTiny;
        dD += std::fabs(dout[size_t(oi + e)]) * b.out[size_t(oi + e)];
        D += double(dout[size_t(oi + e)]) * o;
        D_abs += std::fabs(double(dout[size_t(oi + e)]) * o);
      }
      for (int64_t j = 0; j < d.S; ++j) {
        const double w = P[size_t(j)], kf = keep_of(p, n, i, j);
        const double ds = p.scale * w * (dP[size_t(j)] * kf - D);
        // the same with every sum taken over absolute values: what float32's sums round
        const double ds_abs = p.scale * w * (dP_abs[size_t(j)] * kf + D_abs);
        const double err = p.scale * w * dD + kU * std::fabs(ds) + kSlack * ds_abs;
        for (int64_t e = 0; e < d.E; ++e) {
          b.dq[size_t((n * d.L + i) * d.E + e)] += err * std::fabs(p.k.at(n, j)[e]);
          b.dk[size_t((n * d.S + j) * d.E + e)] += err * std::fabs(q[e]);
        }
        for (int64_t e = 0; e < d.Ev; ++e)
          b.dv[size_t((n * d.S + j) * d.Ev + e)] +=
              (kU + kSlack) * w * kf * std::fabs(dout[size_t(oi + e)]);
      }
    }
  for (auto [bound, grad] : {std::pair{&b.dq, &want.dq}, {&b.dk, &want.dk}, {&b.dv, &want.dv}})
    for (size_t i = 0; i < bound->size(); ++i) (*bound)[i] += kU * std::fabs(grad->x[i]) + kTiny;
  return b;
}

// |got − want| <= bound elementwise (NaN never passes). Returns the largest |got − want| / bound.
double check_within(const std::vector<float>& got, const std::vector<float>& want,
                    const std::vector<double>& bound, const std::string& what) {
  int bad = 0;
  double worst = 0;  // the largest |got − want| / bound
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, diff / bound[i]);
    if (!(diff <= bound[i]) && bad++ < 3) {
      INFO(what << "[" << i << "]: got " << got[i] << " want " << want[i] << " bound " << bound[i]);
      CHECK(diff <= bound[i]);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements differ");
  return worst;
}

// dout for a problem: random bf16 values, as bits and widened.
struct Dout {
  Out16 bits;
  std::vector<float> x;
  Dout(const Shape5& s, std::mt19937& g) : bits(s.batch, s.L, s.Ev) {
    x = randv(g, s.batch * s.L * s.Ev);
    bits.x = round_in_place(x);
  }
};

// The float32 reference on the widened inputs.
Result reference(const Problem& pr, const std::vector<float>& dout) {
  Result r(pr.d);
  k::sdpa_forward_ref(pr.p, r.out.op(), r.lse.data());
  Out go(pr.d.batch, pr.d.L, pr.d.Ev);
  go.x = dout;
  k::sdpa_backward_ref(pr.p, r.out.cop(), go.cop(), r.lse.data(), r.dq.op(), r.dk.op(), r.dv.op());
  return r;
}

const Shape5 kShapes[] = {{1, 1, 1, 1, 1},     {2, 7, 7, 8, 8},      {2, 64, 64, 64, 64},
                          {1, 65, 65, 80, 16}, {2, 70, 130, 17, 33}, {1, 130, 70, 63, 64},
                          {1, 33, 31, 3, 5},   {1, 5, 0, 4, 4},      {2, 129, 129, 32, 32}};

// Variant v of a shape: causal (1, 4), mask kinds 1 to 4 (2, 3, 5, 6), dropout (3, 4, 6).
struct Variant {
  bool causal, dropout;
  int mask_kind;
};
Variant variant(int v) {
  return {v == 1 || v == 4, v >= 3 && v != 5, v == 2 ? 1 : v == 3 ? 2 : v >= 5 ? v - 2 : 0};
}

}  // namespace

// ---- the tile operands alone: attn_bf16_panels --------------------------------------------------
TEST_CASE("bf16 attention: the tile operands' panels (attn_bf16_panels), every path, bit for bit") {
  struct Case {
    int64_t rows, cols, ld, w;
  };
  // Odd rows (a last pair's zero half), cols around w and the SIMD widths, a partial last panel,
  // the backward's own tile (72 × 64, MR 12), more columns than the SIMD buffer holds (200), and
  // widths without a fixed-size copy (5, 64).
  const Case cases[] = {{1, 1, 1, 4},      {2, 5, 7, 4},     {3, 12, 12, 12},  {7, 13, 16, 12},
                        {16, 16, 16, 8},   {17, 33, 40, 12}, {72, 64, 64, 12}, {9, 70, 75, 16},
                        {5, 200, 203, 12}, {4, 37, 37, 5},   {6, 3, 3, 64},    {1, 100, 100, 64}};
  std::mt19937 g(26);
  constexpr uint16_t kUnwritten = 0xBEEF;
  for (const Case& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.w);
    std::vector<float> src = randv(g, c.rows * c.ld, -4.f, 4.f);
    // NaN (a payload), ±inf, ±0, a float32 denormal, ties to even both ways, the largest float
    const uint32_t special[] = {0x7FA00001u, 0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,
                                0x00000123u, 0x3F808000u, 0x3F818000u, 0x7F7FFFFFu};
    for (size_t i = 0; i < std::size(special) && 3 * i < src.size(); ++i)
      std::memcpy(&src[3 * i], &special[i], 4);
    const int64_t kp = (c.rows + 1) / 2, size = (c.cols + c.w - 1) / c.w * c.w * 2 * kp;
    // 64 more: whatever a path writes past the panels shows
    std::vector<uint16_t> want(size_t(size + 64), kUnwritten), want_rm(src.size(), kUnwritten);
    k::attn_bf16_panels_ref(c.rows, c.cols, src.data(), c.ld, c.w, want.data(), want_rm.data());
    for_each_isa([&](const std::string&) {
      std::vector<uint16_t> got(want.size(), kUnwritten), got_rm(src.size(), kUnwritten);
      k::active_table().attn_bf16_panels(c.rows, c.cols, src.data(), c.ld, c.w, got.data(),
                                         got_rm.data());
      CHECK(got == want);
      CHECK(got_rm == want_rm);
      std::vector<uint16_t> alone(want.size(), kUnwritten);  // no row-major copy
      k::active_table().attn_bf16_panels(c.rows, c.cols, src.data(), c.ld, c.w, alone.data(),
                                         nullptr);
      CHECK(alone == want);
    });
  }
}

TEST_CASE("bf16 attention: within bf16's precision of the float32 reference, every path") {
  std::mt19937 g(21);
  double worst = 0;
  for (const Shape5& s : kShapes)
    for (int vi = 0; vi < 7; ++vi) {
      const Variant va = variant(vi);
      CAPTURE(s.batch);
      CAPTURE(s.L);
      CAPTURE(s.S);
      CAPTURE(s.E);
      CAPTURE(s.Ev);
      CAPTURE(vi);
      const Problem16 pr(s, va.causal, va.mask_kind, va.dropout, g);
      const Dout dout(s, g);
      const Result want = reference(pr.f, dout.x);
      const Bounds b = bf16_bounds(pr.f, want, dout.x);
      for_each_isa([&](const std::string&) {
        const Result16 got = run16(pr, dout.bits);
        worst = std::max({worst, check_within(widen(got.out.x), want.out.x, b.out, "out"),
                          check_within(got.dq.x, want.dq.x, b.dq, "dq"),
                          check_within(got.dk.x, want.dk.x, b.dk, "dk"),
                          check_within(got.dv.x, want.dv.x, b.dv, "dv")});
        check_near(got.lse, want.lse, 1.0 / 16384, "lse");  // float32, S from E-term chains
        // The gradients are bf16 values in float32: rounded once, at the end.
        for (const Out* o : {&got.dq, &got.dk, &got.dv}) {
          std::vector<float> r = o->x;
          round_in_place(r);
          CHECK(same_bits(r, o->x));
        }
      });
    }
  MESSAGE("bf16 attention: the largest error is " << worst << " of its bound");
}

namespace {

// ---- the algorithm written plainly
// ---------------------------------------------------------------- kernels.h's bf16 formulas in the
// kernel's blocks (sdpa_bf16_tile_size) and order, with the active path's tile steps and
// gemm_bf16_ref for every product: no packing, no micro-tiles, no causal skips (a product the
// kernel skips only adds exact zeros here). The kernel must give these bits: the products' chains
// are the same on every path, so only packing, panel offsets, skipped corners and the rounding
// points are under test.
void plain_forward(const k::AttnProblemBf16& p, Result16& r) {
  const k::KernelTable& t = k::active_table();
  const k::AttnTileSize ts = k::sdpa_bf16_tile_size();
  std::vector<float> s(size_t(ts.br * ts.bc));
  std::vector<uint16_t> p16(s.size());
  std::vector<uint8_t> keep(s.size());
  k::Scratch o_buf, stat_buf;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t i0 = 0; i0 < p.L; i0 += ts.br) {
      const int64_t rows = std::min(ts.br, p.L - i0);
      const k::attn::OnlineSoftmax st(o_buf, stat_buf, ts.br, rows, p.Ev);
      for (int64_t j0 = 0; j0 < (p.causal ? std::min(p.S, i0 + rows) : p.S); j0 += ts.bc) {
        const int64_t cols = std::min(ts.bc, p.S - j0);
        k::gemm_bf16_ref(rows, cols, p.E, p.q.at(n, i0), p.q.ld, 1, p.k.at(n, j0), 1, p.k.ld, 0.f,
                         s.data(), ts.bc);
        t.attn_fwd_tile(k::attn::make_tile(p, n, i0, j0, rows, cols, ts.bc, keep.data()), s.data(),
                        st.m, st.l, st.alpha);
        for (int64_t i = 0; i < rows; ++i)
          k::f32_to_bf16_ref(cols, s.data() + i * ts.bc, p16.data() + i * ts.bc);
        st.rescale();
        k::gemm_bf16_ref(rows, p.Ev, cols, p16.data(), ts.bc, 1, p.v.at(n, j0), p.v.ld, 1, 1.f,
                         st.o, p.Ev);
      }
      st.finish(r.lse.data() + n * p.L + i0);
      for (int64_t i = 0; i < rows; ++i)
        k::f32_to_bf16_ref(p.Ev, st.o + i * p.Ev, r.out.op().at(n, i0 + i));
    }
}

void plain_backward(const k::AttnProblemBf16& p, const Out16& dout, Result16& r) {
  const k::KernelTable& t = k::active_table();
  const k::AttnTileSize ts = k::sdpa_bf16_tile_size();
  std::vector<float> s(size_t(ts.br * ts.bc)), dp(s.size()), D(size_t(std::max<int64_t>(p.L, 1)));
  std::vector<uint16_t> p16(s.size()), ds16(s.size());
  std::vector<uint8_t> keep(s.size());
  const k::MatrixBatch<const uint16_t> go = dout.cop();
  const k::MatrixBatch<float> dq = r.dq.op(), dk = r.dk.op(), dv = r.dv.op();
  std::fill(dk.base, dk.base + r.dk.x.size(), 0.f);
  std::fill(dv.base, dv.base + r.dv.x.size(), 0.f);
  for (int64_t n = 0; n < p.batch; ++n) {
    k::attn::backward_start(p, r.out.cop(), go, dq, n, D.data());
    for (int64_t j0 = 0; j0 < p.S; j0 += ts.bc)
      for (int64_t i0 = p.causal ? j0 / ts.br * ts.br : 0; i0 < p.L; i0 += ts.br) {
        const int64_t rows = std::min(ts.br, p.L - i0), cols = std::min(ts.bc, p.S - j0);
        k::gemm_bf16_ref(rows, cols, p.E, p.q.at(n, i0), p.q.ld, 1, p.k.at(n, j0), 1, p.k.ld, 0.f,
                         s.data(), ts.bc);
        k::gemm_bf16_ref(rows, cols, p.Ev, go.at(n, i0), go.ld, 1, p.v.at(n, j0), 1, p.v.ld, 0.f,
                         dp.data(), ts.bc);
        t.attn_bwd_tile(k::attn::make_tile(p, n, i0, j0, rows, cols, ts.bc, keep.data()), s.data(),
                        dp.data(), r.lse.data() + n * p.L + i0, D.data() + i0);
        for (int64_t i = 0; i < rows; ++i) {
          k::f32_to_bf16_ref(cols, s.data() + i * ts.bc, p16.data() + i * ts.bc);
          k::f32_to_bf16_ref(cols, dp.data() + i * ts.bc, ds16.data() + i * ts.bc);
        }
        k::gemm_bf16_ref(cols, p.Ev, rows, p16.data(), 1, ts.bc, go.at(n, i0), go.ld, 1, 1.f,
                         dv.at(n, j0), dv.ld);
        k::gemm_bf16_ref(cols, p.E, rows, ds16.data(), 1, ts.bc, p.q.at(n, i0), p.q.ld, 1, 1.f,
                         dk.at(n, j0), dk.ld);
        k::gemm_bf16_ref(rows, p.E, cols, ds16.data(), ts.bc, 1, p.k.at(n, j0), p.k.ld, 1, 1.f,
                         dq.at(n, i0), dq.ld);
      }
  }
  for (Out* o : {&r.dq, &r.dk, &r.dv}) round_in_place(o->x);  // each element's one rounding
}

}  // namespace

TEST_CASE("bf16 attention: each path gives the bits of its algorithm written plainly") {
  std::mt19937 g(22);
  // pad 0: rows of an even E start on 4 bytes, where packing moves pairs through the float
  // routines; pad 5 (odd): pair by pair.
  const std::pair<Shape5, int64_t> shapes[] = {
      {{2, 70, 130, 17, 33}, 5},
      {{1, 130, 70, 63, 64}, 5},
      {{2, 64, 64, 64, 64}, 0},
      {{1, 33, 31, 3, 5}, 5},
      {{2, 129, 129, 32, 32}, 0},
      {{1, 200, 200, 16, 48}, 0},
      // one query row, k and v read in place (not causal; the causal variants take the tiles)
      {{3, 1, 130, 17, 33}, 5},
      {{12, 1, 255, 64, 64}, 0},
      {{2, 1, 1, 64, 64}, 0}};
  // Named references, not a structured binding: clang 14 cannot capture one in a lambda
  // (CAPTURE's, for_each_isa's).
  for (const auto& row : shapes)
    for (int vi = 0; vi < 7; ++vi) {
      const Shape5& s = row.first;
      const int64_t pad = row.second;
      const Variant va = variant(vi);
      CAPTURE(s.L);
      CAPTURE(s.S);
      CAPTURE(s.E);
      CAPTURE(s.Ev);
      CAPTURE(vi);
      const Problem16 pr(s, va.causal, va.mask_kind, va.dropout, g, pad);
      const Dout dout(s, g);
      for_each_isa([&](const std::string&) {
        const Result16 got = run16(pr, dout.bits);
        Result16 want(s);
        plain_forward(pr.p, want);
        plain_backward(pr.p, dout.bits, want);
        CHECK(got.out.x == want.out.x);
        CHECK(same_bits(got.lse, want.lse));
        CHECK(same_bits(got.dq.x, want.dq.x));
        CHECK(same_bits(got.dk.x, want.dk.x));
        CHECK(same_bits(got.dv.x, want.dv.x));
      });
    }
}

TEST_CASE("bf16 attention is bit-identical for 1, 2 and 3 threads, every path") {
  std::mt19937 g(23);
  const int before = tg::num_threads();
  for (int vi = 0; vi < 4; ++vi) {
    CAPTURE(vi);
    const Shape5 s = vi == 2   ? Shape5{3, 90, 70, 33, 17}
                     : vi == 3 ? Shape5{12, 1, 300, 64, 64}  // one query row: k, v in place
                               : Shape5{5, 150, 150, 64, 64};
    const Problem16 pr(s, vi == 0, vi == 1 ? 1 : 0, vi >= 1, g, vi == 2 ? 5 : 0);
    const Dout dout(s, g);
    for_each_isa([&](const std::string&) {
      tg::set_num_threads(1);
      const Result16 one = run16(pr, dout.bits);
      for (int nt : {2, 3}) {
        CAPTURE(nt);
        tg::set_num_threads(nt);
        CHECK(run16(pr, dout.bits) == one);
      }
    });
  }
  tg::set_num_threads(before);
}

TEST_CASE("bf16 attention: a row no key reaches gives out 0, lse -inf and zero gradients") {
  std::mt19937 g(24);
  const Problem16 pr({2, 9, 70, 16, 16}, false, 1, false, g);  // mask row 2 is all -inf
  const Dout dout({2, 9, 70, 16, 16}, g);
  for_each_isa([&](const std::string&) {
    const Result16 r = run16(pr, dout.bits);
    check_row_no_key_reaches(r.lse, r.out.x, r.dq.x);
  });
}

TEST_CASE("bf16 attention: flex attention's hook is refused (flex_attention is float32/64 only)") {
  struct NoMod : k::AttnScoreMod {
    k::TileInfo tile(int64_t, int64_t, int64_t) const override { return {}; }
    bool rewrite(int64_t, int64_t, int64_t, int64_t, int64_t, float, float*, int64_t,
                 float*) const override {
      return false;
    }
    double element(int64_t, int64_t, int64_t, double x, double*) const override { return x; }
  } mod;
  std::mt19937 g(25);
  Problem16 pr({1, 4, 4, 2, 2}, false, 0, false, g);
  pr.p.mod = &mod;
  Result16 r(pr.f.d);
  CHECK_THROWS_AS(k::sdpa_forward_bf16(pr.p, r.out.op(), r.lse.data()), std::invalid_argument);
}
