// The fused attention kernel (core/kernels/attention.cpp) on every path this machine runs,
// against the row-by-row reference (attention_ref.cpp): its two tile steps alone, then the whole
// forward and backward on shapes at and around the block edges, with causal, additive and
// broadcast masks, rows no key reaches, dropout bits and strided operands; and the same bits for
// 1, 2 and 3 threads. Built into test_kernels, so NEON runs it under qemu too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "tests/attention_kernel_testing.h"
#include "tests/kernel_testing.h"

namespace k = tg::kernels;
using tg::testing::for_each_isa;
using tg::testing::randv;
using namespace tg::testing::attention;

namespace {

// ---- the tile steps -----------------------------------------------------------------------------

struct TileCase {
  int64_t rows, cols;
  bool mask, causal, keep;
  int64_t diag;
  float scale = 0.37f;  // 30: scores down to -240 below the max, past exp's flush to 0
  int64_t mask_cs = 1;  // 0: one mask value per row for every key (a broadcast last dim)
};

TEST_CASE("attention tile steps: every path against the scalar reference") {
  std::mt19937 g(7);
  const TileCase cases[] = {{1, 1, false, false, false, 0},
                            {5, 7, false, true, false, 0},
                            {8, 16, true, false, false, 0},
                            {17, 33, true, true, true, -3},
                            {66, 64, false, true, true, 0},
                            {64, 64, true, true, false, 5},
                            {3, 9, true, false, true, 0},
                            {12, 40, false, true, false, -20},
                            {9, 70, true, true, true, 2, 30.f},
                            {8, 16, true, false, false, 0, 0.37f, 0},
                            {17, 33, true, true, true, -3, 0.37f, 0}};
  for (const TileCase& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.causal);
    CAPTURE(c.diag);
    CAPTURE(c.mask_cs);
    const int64_t ld = c.cols + 3;
    const std::vector<float> s0 = randv(g, c.rows * ld, -4.f, 4.f);
    std::vector<float> mask = randv(g, c.rows * c.cols, -2.f, 2.f);
    for (size_t i = 0; i < mask.size(); i += 5) mask[i] = -kInf;  // some keys removed
    std::vector<uint8_t> keep(size_t(c.rows * c.cols));
    for (auto& b : keep) b = uint8_t(g() % 3 != 0);
    k::AttnTile t;
    t.rows = c.rows, t.cols = c.cols, t.ld = ld, t.scale = c.scale;
    if (c.mask)
      t.mask = mask.data(), t.mask_ld = c.mask_cs == 0 ? 1 : c.cols, t.mask_cs = c.mask_cs;
    t.causal = c.causal, t.diag = c.diag;
    if (c.keep) t.keep = keep.data(), t.keep_ld = c.cols, t.keep_scale = 1.25f;
    // Running statistics as a second tile would see them: some rows fresh (-inf, 0).
    std::vector<float> m0 = randv(g, c.rows, -1.f, 2.f), l0 = randv(g, c.rows, 0.5f, 3.f);
    for (size_t r = 0; r < m0.size(); r += 3) m0[r] = -kInf, l0[r] = 0.f;
    // The backward's lse is at least every score of its row (it is their log-sum-exp): take
    // the tile's own, from the reference's forward step, plus up to 2 (other tiles' keys).
    std::vector<float> lse(size_t(c.rows));
    {
      std::vector<float> s1 = s0, m1(size_t(c.rows), -kInf), l1(size_t(c.rows), 0.f), a1 = l1;
      k::attn_fwd_tile_ref(t, s1.data(), m1.data(), l1.data(), a1.data());
      const std::vector<float> extra = randv(g, c.rows, 0.f, 2.f);
      for (size_t r = 0; r < lse.size(); ++r) lse[r] = m1[r] + std::log(l1[r]) + extra[r];
    }
    const std::vector<float> D = randv(g, c.rows);
    std::vector<float> lse_some = lse;
    lse_some[0] = -kInf;  // a row no key reached
    const std::vector<float> dp0 = randv(g, c.rows * ld);

    std::vector<float> sw = s0, mw = m0, lw = l0, aw(size_t(c.rows));
    k::attn_fwd_tile_ref(t, sw.data(), mw.data(), lw.data(), aw.data());
    std::vector<float> sbw = s0, dpw = dp0;
    k::attn_bwd_tile_ref(t, sbw.data(), dpw.data(), lse_some.data(), D.data());
    for_each_isa([&](const std::string&) {
      const k::KernelTable& tab = k::active_table();
      std::vector<float> s = s0, m = m0, l = l0, a(size_t(c.rows));
      tab.attn_fwd_tile(t, s.data(), m.data(), l.data(), a.data());
      check_near(s, sw, 4e-7, "fwd P");
      CHECK(m == mw);  // a max: exact
      check_near(l, lw, 1e-6, "fwd l");
      check_near(a, aw, 4e-7, "fwd alpha");
      std::vector<float> sb = s0, dp = dp0;
      tab.attn_bwd_tile(t, sb.data(), dp.data(), lse_some.data(), D.data());
      check_near(sb, sbw, 4e-7, "bwd P");
      check_near(dp, dpw, 1e-6, "bwd dS");
    });
  }
}

// ---- the whole kernel ---------------------------------------------------------------------------

// Forward, then backward with a fixed dout, by the fused kernel or the reference.
Result run(const Problem& pr, bool reference, const std::vector<float>& dout) {
  Result r(pr.d);
  if (reference)
    k::sdpa_forward_ref(pr.p, r.out.op(), r.lse.data());
  else
    k::sdpa_forward(pr.p, r.out.op(), r.lse.data());
  Out go(pr.d.batch, pr.d.L, pr.d.Ev);
  go.x = dout;
  if (reference)
    k::sdpa_backward_ref(pr.p, r.out.cop(), go.cop(), r.lse.data(), r.dq.op(), r.dk.op(),
                         r.dv.op());
  else
    k::sdpa_backward(pr.p, r.out.cop(), go.cop(), r.lse.data(), r.dq.op(), r.dk.op(), r.dv.op());
  return r;
}

TEST_CASE("fused attention matches the reference: block edges, masks, dropout, strides") {
  std::mt19937 g(11);
  const Shape5 shapes[] = {{1, 1, 1, 1, 1},      {2, 7, 7, 8, 8},       {3, 64, 64, 64, 64},
                           {1, 65, 65, 80, 16},  {2, 129, 129, 64, 64}, {1, 300, 300, 8, 24},
                           {2, 70, 130, 16, 33}, {1, 130, 70, 64, 64},  {1, 5, 0, 4, 4}};
  for (const Shape5& s : shapes)
    for (int variant = 0; variant < 7; ++variant) {
      const bool causal = variant == 1 || variant == 4, dropout = variant >= 3 && variant != 5;
      const int mask_kind = variant == 2 ? 1 : variant == 3 ? 2 : variant >= 5 ? variant - 2 : 0;
      CAPTURE(s.batch);
      CAPTURE(s.L);
      CAPTURE(s.S);
      CAPTURE(s.E);
      CAPTURE(s.Ev);
      CAPTURE(variant);
      const Problem pr(s, causal, mask_kind, dropout, g);
      const std::vector<float> dout = randv(g, s.batch * s.L * s.Ev);
      const Result want = run(pr, true, dout);
      for_each_isa([&](const std::string&) {
        const Result got = run(pr, false, dout);
        check_near(got.out.x, want.out.x, 2e-6, "out");
        check_near(got.lse, want.lse, 1e-6, "lse");
        check_near(got.dq.x, want.dq.x, 1e-5, "dq");
        check_near(got.dk.x, want.dk.x, 1e-5, "dk");
        check_near(got.dv.x, want.dv.x, 1e-5, "dv");
      });
    }
}

// One query row (L == 1, not causal: each step of KV-cache generation) reads k and v in place
// (attention.cpp: forward_row); its out and lse must be the bits of the same row computed in a
// block of three rows by the tiled route, with every mask kind and dropout (the row's bits copied
// where L == 1 indexes them), on every path.
TEST_CASE("fused attention, one query row: k and v in place, the tiled route's bits") {
  std::mt19937 g(17);
  const Shape5 shapes[] = {{3, 3, 130, 17, 33},
                           {12, 3, 255, 64, 64},
                           {2, 3, 1, 64, 64},
                           {1, 3, 70, 0, 8},
                           {2, 3, 300, 64, 16}};
  for (const Shape5& s : shapes)
    for (int variant = 0; variant < 6; ++variant) {
      CAPTURE(s.S);
      CAPTURE(s.E);
      CAPTURE(variant);
      const Problem pr(s, false, variant % 5, variant == 5, g);
      Result three(pr.d);
      for_each_isa([&](const std::string&) {
        k::sdpa_forward(pr.p, three.out.op(), three.lse.data());
        k::AttnProblem<float> p1 = pr.p;  // the same offsets: row 0 of each problem
        p1.L = 1;
        std::vector<uint64_t> bits(size_t((s.batch * s.S + 63) / 64), 0);
        for (int64_t n = 0; n < s.batch && p1.keep_bits != nullptr; ++n)
          for (int64_t j = 0; j < s.S; ++j) {
            const int64_t from = n * s.L * s.S + j, to = n * s.S + j;
            bits[size_t(to / 64)] |= (pr.bits[size_t(from / 64)] >> (from % 64) & 1u) << (to % 64);
          }
        if (p1.keep_bits != nullptr) p1.keep_bits = bits.data();
        Out out(s.batch, 1, s.Ev);
        std::vector<float> lse(size_t(s.batch));
        k::sdpa_forward(p1, out.op(), lse.data());
        for (int64_t n = 0; n < s.batch; ++n) {
          CAPTURE(n);
          const float* want = three.out.x.data() + n * s.L * s.Ev;
          CHECK(std::memcmp(out.x.data() + n * s.Ev, want, size_t(s.Ev) * 4) == 0);
          CHECK(std::memcmp(&lse[size_t(n)], &three.lse[size_t(n * s.L)], 4) == 0);
        }
      });
    }
}

TEST_CASE("fused attention: a row no key reaches gives out 0, lse -inf and zero gradients") {
  std::mt19937 g(3);
  const Problem pr({2, 9, 70, 16, 16}, false, 1, false, g);  // mask row 2 is all -inf
  const std::vector<float> dout = randv(g, 2 * 9 * 16);
  for (bool reference : {true, false}) {
    CAPTURE(reference);
    const Result r = run(pr, reference, dout);
    check_row_no_key_reaches(r.lse, r.out.x, r.dq.x);
  }
}

TEST_CASE("fused attention is bit-identical for 1, 2 and 3 threads") {
  std::mt19937 g(5);
  const int before = tg::num_threads();
  for (int variant = 0; variant < 2; ++variant) {
    const Problem pr({5, 150, 150, 64, 64}, variant == 0, variant == 1 ? 1 : 0, variant == 1, g);
    const std::vector<float> dout = randv(g, 5 * 150 * 64);
    for_each_isa([&](const std::string&) {
      tg::set_num_threads(1);
      const Result one = run(pr, false, dout);
      for (int nt : {2, 3}) {
        CAPTURE(nt);
        tg::set_num_threads(nt);
        const Result r = run(pr, false, dout);
        CHECK(std::memcmp(r.out.x.data(), one.out.x.data(), one.out.x.size() * 4) == 0);
        CHECK(std::memcmp(r.lse.data(), one.lse.data(), one.lse.size() * 4) == 0);
        CHECK(std::memcmp(r.dq.x.data(), one.dq.x.data(), one.dq.x.size() * 4) == 0);
        CHECK(std::memcmp(r.dk.x.data(), one.dk.x.data(), one.dk.x.size() * 4) == 0);
        CHECK(std::memcmp(r.dv.x.data(), one.dv.x.data(), one.dv.x.size() * 4) == 0);
      }
    });
  }
  tg::set_num_threads(before);
}

}  // namespace
