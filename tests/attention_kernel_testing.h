// Shared by the fused attention kernel tests (test_attention_kernels.cpp in float32,
// test_attention_bf16_kernels.cpp in bfloat16): problem sets laid out in memory as the op lays
// them out (strided rows, matrices out of order, broadcast masks, dropout bits), result buffers,
// and the elementwise closeness check.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "tests/kernel_testing.h"

namespace tg::testing::attention {

constexpr float kInf = std::numeric_limits<float>::infinity();

// |got − want| <= rel · (scale + |want|) elementwise, with scale the largest |want|: the float
// kernel against the double-accumulating reference. Infinities and NaN must match exactly.
inline void check_near(const std::vector<float>& got, const std::vector<float>& want, double rel,
                       const std::string& what) {
  double scale = 0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, double(std::fabs(w)));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isfinite(want[i])
                        ? std::fabs(double(got[i]) - want[i]) <= rel * (scale + std::fabs(want[i]))
                        : (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
    if (!ok && bad++ < 3) {
      INFO(what << "[" << i << "]: got " << got[i] << " want " << want[i]);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements differ");
}

struct Shape5 {
  int64_t batch, L, S, E, Ev;
};

// One problem set in memory: q, k, v in strided layouts (rows padded by `pad`, 5 unless told,
// matrices not in order), an optional additive mask, optional dropout bits. Masks, as the op
// broadcasts them: 1 one [L, S] for every problem, 2 one row per problem (ld 0), 3 one column per
// problem (an [L, 1] mask: column stride 0), 4 one value for everything (ld 0, column stride 0).
struct Problem {
  Shape5 d;
  std::vector<float> q, k, v, mask;
  std::vector<int64_t> qo, ko, vo, mo;
  int64_t qld, kld, vld;
  std::vector<uint64_t> bits;
  tg::kernels::AttnProblem<float> p;

  Problem(Shape5 s, bool causal, int mask_kind, bool dropout, std::mt19937& g, int64_t pad = 5)
      : d(s) {
    qld = s.E + pad, kld = s.E + pad, vld = s.Ev + pad;
    q = randv(g, s.batch * s.L * qld + 1), k = randv(g, s.batch * s.S * kld + 1);
    v = randv(g, s.batch * s.S * vld + 1);
    for (int64_t n = 0; n < s.batch; ++n) {  // matrices in reverse order
      qo.push_back((s.batch - 1 - n) * s.L * qld);
      ko.push_back((s.batch - 1 - n) * s.S * kld);
      vo.push_back((s.batch - 1 - n) * s.S * vld);
    }
    p.batch = s.batch, p.L = s.L, p.S = s.S, p.E = s.E, p.Ev = s.Ev;
    p.scale = 1.f / std::sqrt(float(std::max<int64_t>(s.E, 1)));
    p.causal = causal;
    p.q = {q.data(), qld, qo.data()}, p.k = {k.data(), kld, ko.data()};
    p.v = {v.data(), vld, vo.data()};
    if (mask_kind == 1) {  // one [L, S] mask for every problem, a row with no key left
      mask = randv(g, s.L * s.S, -1.f, 1.f);
      for (size_t i = 0; i < mask.size(); i += 4) mask[i] = -kInf;
      if (s.L > 2)
        for (int64_t j = 0; j < s.S; ++j) mask[size_t(2 * s.S + j)] = -kInf;
      mo.assign(size_t(s.batch), 0);
      p.mask = {mask.data(), s.S, mo.data()};
    } else if (mask_kind == 2) {  // one row per problem, broadcast over the queries (ld 0)
      mask = randv(g, s.batch * s.S, -3.f, 0.f);
      for (int64_t n = 0; n < s.batch; ++n) mo.push_back(n * s.S);
      p.mask = {mask.data(), 0, mo.data()};
    } else if (mask_kind == 3) {  // one value per query row, some rows removed entirely
      mask = randv(g, s.batch * s.L, -3.f, 3.f);
      for (size_t i = 1; i < mask.size(); i += 3) mask[i] = -kInf;
      for (int64_t n = 0; n < s.batch; ++n) mo.push_back(n * s.L);
      p.mask = {mask.data(), 1, mo.data()}, p.mask_cs = 0;
    } else if (mask_kind == 4) {
      mask = {-1.5f};
      mo.assign(size_t(s.batch), 0);
      p.mask = {mask.data(), 0, mo.data()}, p.mask_cs = 0;
    }
    if (dropout) {
      bits.assign(size_t((s.batch * s.L * s.S + 63) / 64), 0);
      for (auto& w : bits) w = (uint64_t(g()) << 32) | g();
      p.keep_bits = bits.data(), p.keep_scale = 1.f / 0.7f;
    }
  }
};

// Dense [batch, rows, cols] output buffers.
struct Out {
  std::vector<float> x;
  std::vector<int64_t> off;
  int64_t ld;
  Out(int64_t batch, int64_t rows, int64_t cols) : x(size_t(batch * rows * cols), NAN), ld(cols) {
    for (int64_t n = 0; n < batch; ++n) off.push_back(n * rows * cols);
  }
  tg::kernels::MatrixBatch<float> op() { return {x.data(), ld, off.data()}; }
  tg::kernels::MatrixBatch<const float> cop() const { return {x.data(), ld, off.data()}; }
};

struct Result {
  Out out, dq, dk, dv;
  std::vector<float> lse;
  explicit Result(const Shape5& s)
      : out(s.batch, s.L, s.Ev),
        dq(s.batch, s.L, s.E),
        dk(s.batch, s.S, s.E),
        dv(s.batch, s.S, s.Ev),
        lse(size_t(s.batch * s.L)) {}
};

// A [2, 9, S, 16, 16] problem with mask kind 1 (Problem): its row 2 reaches no key, so out 0,
// lse -inf and a zero dq there, in both problems (out in float32 or bf16 bits: 0 either way).
template <class OutT>
void check_row_no_key_reaches(const std::vector<float>& lse, const std::vector<OutT>& out,
                              const std::vector<float>& dq) {
  for (int64_t n = 0; n < 2; ++n) {
    CHECK(lse[size_t(n * 9 + 2)] == -kInf);
    for (int64_t e = 0; e < 16; ++e) {
      CHECK(out[size_t((n * 9 + 2) * 16 + e)] == 0);
      CHECK(dq[size_t((n * 9 + 2) * 16 + e)] == 0.f);
    }
  }
}

}  // namespace tg::testing::attention
