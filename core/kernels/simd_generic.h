// Vector algorithms written once over a vector type V, compiled once per ISA (simdjson's
// src/generic/ pattern). avx2.cpp, avx512.cpp and neon.cpp each define `struct V` (below) and
// then include this file inside an anonymous namespace, so every ISA gets its own copy built with
// its own flags. No intrinsics here, and no #includes: the ISA file provides <cstring>, <cmath>,
// <cstdint>, <limits> and table.h before including it.
//
// V provides (W lanes of float; M is its lane-mask type):
//   load(p) store(p, v) set1(f) add sub mul div fma(a, b, c) = a*b + c  sqrt  min max
//   round_nearest(v)  ldexp_int(y, n) = y * 2^n for integer-valued n in [-150, 128]
//   ldexp_normal(y, n) = y * 2^n for integer-valued n in [-126, 127] (2^n a normal float)
//   hsum(v) hmax(v)   is_nan(v) -> M   lt(a, b) -> M   select(M, a, b) = M ? a : b
//   mask_u8(p) -> M (lane i set when p[i] != 0)   load_first(p, n): lanes [0, n) from p, then 0
//   bf16: load_bf16(p) round_bf16(v) store_bf16(p, v), pair_bf16(lo, hi) (kernels.h's rounding;
//   the ISA files say more)
// min(c, x) and max(c, x) must return x when x is NaN (x86 minps/maxps return the second operand
// for a NaN; NEON propagates NaN), which keeps NaN inputs NaN through exp's clamp.
//
// Tails: the last n % W elements are copied into a W-wide stack buffer, processed with the same
// vector code, and copied back, so each element's result does not depend on its position.
//
// Shape legend: see kernels.h.

template <class F>
inline void for_each_vec(int64_t n, F f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) f(i, V::W);
  if (i < n) f(i, n - i);
}

// Asks for the cache line 4 KiB past element i of an n-element array (clamped to its last one):
// loops that stream arrays from memory while doing real work per element (exp, AdamW's divides)
// run ahead of the hardware prefetcher this way. RW = 1: the line will be written.
template <int RW>
inline void prefetch_ahead(const float* base, int64_t i, int64_t n) {
  const int64_t j = i + 1024 < n ? i + 1024 : n - 1;
  __builtin_prefetch(base + j, RW, 3);
}

// Loads `cnt` lanes (cnt <= W) from p, padding the rest with `pad`.
inline V::T load_n(const float* p, int64_t cnt, float pad = 0.f) {
  if (cnt == V::W) return V::load(p);
  float buf[V::W];
  for (int i = 0; i < V::W; ++i) buf[i] = i < cnt ? p[i] : pad;
  return V::load(buf);
}
inline void store_n(float* p, V::T v, int64_t cnt) {
  if (cnt == V::W) return V::store(p, v);
  float buf[V::W];
  V::store(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(cnt) * sizeof(float));
}
inline V::M mask_n(const uint8_t* p, int64_t cnt) {
  if (cnt == V::W) return V::mask_u8(p);
  uint8_t buf[V::W] = {};
  std::memcpy(buf, p, static_cast<size_t>(cnt));
  return V::mask_u8(buf);
}

// ---- binary ops -----------------------------------------------------------------------------
inline V::T apply_op(BinOp op, V::T a, V::T b) {
  switch (op) {
    case BinOp::add:
      return V::add(a, b);
    case BinOp::sub:
      return V::sub(a, b);
    case BinOp::mul:
      return V::mul(a, b);
    case BinOp::div:
      return V::div(a, b);
  }
  return a;
}
// The switch sits outside the loop: one specialised loop per op.
template <BinOp OP>
void binary_op(int64_t n, const float* a, const float* b, float* out) {
  for_each_vec(n, [&](int64_t i, int64_t c) {
    store_n(out + i, apply_op(OP, load_n(a + i, c, 1.f), load_n(b + i, c, 1.f)), c);
  });
}
template <BinOp OP>
void binary_scalar_op(int64_t n, const float* a, float s, float* out) {
  const V::T vs = V::set1(s);
  for_each_vec(n, [&](int64_t i, int64_t c) {
    store_n(out + i, apply_op(OP, load_n(a + i, c, 1.f), vs), c);
  });
}
void binary_simd(BinOp op, int64_t n, const float* a, const float* b, float* out) {
  switch (op) {
    case BinOp::add:
      return binary_op<BinOp::add>(n, a, b, out);
    case BinOp::sub:
      return binary_op<BinOp::sub>(n, a, b, out);
    case BinOp::mul:
      return binary_op<BinOp::mul>(n, a, b, out);
    case BinOp::div:
      return binary_op<BinOp::div>(n, a, b, out);
  }
}
void binary_rowbcast_simd(BinOp op, int64_t rows, int64_t cols, const float* a, const float* b,
                          float* out) {
  for (int64_t r = 0; r < rows; ++r) binary_simd(op, cols, a + r * cols, b, out + r * cols);
}
void binary_scalar_simd(BinOp op, int64_t n, const float* a, float s, float* out) {
  switch (op) {
    case BinOp::add:
      return binary_scalar_op<BinOp::add>(n, a, s, out);
    case BinOp::sub:
      return binary_scalar_op<BinOp::sub>(n, a, s, out);
    case BinOp::mul:
      return binary_scalar_op<BinOp::mul>(n, a, s, out);
    case BinOp::div:
      return binary_scalar_op<BinOp::div>(n, a, s, out);
  }
}

// ---- exp --------------------------------------------------------------------------------------
// exp(x) = 2^n · exp(r), n = round(x / ln2), r = x - n·ln2 in [-ln2/2, ln2/2] (ln2 split in two
// parts so n·ln2_hi is exact). exp(r) is Cephes' degree-7 polynomial (1 + r + r²·P(r)). Returns
// exp(r) and sets n; exp_v and exp_nonpos_v differ only in how they apply 2^n.
inline V::T exp_reduced(V::T x, V::T& n) {
  n = V::round_nearest(V::mul(x, V::set1(1.44269504088896341f)));
  V::T r = V::fma(n, V::set1(-0.693145751953125f), x);
  r = V::fma(n, V::set1(-1.428606765330187045e-06f), r);
  V::T p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  return V::add(V::fma(p, V::mul(r, r), r), V::set1(1.f));
}
// All floats: the scale 2^n is applied in two halves so results down to the smallest denormal
// round correctly and n = 128 does not overflow early. Max relative error 2e-7 (tested against
// std::exp).
inline V::T exp_v(V::T x) {
  const V::T lo = V::set1(-104.f), hi = V::set1(89.f);  // beyond these, 0 and +inf
  // Lanes below lo (masked attention scores are -inf) give 0 outright: computed from lo, their
  // 2^n scaling would run through denormals, which cost a microcode assist per instruction on
  // x86 (softmax over a causal mask ran ~8x slower). exp(lo) rounds to 0 as well.
  const V::M under = V::lt(x, lo);  // false for NaN
  x = V::max(lo, V::min(hi, x));    // x second: NaN stays NaN
  x = V::select(under, V::set1(0.f), x);
  V::T n;
  const V::T y = exp_reduced(x, n);
  return V::select(under, V::set1(0.f), V::ldexp_int(y, n));
}
// x <= 0 (and -inf, NaN) only: the attention kernel's exp(score − max). A one-step 2^n, since
// n >= -126 once results below 2^-126 (x < -87.33) flush to 0: a weight that far below its row's
// largest cannot change the row's sums in float.
inline V::T exp_nonpos_v(V::T x) {
  const V::T lo = V::set1(-87.33f);
  const V::M under = V::lt(x, lo);  // -inf too; false for NaN
  V::T n;
  const V::T y = exp_reduced(V::max(lo, x), n);  // x second: NaN stays NaN
  return V::select(under, V::set1(0.f), V::ldexp_normal(y, n));
}
void exp_simd(int64_t n, const float* x, float* y) {
  for_each_vec(n, [&](int64_t i, int64_t c) { store_n(y + i, exp_v(load_n(x + i, c)), c); });
}

// ---- softmax --------------------------------------------------------------------------------
// softmax_forward: three passes over the row (max; exp and sum; scale by 1/sum).
void softmax_rows_simd(int64_t rows, int64_t cols, const float* x, float* y) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    V::T vmax = V::set1(ninf);
    for_each_vec(cols, [&](int64_t i, int64_t c) { vmax = V::max(vmax, load_n(xr + i, c, ninf)); });
    const float mx = V::hmax(vmax);
    if (mx == ninf) {  // all -inf: PyTorch gives NaN
      for (int64_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const V::T vm = V::set1(mx);
    V::T vsum = V::set1(0.f);
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      V::T e = exp_v(V::sub(load_n(xr + i, c, ninf), vm));  // padded lanes give exp(-inf) = 0
      store_n(yr + i, e, c);
      vsum = V::add(vsum, e);
    });
    const V::T inv = V::set1(1.f / V::hsum(vsum));
    for_each_vec(cols,
                 [&](int64_t i, int64_t c) { store_n(yr + i, V::mul(load_n(yr + i, c), inv), c); });
  }
}
// softmax_backward: dx = y ⊙ (dy − <y, dy>), from the saved output y.
void softmax_rows_backward_simd(int64_t rows, int64_t cols, const float* y, const float* dy,
                                float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    V::T vdot = V::set1(0.f);
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      vdot = V::fma(load_n(yr + i, c), load_n(dyr + i, c), vdot);
    });
    const V::T dot = V::set1(V::hsum(vdot));
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      store_n(dx + r * cols + i, V::mul(load_n(yr + i, c), V::sub(load_n(dyr + i, c), dot)), c);
    });
  }
}

// ---- softmax statistics (cross-entropy) ------------------------------------------------------
// softmax_rows' max and exp-sum passes, the same vector arithmetic, nothing stored. Each row's
// vectors start at its first column, so ld (the row stride) changes no bit.
void softmax_stats_rows_simd(int64_t rows, int64_t cols, int64_t ld, const float* x, float* mx,
                             float* sum) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    V::T vmax = V::set1(ninf);
    for_each_vec(cols, [&](int64_t i, int64_t c) { vmax = V::max(vmax, load_n(xr + i, c, ninf)); });
    const float m = V::hmax(vmax);
    const V::T vm = V::set1(m);
    V::T vsum = V::set1(0.f);
    // This pass reads the row from L2 (the max pass brought it there) and is bound by exp_v:
    // meanwhile bring the next row into L2, so that its max pass does not wait on memory.
    const bool next = r + 1 < rows;
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      if (next) __builtin_prefetch(xr + ld + i, 0, 2);
      vsum = V::add(vsum, exp_v(V::sub(load_n(xr + i, c, ninf), vm)));  // padding adds 0
    });
    mx[r] = m;
    // exp(-inf - -inf) is NaN; an empty row's padding would hide that, so say it explicitly.
    sum[r] = m == ninf ? std::numeric_limits<float>::quiet_NaN() : V::hsum(vsum);
  }
}
void exp_rows_scaled_simd(int64_t rows, int64_t cols, int64_t ld, const float* x, const float* mx,
                          const float* scale, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const V::T vm = V::set1(mx[r]), vs = V::set1(scale[r]);
    // Written for cross_entropy's backward, which overwrites x (out == x): fetch x for writing.
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      prefetch_ahead<1>(x, r * ld + i, rows * ld);
      const V::T e = exp_v(V::sub(load_n(x + r * ld + i, c), vm));
      store_n(out + r * ld + i, V::mul(e, vs), c);
    });
  }
}

// ---- masked_fill ----------------------------------------------------------------------------
void masked_fill_simd(int64_t rows, int64_t cols, const float* x, const uint8_t* mask,
                      int64_t mask_rows, float value, float* out) {
  const V::T vv = V::set1(value);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* mr = mask + (r % mask_rows) * cols;
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      store_n(out + r * cols + i, V::select(mask_n(mr + i, c), vv, load_n(x + r * cols + i, c)), c);
    });
  }
}

// ---- LayerNorm ------------------------------------------------------------------------------
// layernorm_forward: mean, biased variance (two passes, like the reference), normalise.
void layernorm_forward_simd(int64_t rows, int64_t C, const float* x, const float* weight,
                            const float* bias, float eps, float* out, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    V::T vs = V::set1(0.f);
    for_each_vec(C, [&](int64_t i, int64_t c) { vs = V::add(vs, load_n(xr + i, c)); });
    const float m = V::hsum(vs) / static_cast<float>(C);
    const V::T vm = V::set1(m);
    V::T vv = V::set1(0.f);
    for_each_vec(C, [&](int64_t i, int64_t c) {
      const V::T d = V::sub(load_n(xr + i, c, m), vm);  // padding with m adds 0
      vv = V::fma(d, d, vv);
    });
    const float s = 1.f / std::sqrt(V::hsum(vv) / static_cast<float>(C) + eps);
    const V::T vr = V::set1(s);
    for_each_vec(C, [&](int64_t i, int64_t c) {
      const V::T norm = V::mul(V::sub(load_n(xr + i, c), vm), vr);
      store_n(out + r * C + i, V::fma(norm, load_n(weight + i, c), load_n(bias + i, c)), c);
    });
    mean[r] = m;
    rstd[r] = s;
  }
}
// layernorm_backward (llm.c): dnorm = w ⊙ dout; dx += (dnorm − mean(dnorm) − norm·mean(dnorm ⊙
// norm)) · rstd; dweight += norm ⊙ dout; dbias += dout.
void layernorm_backward_simd(int64_t rows, int64_t C, const float* dout, const float* x,
                             const float* weight, const float* mean, const float* rstd, float* dx,
                             float* dweight, float* dbias) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dr = dout + r * C;
    const float* xr = x + r * C;
    const V::T vm = V::set1(mean[r]), vr = V::set1(rstd[r]);
    V::T a = V::set1(0.f), b = V::set1(0.f);
    for_each_vec(C, [&](int64_t i, int64_t c) {
      const V::T norm = V::mul(V::sub(load_n(xr + i, c), vm), vr);
      const V::T dnorm = V::mul(load_n(weight + i, c), load_n(dr + i, c));
      a = V::add(a, dnorm);
      b = V::fma(dnorm, norm, b);
    });
    const V::T dnorm_mean = V::set1(V::hsum(a) / static_cast<float>(C));
    const V::T dnorm_norm_mean = V::set1(V::hsum(b) / static_cast<float>(C));
    for_each_vec(C, [&](int64_t i, int64_t c) {
      const V::T d = load_n(dr + i, c);
      const V::T norm = V::mul(V::sub(load_n(xr + i, c), vm), vr);
      const V::T dnorm = V::mul(load_n(weight + i, c), d);
      store_n(dbias + i, V::add(load_n(dbias + i, c), d), c);
      store_n(dweight + i, V::fma(norm, d, load_n(dweight + i, c)), c);
      const V::T g = V::mul(V::sub(V::sub(dnorm, dnorm_mean), V::mul(norm, dnorm_norm_mean)), vr);
      store_n(dx + r * C + i, V::add(load_n(dx + r * C + i, c), g), c);
    });
  }
}

// ---- GELU (tanh form) -----------------------------------------------------------------------
// 0.5·(1 + tanh(u)) = sigmoid(2u), so gelu(x) = x / (1 + exp(−2u)) with no cancellation for
// negative x; gelu'(x) = s + 2·x·s·(1 − s)·du/dx with s = sigmoid(2u).
inline V::T gelu_sigmoid(V::T x) {
  const V::T x3 = V::mul(V::mul(x, x), x);
  const V::T u = V::mul(V::set1(0.7978845608028654f), V::fma(V::set1(0.044715f), x3, x));
  const V::T e = exp_v(V::mul(V::set1(-2.f), u));
  return V::div(V::set1(1.f), V::add(V::set1(1.f), e));
}
void gelu_forward_simd(int64_t n, const float* x, float* out) {
  for_each_vec(n, [&](int64_t i, int64_t c) {
    const V::T v = load_n(x + i, c);
    store_n(out + i, V::mul(v, gelu_sigmoid(v)), c);
  });
}
void gelu_backward_simd(int64_t n, const float* x, const float* dout, float* dx) {
  const V::T one = V::set1(1.f);
  for_each_vec(n, [&](int64_t i, int64_t c) {
    const V::T v = load_n(x + i, c);
    const V::T s = gelu_sigmoid(v);
    const V::T du =
        V::mul(V::set1(0.7978845608028654f), V::fma(V::set1(3.f * 0.044715f), V::mul(v, v), one));
    const V::T t = V::mul(V::mul(V::set1(2.f), v), V::mul(s, V::sub(one, s)));
    store_n(dx + i, V::mul(load_n(dout + i, c), V::fma(t, du, s)), c);
  });
}

// ---- reductions -----------------------------------------------------------------------------
// Four rows at a time share each load of x; each row keeps one accumulator, so a row's sum does
// not depend on which group (or thread) it falls in.
void gemv_rows_simd(int64_t rows, int64_t cols, const float* w, int64_t ldw, const float* x,
                    const float* b, float* y) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* w0 = w + r * ldw;
    V::T s0 = V::set1(0.f), s1 = s0, s2 = s0, s3 = s0;
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      const V::T xv = load_n(x + i, c);
      s0 = V::fma(load_n(w0 + i, c), xv, s0);
      s1 = V::fma(load_n(w0 + ldw + i, c), xv, s1);
      s2 = V::fma(load_n(w0 + 2 * ldw + i, c), xv, s2);
      s3 = V::fma(load_n(w0 + 3 * ldw + i, c), xv, s3);
    });
    const V::T sums[4] = {s0, s1, s2, s3};
    for (int k = 0; k < 4; ++k) y[r + k] = (b ? b[r + k] : 0.f) + V::hsum(sums[k]);
  }
  for (; r < rows; ++r) {
    V::T s = V::set1(0.f);
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      s = V::fma(load_n(w + r * ldw + i, c), load_n(x + i, c), s);
    });
    y[r] = (b ? b[r] : 0.f) + V::hsum(s);
  }
}
// ---- one row of A times B in place (table.h: SgemmRow) ---------------------------------------
// Lanes are columns of C, so each lane runs its column's chain in k order, one FMA a link, as the
// micro-kernels do; per K block of kc the chains start from zero and are then added to the sum of
// the blocks before. Axpys: four vectors of columns side by side (four chains in flight), each k
// one broadcast of a[p] and a row piece of B, the rows 8 ahead prefetched (B, a KV cache's values,
// streams from memory).
void sgemm_row_axpys_simd(int64_t n, int64_t k, int64_t kc, const float* a, const float* b,
                          int64_t ldb, float* c, bool accumulate) {
  constexpr int64_t G = 4;
  for (int64_t j0 = 0; j0 < n; j0 += G * V::W) {
    int64_t cnt[G];
    for (int64_t v = 0; v < G; ++v) {
      const int64_t left = n - j0 - v * V::W;
      cnt[v] = left < 0 ? 0 : left < V::W ? left : V::W;
    }
    V::T sum[G];
    for (int64_t v = 0; v < G; ++v)
      sum[v] = accumulate && cnt[v] > 0 ? load_n(c + j0 + v * V::W, cnt[v]) : V::set1(0.f);
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
      const int64_t p1 = k - p0 < kc ? k : p0 + kc;
      V::T acc[G];
      for (auto& x : acc) x = V::set1(0.f);
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t v = 0; v < G; ++v) __builtin_prefetch(b + (p + 8) * ldb + j0 + v * V::W);
        const V::T av = V::set1(a[p]);
        for (int64_t v = 0; v < G; ++v)
          if (cnt[v] > 0) acc[v] = V::fma(av, load_n(b + p * ldb + j0 + v * V::W, cnt[v]), acc[v]);
      }
      for (int64_t v = 0; v < G; ++v)
        sum[v] = p0 == 0 && !accumulate ? acc[v] : V::add(acc[v], sum[v]);
    }
    for (int64_t v = 0; v < G; ++v)
      if (cnt[v] > 0) store_n(c + j0 + v * V::W, sum[v], cnt[v]);
  }
}
// Dots: W rows of B side by side, 16 k at a time copied transposed into a small buffer (the
// packing's transposition without its panel in memory); AVX-512 transposes in registers instead
// (hence maybe_unused).
[[maybe_unused]] void sgemm_row_dots_simd(int64_t n, int64_t k, int64_t kc, const float* a,
                                          const float* b, int64_t ldb, float* c, bool accumulate) {
  constexpr int64_t kChunk = 16;
  float t[kChunk][V::W];
  for (int64_t j0 = 0; j0 < n; j0 += V::W) {
    const int64_t rows = n - j0 < V::W ? n - j0 : V::W;
    V::T sum = accumulate ? load_n(c + j0, rows) : V::set1(0.f);
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
      const int64_t p1 = k - p0 < kc ? k : p0 + kc;
      V::T acc = V::set1(0.f);
      for (int64_t p = p0; p < p1; p += kChunk) {
        const int64_t len = p1 - p < kChunk ? p1 - p : kChunk;
        for (int64_t i = 0; i < V::W; ++i)
          for (int64_t q = 0; q < len; ++q) t[q][i] = i < rows ? b[(j0 + i) * ldb + p + q] : 0.f;
        for (int64_t q = 0; q < len; ++q) acc = V::fma(V::set1(a[p + q]), V::load(t[q]), acc);
      }
      sum = p0 == 0 && !accumulate ? acc : V::add(acc, sum);
    }
    store_n(c + j0, sum, rows);
  }
}

void sum_rows_simd(int64_t rows, int64_t cols, const float* x, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    V::T s = V::set1(0.f);
    for_each_vec(cols, [&](int64_t i, int64_t c) { s = V::add(s, load_n(x + r * cols + i, c)); });
    out[r] = V::hsum(s);
  }
}
void max_rows_simd(int64_t rows, int64_t cols, const float* x, float* out) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    V::T m = V::set1(ninf), nan = V::set1(0.f);
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      const V::T v = load_n(x + r * cols + i, c, ninf);
      m = V::max(m, v);
      nan = V::select(V::is_nan(v), v, nan);  // remember a NaN: max may drop it
    });
    const float mx = V::hmax(m);
    const float nv = V::hsum(nan);
    out[r] = std::isnan(nv) ? nv : mx;
  }
}
// Each column adds its rows in order from 0, as the reference does. Rows of up to 1024 columns
// (a page or less) are walked one vector of columns at a time, the sum in a register. Wider
// rows go row by row into `out` (blocks of 4096 columns, 16 KiB, that stay in L1), so x streams
// in order: the vector walk would take a new page at every row.
void sum_cols_simd(int64_t rows, int64_t cols, const float* x, float* out) {
  if (cols <= 1024) {
    for_each_vec(cols, [&](int64_t i, int64_t c) {
      V::T s = V::set1(0.f);
      for (int64_t r = 0; r < rows; ++r) s = V::add(s, load_n(x + r * cols + i, c));
      store_n(out + i, s, c);
    });
    return;
  }
  constexpr int64_t kBlock = 4096;
  for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
    const int64_t w = cols - j0 < kBlock ? cols - j0 : kBlock;
    float* o = out + j0;
    for_each_vec(w, [&](int64_t i, int64_t c) { store_n(o + i, V::set1(0.f), c); });
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols + j0;
      for_each_vec(w, [&](int64_t i, int64_t c) {
        store_n(o + i, V::add(load_n(o + i, c), load_n(xr + i, c)), c);
      });
    }
  }
}

// ---- AdamW ----------------------------------------------------------------------------------
// The reference's operations in the reference's order, no FMA: bit-identical to adamw_ref.
void adamw_simd(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t step) {
  const float decay = static_cast<float>(1.0 - double(lr) * double(weight_decay));
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const V::T vdecay = V::set1(decay);
  const V::T step_size = V::set1(static_cast<float>(double(lr) / bc1));
  const V::T bc2_sqrt = V::set1(static_cast<float>(std::sqrt(bc2)));
  const V::T w1 = V::set1(1.f - beta1), w2 = V::set1(1.f - beta2), b2 = V::set1(beta2);
  const V::T veps = V::set1(eps);
  // Seven streams from memory: prefetch the four that are read.
  for_each_vec(n, [&](int64_t i, int64_t c) {
    prefetch_ahead<1>(p, i, n);
    prefetch_ahead<0>(g, i, n);
    prefetch_ahead<1>(m, i, n);
    prefetch_ahead<1>(v, i, n);
    const V::T gi = load_n(g + i, c);
    V::T pi = V::mul(load_n(p + i, c), vdecay);
    V::T mi = load_n(m + i, c);
    mi = V::add(mi, V::mul(w1, V::sub(gi, mi)));
    const V::T vi = V::add(V::mul(load_n(v + i, c), b2), V::mul(w2, V::mul(gi, gi)));
    const V::T denom = V::add(V::div(V::sqrt(vi), bc2_sqrt), veps);
    pi = V::sub(pi, V::mul(step_size, V::div(mi, denom)));
    store_n(p + i, pi, c);
    store_n(m + i, mi, c);
    store_n(v + i, vi, c);
  });
}

// ---- AdamW on bf16 ------------------------------------------------------------------------
// adamw_bf16_ref's operations in its order (V::fma where it has std::fma); whole vectors here,
// the tail through the reference.
void adamw_bf16_simd(int64_t n, uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v,
                     const AdamWBf16& s) {
  const V::T decay = V::set1(s.decay), w1 = V::set1(s.w1), b2 = V::set1(s.b2);
  const V::T w2 = V::set1(s.w2), bc2_sqrt = V::set1(s.bc2_sqrt), eps = V::set1(s.eps);
  const V::T step_size = V::set1(s.step_size);
  const auto r = [](V::T x) { return V::round_bf16(x); };
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const V::T gi = V::load_bf16(g + i), m0 = V::load_bf16(m + i);
    const V::T pi = r(V::mul(V::load_bf16(p + i), decay));
    const V::T mi = r(V::fma(w1, V::sub(gi, m0), m0));
    const V::T vi = r(V::add(r(V::mul(V::load_bf16(v + i), b2)), V::mul(V::mul(w2, gi), gi)));
    const V::T d = r(V::add(r(V::div(r(V::sqrt(vi)), bc2_sqrt)), eps));
    V::store_bf16(p + i, r(V::add(pi, V::div(V::mul(step_size, mi), d))));
    V::store_bf16(m + i, mi);
    V::store_bf16(v + i, vi);
  }
  adamw_bf16_ref(n - i, p + i, g + i, m + i, v + i, s);
}

// ---- MT19937 and Bernoulli draws ------------------------------------------------------------
// Plain integer loops (no V): the compiler vectorizes them with this ISA's flags.
inline uint32_t mt_mix(uint32_t u, uint32_t v) {
  const uint32_t y = (u & 0x80000000u) | (v & 0x7FFFFFFFu);
  return (y >> 1) ^ ((0u - (v & 1u)) & 0x9908B0DFu);  // branch-free
}
// s[i] = s[(i + 397) % 624] ^ mix(s[i], s[(i + 1) % 624]) in order, cut where the indices wrap:
// each loop then reads only words already final for this step (old ones in the first, words
// written >= 227 iterations earlier in the second), so its iterations are independent.
void mt19937_twist_simd(uint32_t* s) {
  constexpr int N = 624, M = 397;
  for (int i = 0; i < N - M; ++i) s[i] = s[i + M] ^ mt_mix(s[i], s[i + 1]);
  for (int i = N - M; i < N - 1; ++i) s[i] = s[i + M - N] ^ mt_mix(s[i], s[i + 1]);
  s[N - 1] = s[M - 1] ^ mt_mix(s[N - 1], s[0]);
}
void mt19937_temper_simd(int64_t n, const uint32_t* in, uint32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = mt19937_temper_word(in[i]);  // vectorized per ISA
}
// r < limit compared on 32-bit halves (limit <= 2^53), which every ISA vectorizes.
void bernoulli_words_simd(int64_t n, const uint32_t* w, uint64_t limit, float kept, float dropped,
                          float* out) {
  const uint32_t lim_hi = static_cast<uint32_t>(limit >> 32), lim_lo = static_cast<uint32_t>(limit);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t hi = w[2 * i] & 0x1FFFFFu, lo = w[2 * i + 1];
    const bool keep = (hi < lim_hi) | ((hi == lim_hi) & (lo < lim_lo));
    out[i] = keep ? kept : dropped;
  }
}

// ---- fused attention's tile steps (contract and scalar twins: table.h, attention_ref.cpp) -----
alignas(64) constexpr float kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static_assert(V::W <= 16, "kLaneIndex covers 16 lanes");

// Scores x = scale·s + mask of lanes [c, c + cnt) of tile row r, -inf in lanes past cnt and in
// those the causal mask removes (as the reference: a multiply, then an add). mr: the row's mask,
// its one value for every key when kMaskCol (t.mask_cs == 0: a mask whose last dim broadcasts).
template <bool kMaskCol>
inline V::T attn_scores(const AttnTile& t, int64_t r, const float* sr, const float* mr, int64_t c,
                        int64_t cnt) {
  V::T x = V::mul(V::set1(t.scale), load_n(sr + c, cnt));
  if (mr != nullptr) x = V::add(x, kMaskCol ? V::set1(*mr) : load_n(mr + c, cnt));
  int64_t visible = cnt;
  if (t.causal) {
    const int64_t last = r + t.diag + 1 - c;  // lanes [0, last) are on or left of the diagonal
    visible = last < 0 ? 0 : last < cnt ? last : cnt;
  }
  if (visible == V::W) return x;
  const V::M in = V::lt(V::load(kLaneIndex), V::set1(float(visible)));
  return V::select(in, x, V::set1(-std::numeric_limits<float>::infinity()));
}
// The dropout factors of lanes [c, c + cnt): keep_scale where kept, else 0.
inline V::T attn_keep(const AttnTile& t, const uint8_t* kr, int64_t c, int64_t cnt) {
  return V::select(mask_n(kr + c, cnt), V::set1(t.keep_scale), V::set1(0.f));
}

// The tile steps are compiled twice: with the mask's keys adjacent (or no mask), and with one
// mask value per row; the choice is made once per tile.
template <bool kMaskCol>
void attn_fwd_tile_v(const AttnTile& t, float* s, float* m, float* l, float* alpha) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < t.rows; ++r) {
    float* sr = s + r * t.ld;
    const float* mr = t.mask != nullptr ? t.mask + r * t.mask_ld : nullptr;
    const uint8_t* kr = t.keep != nullptr ? t.keep + r * t.keep_ld : nullptr;
    V::T vmax = V::set1(m[r]);
    for_each_vec(t.cols, [&](int64_t c, int64_t cnt) {  // scores in place, and their max
      const V::T x = attn_scores<kMaskCol>(t, r, sr, mr, c, cnt);
      store_n(sr + c, x, cnt);
      vmax = V::max(vmax, x);
    });
    const float mx = V::hmax(vmax);
    if (mx == ninf) {  // nothing reaches this row yet
      std::memset(sr, 0, size_t(t.cols) * sizeof(float));
      alpha[r] = 1.f;
      continue;
    }
    const V::T vm = V::set1(mx);
    V::T vsum = V::set1(0.f);
    for_each_vec(t.cols, [&](int64_t c, int64_t cnt) {
      V::T e = exp_nonpos_v(V::sub(load_n(sr + c, cnt, ninf), vm));  // 0 past cnt
      vsum = V::add(vsum, e);
      if (kr != nullptr) e = V::mul(e, attn_keep(t, kr, c, cnt));
      store_n(sr + c, e, cnt);
    });
    alpha[r] = std::exp(m[r] - mx);
    l[r] = l[r] * alpha[r] + V::hsum(vsum);
    m[r] = mx;
  }
}

void attn_fwd_tile_simd(const AttnTile& t, float* s, float* m, float* l, float* alpha) {
  if (t.mask != nullptr && t.mask_cs == 0) return attn_fwd_tile_v<true>(t, s, m, l, alpha);
  attn_fwd_tile_v<false>(t, s, m, l, alpha);
}

template <bool kMaskCol>
void attn_bwd_tile_v(const AttnTile& t, float* s, float* dp, const float* lse, const float* D) {
  const V::T vscale = V::set1(t.scale);
  for (int64_t r = 0; r < t.rows; ++r) {
    float* sr = s + r * t.ld;
    float* dr = dp + r * t.ld;
    if (lse[r] == -std::numeric_limits<float>::infinity()) {  // no key reaches this row
      std::memset(sr, 0, size_t(t.cols) * sizeof(float));
      std::memset(dr, 0, size_t(t.cols) * sizeof(float));
      continue;
    }
    const float* mr = t.mask != nullptr ? t.mask + r * t.mask_ld : nullptr;
    const uint8_t* kr = t.keep != nullptr ? t.keep + r * t.keep_ld : nullptr;
    const V::T vl = V::set1(lse[r]), vd = V::set1(D[r]);
    for_each_vec(t.cols, [&](int64_t c, int64_t cnt) {
      const V::T P = exp_nonpos_v(V::sub(attn_scores<kMaskCol>(t, r, sr, mr, c, cnt), vl));
      V::T g = load_n(dr + c, cnt), pk = P;
      if (kr != nullptr) {
        const V::T kf = attn_keep(t, kr, c, cnt);
        g = V::mul(g, kf), pk = V::mul(P, kf);
      }
      store_n(dr + c, V::mul(vscale, V::mul(P, V::sub(g, vd))), cnt);
      store_n(sr + c, pk, cnt);
    });
  }
}

void attn_bwd_tile_simd(const AttnTile& t, float* s, float* dp, const float* lse, const float* D) {
  if (t.mask != nullptr && t.mask_cs == 0) return attn_bwd_tile_v<true>(t, s, dp, lse, D);
  attn_bwd_tile_v<false>(t, s, dp, lse, D);
}

// The bf16 tile operands (table.h: attn_bf16_panels).
inline void store_bf16_n(uint16_t* p, V::T v, int64_t cnt) {
  if (cnt == V::W) return V::store_bf16(p, v);
  uint16_t buf[V::W];
  V::store_bf16(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(cnt) * sizeof(uint16_t));
}
// Per pair of rows, W columns at a time: both rows rounded and paired (V::pair_bf16) into a stack
// buffer of whole panels' columns, then copied into the panels w at a time (a panel's w columns
// of one pair of rows are adjacent). The buffer holds +0 pairs past cols: the last panel's
// padding. (Vectors stored straight into the panels, spilling into the next pair of rows' place,
// measured slower on Zen 5: six stores of 12 pairs per 64 columns, not four of 16.)
void attn_bf16_panels_simd(int64_t rows, int64_t cols, const float* src, int64_t ld, int64_t w,
                           uint16_t* panels, uint16_t* rm) {
  constexpr int64_t kBuf = 192;  // columns; w <= 64 leaves at least 3 panels' worth
  float pairs[kBuf + V::W];
  const int64_t chunk = kBuf / w * w, whole = (cols + w - 1) / w * w;
  const int64_t kp = (rows + 1) / 2, panel = w * 2 * kp;
  for (int64_t q = 0; q < kp; ++q) {
    const float* const s0 = src + 2 * q * ld;
    const bool two = 2 * q + 1 < rows;
    for (int64_t c0 = 0; c0 < whole; c0 += chunk) {
      const int64_t span = std::min(chunk, whole - c0), end = std::min(c0 + span, cols);
      for (int64_t c = c0; c < end; c += V::W) {
        const int64_t cnt = std::min<int64_t>(end - c, V::W);
        const auto load = [&](const float* p) {
          return V::round_bf16(cnt == V::W ? V::load(p) : V::load_first(p, cnt));
        };
        const V::T lo = load(s0 + c), hi = two ? load(s0 + ld + c) : V::set1(0.f);
        if (rm != nullptr) {
          store_bf16_n(rm + 2 * q * ld + c, lo, cnt);
          if (two) store_bf16_n(rm + (2 * q + 1) * ld + c, hi, cnt);
        }
        V::store(pairs + (c - c0), V::pair_bf16(lo, hi));
      }
      for (int64_t c = end; c < c0 + span; c += V::W) V::store(pairs + (c - c0), V::set1(0.f));
      uint16_t* const out = panels + c0 / w * panel + q * w * 2;
      for (int64_t j = 0; j < span / w; ++j)  // w pairs: as many floats
        copy_tile_row(reinterpret_cast<float*>(out + j * panel), pairs + j * w, w);
    }
  }
}
