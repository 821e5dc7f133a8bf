// Scaled-dot-product attention, the reference: the formulas of kernels.h row by row, one query row
// at a time with O(S) memory, sums in double. It is the specification, the float64 path (gradient
// checks) and the oracle the fused driver (attention.cpp) is tested against. Also the scalar
// table's two tile steps, which the fused driver runs on the "scalar" path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

bool kept(const uint64_t* bits, int64_t b) { return (bits[b >> 6] >> (b & 63)) & 1u; }

// The dropout factor of element (n, i, j): keep_scale or 0, or 1 without dropout.
template <class T>
double keep_factor(const AttnProblem<T>& p, int64_t n, int64_t i, int64_t j) {
  if (p.keep_bits == nullptr) return 1.0;
  return kept(p.keep_bits, (n * p.L + i) * p.S + j) ? double(p.keep_scale) : 0.0;
}

// x[j] = scale · q[i]·k[j] + mask[i, j] for every key j, -inf past the diagonal when causal, or
// with a flex hook x[j] = mod(scale · q[i]·k[j]) and dx[j] = dx/d(q[i]·k[j]) (scale without one).
// Returns max_j x[j] (NaN if any x is NaN).
template <class T>
double scores_row(const AttnProblem<T>& p, int64_t n, int64_t i, std::vector<double>& x,
                  std::vector<double>& dx) {
  const T* q = p.q.at(n, i);
  double mx = kNegInf;
  for (int64_t j = 0; j < p.S; ++j) {
    if (p.causal && j > i) {
      x[size_t(j)] = kNegInf;
      continue;
    }
    const T* k = p.k.at(n, j);
    double dot = 0;
    for (int64_t e = 0; e < p.E; ++e) dot += double(q[e]) * double(k[e]);
    double v = double(p.scale) * dot, g = 1;
    if (p.mask.base != nullptr) v += double(p.mask.at(n, i)[j * p.mask_cs]);
    if (p.mod != nullptr) v = p.mod->element(n, i, j, v, &g);
    dx[size_t(j)] = double(p.scale) * g;
    x[size_t(j)] = v;
    mx = std::isnan(v) || std::isnan(mx) ? std::numeric_limits<double>::quiet_NaN()
                                         : std::max(mx, v);
  }
  return mx;
}

template <class T>
void forward_t(const AttnProblem<T>& p, MatrixBatch<T> out, T* lse) {
  std::vector<double> x(size_t(p.S)), dx(size_t(p.S)), acc(size_t(p.Ev));
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t i = 0; i < p.L; ++i) {
      T* o = out.at(n, i);
      const double mx = scores_row(p, n, i, x, dx);
      if (mx == kNegInf) {  // no key reaches this row
        std::fill(o, o + p.Ev, T(0));
        lse[n * p.L + i] = T(kNegInf);
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < p.S; ++j) sum += std::exp(x[size_t(j)] - mx);
      const double l = mx + std::log(sum);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < p.S; ++j) {
        const double w = std::exp(x[size_t(j)] - l) * keep_factor(p, n, i, j);
        if (w == 0) continue;
        const T* v = p.v.at(n, j);
        for (int64_t e = 0; e < p.Ev; ++e) acc[size_t(e)] += w * double(v[e]);
      }
      for (int64_t e = 0; e < p.Ev; ++e) o[e] = T(acc[size_t(e)]);
      lse[n * p.L + i] = T(l);
    }
}

// Per row i, with P[j] = exp(x[j] − lse[i]) and D = dout[i]·out[i]:
//   dv[j] += P[j]·keep · dout[i];  dS = dx[j] · P[j] · (dout[i]·v[j] · keep − D)
//   dq[i] += dS · k[j];  dk[j] += dS · q[i]
template <class T>
void backward_t(const AttnProblem<T>& p, MatrixBatch<const T> out, MatrixBatch<const T> dout,
                const T* lse, MatrixBatch<T> dq, MatrixBatch<T> dk, MatrixBatch<T> dv) {
  std::vector<double> x(size_t(p.S)), dx(size_t(p.S)), dqi(size_t(p.E));
  std::vector<double> dks(size_t(p.S * p.E)), dvs(size_t(p.S * p.Ev));
  for (int64_t n = 0; n < p.batch; ++n) {
    std::fill(dks.begin(), dks.end(), 0.0);
    std::fill(dvs.begin(), dvs.end(), 0.0);
    for (int64_t i = 0; i < p.L; ++i) {
      std::fill(dqi.begin(), dqi.end(), 0.0);
      const double l = double(lse[n * p.L + i]);
      const T* go = dout.at(n, i);
      const T* q = p.q.at(n, i);
      if (l != kNegInf) {
        scores_row(p, n, i, x, dx);
        const T* o = out.at(n, i);
        double D = 0;
        for (int64_t e = 0; e < p.Ev; ++e) D += double(go[e]) * double(o[e]);
        for (int64_t j = 0; j < p.S; ++j) {
          const double P = std::exp(x[size_t(j)] - l), kf = keep_factor(p, n, i, j);
          if (P == 0) continue;
          const T* v = p.v.at(n, j);
          const T* k = p.k.at(n, j);
          double dpv = 0;
          for (int64_t e = 0; e < p.Ev; ++e) {
            dvs[size_t(j * p.Ev + e)] += P * kf * double(go[e]);
            dpv += double(go[e]) * double(v[e]);
          }
          const double ds = dx[size_t(j)] * P * (dpv * kf - D);
          for (int64_t e = 0; e < p.E; ++e) {
            dqi[size_t(e)] += ds * double(k[e]);
            dks[size_t(j * p.E + e)] += ds * double(q[e]);
          }
        }
      }
      T* g = dq.at(n, i);
      for (int64_t e = 0; e < p.E; ++e) g[e] = T(dqi[size_t(e)]);
    }
    for (int64_t j = 0; j < p.S; ++j) {
      T* gk = dk.at(n, j);
      T* gv = dv.at(n, j);
      for (int64_t e = 0; e < p.E; ++e) gk[e] = T(dks[size_t(j * p.E + e)]);
      for (int64_t e = 0; e < p.Ev; ++e) gv[e] = T(dvs[size_t(j * p.Ev + e)]);
    }
  }
}

// x[r, c] of a tile, -inf where the causal mask removes it.
float tile_score(const AttnTile& t, const float* s, int64_t r, int64_t c) {
  if (t.causal && c > r + t.diag) return -std::numeric_limits<float>::infinity();
  float x = t.scale * s[r * t.ld + c];
  if (t.mask != nullptr) x += t.mask[r * t.mask_ld + c * t.mask_cs];
  return x;
}
float tile_keep(const AttnTile& t, int64_t r, int64_t c) {
  if (t.keep == nullptr) return 1.f;
  return t.keep[r * t.keep_ld + c] ? t.keep_scale : 0.f;
}

}  // namespace

void sdpa_forward_ref(const AttnProblem<float>& p, MatrixBatch<float> out, float* lse) {
  forward_t(p, out, lse);
}
void sdpa_backward_ref(const AttnProblem<float>& p, MatrixBatch<const float> out,
                       MatrixBatch<const float> dout, const float* lse, MatrixBatch<float> dq,
                       MatrixBatch<float> dk, MatrixBatch<float> dv) {
  backward_t(p, out, dout, lse, dq, dk, dv);
}
void sdpa_forward(const AttnProblem<double>& p, MatrixBatch<double> out, double* lse) {
  forward_t(p, out, lse);
}
void sdpa_backward(const AttnProblem<double>& p, MatrixBatch<const double> out,
                   MatrixBatch<const double> dout, const double* lse, MatrixBatch<double> dq,
                   MatrixBatch<double> dk, MatrixBatch<double> dv) {
  backward_t(p, out, dout, lse, dq, dk, dv);
}

void attn_fwd_tile_ref(const AttnTile& t, float* s, float* m, float* l, float* alpha) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < t.rows; ++r) {
    float mx = m[r];
    for (int64_t c = 0; c < t.cols; ++c) mx = std::max(mx, tile_score(t, s, r, c));
    float* sr = s + r * t.ld;
    if (mx == ninf) {  // nothing reaches this row yet
      for (int64_t c = 0; c < t.cols; ++c) sr[c] = 0.f;
      alpha[r] = 1.f;
      continue;
    }
    float sum = 0.f;
    for (int64_t c = 0; c < t.cols; ++c) {
      const float e = std::exp(tile_score(t, s, r, c) - mx);
      sum += e;
      sr[c] = e * tile_keep(t, r, c);
    }
    alpha[r] = std::exp(m[r] - mx);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = mx;
  }
}

void attn_bwd_tile_ref(const AttnTile& t, float* s, float* dp, const float* lse, const float* D) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < t.rows; ++r) {
    float* sr = s + r * t.ld;
    float* dr = dp + r * t.ld;
    for (int64_t c = 0; c < t.cols; ++c) {
      const float P = lse[r] == ninf ? 0.f : std::exp(tile_score(t, s, r, c) - lse[r]);
      const float kf = tile_keep(t, r, c);
      dr[c] = t.scale * (P * (dr[c] * kf - D[r]));
      sr[c] = P * kf;
    }
  }
}

void attn_bf16_panels_ref(int64_t rows, int64_t cols, const float* src, int64_t ld, int64_t w,
                          uint16_t* panels, uint16_t* rm) {
  const int64_t kp = (rows + 1) / 2, panel = w * 2 * kp;
  for (int64_t c = 0; c < (cols + w - 1) / w * w; ++c)
    for (int64_t r = 0; r < 2 * kp; ++r) {
      uint16_t h = 0;
      if (r < rows && c < cols) f32_to_bf16_ref(1, src + r * ld + c, &h);
      if (r < rows && c < cols && rm != nullptr) rm[r * ld + c] = h;
      panels[c / w * panel + ((r / 2) * w + c % w) * 2 + r % 2] = h;
    }
}

}  // namespace tg::kernels
