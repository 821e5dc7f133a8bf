// flex_attention and create_block_mask (core/flex_attention.h) and the bonus notebook's
// MHAPyTorchFlexAttention (nn/mha_flex_attention.h): against scaled_dot_product_attention with the
// equivalent dense mask (forward and gradients, on every ISA path), float64 gradchecks through the
// reference, the block classification of known masks, shapes off the tile grid, rows no key
// reaches, 1 vs 3 threads, the errors, and PyTorch 2.6's goldens (tests/golden/gen_mha_flex.py).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/flex_attention.h"
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "nn/mha_flex_attention.h"
#include "nn/sdpa_attention.h"
#include "tests/golden_cases.h"
#include "tests/gradcheck.h"
#include "tests/kernel_testing.h"
#include "tests/module_goldens.h"

using namespace tg;
using tg::testing::check_tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The dense additive mask (B, H, L, S) flex attention stands for: score_mod(0) where mask_mod
// keeps the key (score_mod must be a pure additive bias here), -inf elsewhere.
Tensor dense_mask(const MaskMod& mask_mod, const ScoreMod& score_mod, int64_t B, int64_t H,
                  int64_t L, int64_t S, DType dt) {
  Tensor m = empty({B, H, L, S}, DType::Float64);
  double* p = m.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j)
          *p++ = !mask_mod(b, h, i, j) ? -kInf
                 : score_mod           ? score_mod(Score(0.0), b, h, i, j).value
                                       : 0.0;
  return m.to(dt);
}

ScoreMod alibi() {  // slope 2^-(h+1), bias slope · (kv_idx − q_idx), as gen_mha_flex.py's
  return [](Score s, int64_t, int64_t h, int64_t q, int64_t kv) {
    return s + std::exp2(-(double(h) + 1.0)) * double(kv - q);
  };
}

struct MaskCase {
  const char* name;
  MaskMod mask_mod;
  ScoreMod score_mod;
  bool per_b, per_h;  // the block mask keeps B / H (else none: broadcast)
};

std::vector<MaskCase> mask_cases() {
  const MaskMod per_head_window = [](int64_t, int64_t h, int64_t q, int64_t kv) {
    return q >= kv && q - kv < 40 * (h + 1);
  };
  const MaskMod per_batch = [](int64_t b, int64_t, int64_t q, int64_t kv) {
    return b == 0 ? q >= kv : (kv % 3 != 0 || q < 50);
  };
  std::vector<std::vector<int64_t>> docs(2);
  for (int64_t i = 0; i < 200; ++i) docs[0].push_back(i / 70), docs[1].push_back(i * i / 9000);
  return {{"causal", causal_mask(), nullptr, false, false},
          {"sliding window 37", sliding_window_mask(37), nullptr, false, false},
          {"document (ids per b)", document_causal_mask(docs), nullptr, true, false},
          {"window per head", per_head_window, nullptr, false, true},
          {"per batch row", per_batch, nullptr, true, false},
          {"causal + ALiBi score_mod", causal_mask(), alibi(), false, false},
          {"everything + ALiBi (no mask)", nullptr, alibi(), false, false},
          {"everything (no mask, no score_mod)", nullptr, nullptr, false, false}};
}

struct Operands {
  Tensor q, k, v;
};
// (B, H, L, E) operands as the notebook makes them: one (B, L, 3, H, E) tensor permuted.
Operands operands(int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, uint64_t seed,
                  DType dt = DType::Float32) {
  Generator g(seed);
  auto one = [&](int64_t n) {
    Tensor t = randn({B, n, H, E}, &g).to(dt).transpose(1, 2).detach();
    t.requires_grad_(true);
    return t;
  };
  return {one(L), one(S), one(S)};
}

struct Result {
  Tensor out, dq, dk, dv;
};
template <class F>
Result run(Operands o, F attention) {
  for (Tensor* t : {&o.q, &o.k, &o.v}) t->zero_grad();
  const Tensor out = attention(o.q, o.k, o.v);
  (out * testing::reduction_weights(out.shape()).to(out.dtype())).sum().backward();
  return {out.detach(), o.q.grad(), o.k.grad(), o.v.grad()};
}

Result run_flex(const Operands& o, const MaskCase& c, std::optional<double> scale = {}) {
  const int64_t B = o.q.size(0), H = o.q.size(1), L = o.q.size(2), S = o.k.size(2);
  std::optional<BlockMask> bm;
  if (c.mask_mod)
    bm = create_block_mask(c.mask_mod, c.per_b ? std::optional<int64_t>(B) : std::nullopt,
                           c.per_h ? std::optional<int64_t>(H) : std::nullopt, L, S);
  return run(o, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return flex_attention(q, k, v, c.score_mod, bm, scale);
  });
}

Result run_dense(const Operands& o, const MaskCase& c, std::optional<double> scale = {}) {
  const int64_t B = o.q.size(0), H = o.q.size(1), L = o.q.size(2), S = o.k.size(2);
  const MaskMod all = [](int64_t, int64_t, int64_t, int64_t) { return true; };
  const Tensor mask =
      dense_mask(c.mask_mod ? c.mask_mod : all, c.score_mod, B, H, L, S, o.q.dtype());
  return run(o, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale);
  });
}

void check_close(const std::string& what, const Result& got, const Result& want, double tol) {
  check_tensor(what + " out", got.out, want.out, tol, tol);
  check_tensor(what + " dq", got.dq, want.dq, tol, tol);
  check_tensor(what + " dk", got.dk, want.dk, tol, tol);
  check_tensor(what + " dv", got.dv, want.dv, tol, tol);
}

void check_same(const std::string& what, const Result& a, const Result& b) {
  INFO(what);
  CHECK(a.out.to_vector<float>() == b.out.to_vector<float>());
  CHECK(a.dq.to_vector<float>() == b.dq.to_vector<float>());
  CHECK(a.dk.to_vector<float>() == b.dk.to_vector<float>());
  CHECK(a.dv.to_vector<float>() == b.dv.to_vector<float>());
}

}  // namespace

TEST_CASE("flex_attention equals sdpa with the dense mask: every mask, every ISA path, off-grid") {
  // L and S off the tile grid (no ISA's tile divides 200, 133 or 150), L != S, and L == S.
  const std::vector<std::pair<int64_t, int64_t>> lens = {{200, 200}, {150, 133}, {133, 150}};
  testing::for_each_isa([&](const std::string&) {
    for (const MaskCase& c : mask_cases())
      for (auto [L, S] : lens) {
        INFO(c.name << " L=" << L << " S=" << S);
        const Operands o = operands(2, 3, L, S, 16, 7);
        check_close(c.name, run_flex(o, c), run_dense(o, c), 2e-5);
      }
  });
}

TEST_CASE("flex_attention with a scale, and a score_mod that is not a bias (soft-capping)") {
  const Operands o = operands(2, 2, 130, 97, 8, 11);
  const MaskCase window{"sliding window 20", sliding_window_mask(20), nullptr, false, false};
  // A scale <= 0 takes the hook's other path on partial tiles (final scores, not -inf in S).
  for (double scale : {0.3, -0.4, 0.0})
    check_close("scale " + std::to_string(scale), run_flex(o, window, scale),
                run_dense(o, window, scale), 2e-5);
  // cap · tanh(score / cap): its float32 fused forward and backward against the float64
  // reference on the same numbers (the derivative comes from Score, not from a bias).
  const ScoreMod softcap = [](Score s, int64_t, int64_t, int64_t, int64_t) {
    return 2.0 * tanh(s / 2.0);
  };
  const MaskCase capped{"softcap", causal_mask(), softcap, false, false};
  Operands o64{o.q.detach().to(DType::Float64), o.k.detach().to(DType::Float64),
               o.v.detach().to(DType::Float64)};
  for (Tensor* t : {&o64.q, &o64.k, &o64.v}) t->requires_grad_(true);
  testing::for_each_isa([&](const std::string&) {  // the fused path on every ISA, the reference
    check_close("softcap f32 vs f64", run_flex(o, capped), run_flex(o64, capped), 2e-5);
  });
}

TEST_CASE("flex_attention gradcheck (float64): masks, B/H-dependent masks, score_mods") {
  std::vector<MaskCase> cases = mask_cases();
  cases.push_back({"softcap", sliding_window_mask(4),
                   [](Score s, int64_t, int64_t h, int64_t, int64_t) {
                     return (1.5 + double(h)) * tanh(s / (1.5 + double(h))) + exp(s * 0.1);
                   },
                   false, true});
  for (const MaskCase& c : cases) {
    CAPTURE(c.name);
    const testing::GradcheckResult r = testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          std::optional<BlockMask> bm;
          if (c.mask_mod) bm = create_block_mask(c.mask_mod, 2, 2, 9, 7);
          return flex_attention(in[0], in[1], in[2], c.score_mod, bm);
        },
        {testing::rand64({2, 2, 9, 3}, 1), testing::rand64({2, 2, 7, 3}, 2),
         testing::rand64({2, 2, 7, 4}, 3)});
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("create_block_mask: full, partial and empty blocks of known masks") {
  const kernels::AttnTileSize t = kernels::sdpa_tile_size();
  const int64_t L = 3 * t.br + 5, S = 2 * t.bc + 7;
  const int64_t nq = 4, nk = 3;
  const MaskMod yes = [](int64_t, int64_t, int64_t, int64_t) { return true; };
  const MaskMod no = [](int64_t, int64_t, int64_t, int64_t) { return false; };
  const BlockMask all = create_block_mask(yes, std::nullopt, std::nullopt, L, S);
  CHECK(all.q_blocks() == nq);
  CHECK(all.kv_blocks() == nk);
  CHECK(all.counts().full == nq * nk);
  CHECK(create_block_mask(no, 2, 3, L, S).counts().empty == 2 * 3 * nq * nk);
  CHECK(create_block_mask(no, 2, 3, L, S).sparsity() == 100.0);
  // Causal, from the blocks' corners: full when the block's first query sees its last key,
  // empty when its last query sees none of its keys.
  const BlockMask causal = create_block_mask(causal_mask(), std::nullopt, 2, L, S);
  CHECK(causal.kinds.size() == size_t(2 * nq * nk));  // one byte per block, never L × S
  BlockMask::Counts want;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t kb = 0; kb < nk; ++kb) {
        const int64_t q0 = qb * t.br, q1 = std::min(L, q0 + t.br) - 1;
        const int64_t k0 = kb * t.bc, k1 = std::min(S, k0 + t.bc) - 1;
        const BlockKind k = q0 >= k1  ? BlockKind::full
                            : q1 < k0 ? BlockKind::empty
                                      : BlockKind::partial;
        (k == BlockKind::full ? want.full : k == BlockKind::empty ? want.empty : want.partial)++;
        CHECK(causal.kind(0, h, qb, kb) == k);
      }
  // The partial blocks' answers, one bit each, and their diagonals (the causal one: q0 - k0).
  CHECK(causal.bits.size() == size_t(want.partial * t.br * causal.words_per_row()));
  for (int64_t qb = 0; qb < nq; ++qb)
    for (int64_t kb = 0; kb < nk; ++kb) {
      const int64_t slot = causal.partial_slot[causal.block_index(0, 1, qb, kb)];
      CHECK((slot >= 0) == (causal.kind(0, 1, qb, kb) == BlockKind::partial));
      if (slot >= 0) CHECK(causal.diag[size_t(slot)] == qb * t.br - kb * t.bc);
    }
  CHECK(causal.counts().full == want.full);
  CHECK(causal.counts().partial == want.partial);
  CHECK(causal.counts().empty == want.empty);
  CHECK(want.partial > 0);
  CHECK(want.empty > 0);
  CHECK(causal.to_string().find("BlockMask(shape=(1, 2, ") == 0);
}

TEST_CASE("flex_attention: rows that no key reaches give 0 and zero gradients") {
  // Rows 3 and 70 see no key; query block 0 sees none (q < t.br: an empty block row).
  const kernels::AttnTileSize t = kernels::sdpa_tile_size();
  const MaskCase c{"holes",
                   [t](int64_t, int64_t, int64_t q, int64_t kv) {
                     return q >= t.br && q != 70 + t.br && kv <= q;
                   },
                   nullptr, false, false};
  const Operands o = operands(1, 2, t.br + 100, 90, 8, 5);
  const Result got = run_flex(o, c);
  check_close("holes", got, run_dense(o, c), 2e-5);
  const std::vector<float> out = got.out.contiguous().to_vector<float>();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t r : {int64_t{0}, t.br - 1, 70 + t.br})
      for (int64_t e = 0; e < 8; ++e) CHECK(out[size_t(((h * (t.br + 100)) + r) * 8 + e)] == 0.f);
  const BlockMask bm = create_block_mask(c.mask_mod, std::nullopt, std::nullopt, t.br + 100, 90);
  CHECK(bm.kind(0, 0, 0, 0) == BlockKind::empty);
  // No key at all (S = 0): every row is 0; no query (L = 0): an empty result.
  const Tensor none = flex_attention(ones({1, 2, 5, 4}), zeros({1, 2, 0, 4}), zeros({1, 2, 0, 3}),
                                     nullptr, create_block_mask(causal_mask(), {}, {}, 5, 0));
  CHECK(none.shape() == Shape{1, 2, 5, 3});
  for (float x : none.contiguous().to_vector<float>()) CHECK(x == 0.f);
  CHECK(flex_attention(zeros({1, 2, 0, 4}), ones({1, 2, 3, 4}), ones({1, 2, 3, 3})).numel() == 0);
}

TEST_CASE("flex_attention is bit-identical for 1 and 3 threads") {
  const int before = num_threads();
  const Operands o = operands(2, 3, 200, 170, 16, 9);
  for (const MaskCase& c : mask_cases()) {
    set_num_threads(1);
    const Result one = run_flex(o, c);
    set_num_threads(3);
    check_same(c.name, one, run_flex(o, c));
  }
  set_num_threads(before);
}

TEST_CASE("flex_attention errors: operands, block_mask and scale") {
  const Tensor q = zeros({2, 3, 5, 4}), k = zeros({2, 3, 6, 4}), v = zeros({2, 3, 6, 2});
  const BlockMask bm = create_block_mask(causal_mask(), std::nullopt, std::nullopt, 5, 6);
  const std::string shapes = "query [2, 3, 5, 4], key [2, 3, 6, 4], value [2, 3, 6, 2]";
  const kernels::AttnTileSize t = kernels::sdpa_tile_size();
  BlockMask other_tile = bm;
  other_tile.Q_BLOCK_SIZE += 1;
  struct Bad {
    std::function<Tensor()> call;
    std::string message;
  };
  const std::vector<Bad> table = {
      {[&] { return flex_attention(Tensor(), k, v); },
       "flex_attention: query is an undefined tensor"},
      {[&] { return flex_attention(q.to(DType::Int64), k, v); },
       "flex_attention: query must be float32 or float64, got torch.int64 (query [2, 3, 5, 4], key "
       "[2, 3, 6, 4], value [2, 3, 6, 2])"},
      {[&] { return flex_attention(q, k.to(DType::Float64), v); },
       "flex_attention: query, key and value must have the same dtype, got torch.float32, "
       "torch.float64 "
       "and torch.float32"},
      {[&] { return flex_attention(q[0], k[0], v[0]); },
       "flex_attention: query (B, H, L, E), key (B, H, S, E) and value (B, H, S, Ev) must be 4-D, "
       "got query [3, 5, 4], key [3, 6, 4], value [3, 6, 2]"},
      {[&] { return flex_attention(q, k.narrow(1, 0, 1), v.narrow(1, 0, 1)); },
       "flex_attention: query, key and value must have the same B and H (no broadcasting, no "
       "GQA), got query [2, 3, 5, 4], key [2, 1, 6, 4], value [2, 1, 6, 2]"},
      {[&] { return flex_attention(q, k.narrow(3, 0, 3), v); },
       "flex_attention: query and key must have the same E, got query [2, 3, 5, 4], key "
       "[2, 3, 6, 3], value [2, 3, 6, 2]"},
      {[&] { return flex_attention(q, k, v.narrow(2, 0, 5)); },
       "flex_attention: key and value must have the same S, got query [2, 3, 5, 4], key "
       "[2, 3, 6, 4], value [2, 3, 5, 2]"},
      {[&] {
         return flex_attention(q, k, v, nullptr, create_block_mask(causal_mask(), 2, 2, 5, 6));
       },
       "flex_attention: block_mask of shape (2, 2, 5, 6) does not fit " + shapes +
           " (B and H must be 1 or the query's, Q_LEN = L, KV_LEN = S)"},
      {[&] {
         return flex_attention(q, k, v, nullptr, create_block_mask(causal_mask(), 1, 1, 6, 6));
       },
       "flex_attention: block_mask of shape (1, 1, 6, 6) does not fit " + shapes +
           " (B and H must be 1 or the query's, Q_LEN = L, KV_LEN = S)"},
      {[&] { return flex_attention(q, k, v, nullptr, other_tile); },
       "flex_attention: block_mask was made for tiles of " + std::to_string(t.br + 1) + "x" +
           std::to_string(t.bc) + " (" + kernels::active_isa() + "), the active kernel's are " +
           std::to_string(t.br) + "x" + std::to_string(t.bc) + " (" + kernels::active_isa() +
           "): call create_block_mask again after set_isa"},
      {[&] { return flex_attention(q, k, v, nullptr, bm, kInf); },
       "flex_attention: scale must be finite, got inf"},
      {[&] { return flex_attention(q.narrow(3, 0, 0), k.narrow(3, 0, 0), v, nullptr, bm); },
       "flex_attention: query and key have E = 0, where the default scale 1/sqrt(E) is undefined "
       "(pass a scale)"},
      {[&] {
         create_block_mask(nullptr, 1, 1, 5, 6);
         return Tensor();
       },
       "create_block_mask: mask_mod is empty"},
      {[&] {
         create_block_mask(causal_mask(), 0, std::nullopt, 5, -1);
         return Tensor();
       },
       "create_block_mask: B and H must be >= 1 (or none) and Q_LEN, KV_LEN >= 0, got B=0, "
       "H=None, Q_LEN=5, KV_LEN=-1"},
      {[&] {
         sliding_window_mask(0);
         return Tensor();
       },
       "sliding_window_mask: window must be >= 1, got 0"},
  };
  for (const Bad& b : table)
    CHECK_THROWS_WITH_AS(b.call(), b.message.c_str(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(document_causal_mask({{0, 0, 1}})(0, 0, 0, 3),
                       "document_causal_mask: document_id has 1 row(s) of 3 positions, asked for "
                       "b=0, q_idx=0, kv_idx=3",
                       std::out_of_range);
}

TEST_CASE("MHAPyTorchFlexAttention equals MHAPyTorchScaledDotProduct with the same weights") {
  manual_seed(123);
  nn::MHAPyTorchFlexAttention flex(12, 12, 3, 150);
  manual_seed(123);
  nn::MHAPyTorchScaledDotProduct sdpa(12, 12, 3, 150);
  Generator g(1);
  const Tensor x = randn({2, 140, 12}, &g);
  check_tensor("output", flex(x), sdpa(x), 1e-6, 1e-5);
  CHECK(flex.state_dict().size() == sdpa.state_dict().size());
  CHECK_THROWS_WITH_AS(nn::MHAPyTorchFlexAttention(12, 10, 3, 150),
                       "MHAPyTorchFlexAttention: d_out is indivisible by num_heads (d_out=10, "
                       "num_heads=3)",
                       std::invalid_argument);
}

TEST_CASE("goldens (PyTorch 2.6): MHAPyTorchFlexAttention and flex_attention on the CPU") {
  const std::vector<testing::GoldenCase> cases =
      testing::load_goldens("flex_torch2.txt", "flex", "tests/golden/gen_mha_flex.py");
  REQUIRE(cases.size() == 4);
  for (const testing::GoldenCase& c : cases) {
    CAPTURE(c.name);
    if (c.name.rfind("F.", 0) == 0) {
      Tensor q = c.at("q").clone(), k = c.at("k").clone(), v = c.at("v").clone();
      q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
      const int64_t L = q.size(2);
      const bool window = c.name == "F.sliding_window_alibi";
      const BlockMask bm =
          window ? create_block_mask(sliding_window_mask(3), std::nullopt, std::nullopt, L, L)
                 : create_block_mask(document_causal_mask({{0, 0, 0, 1, 1, 2, 2, 2, 2},
                                                           {0, 1, 1, 1, 1, 1, 2, 2, 3}}),
                                     2, std::nullopt, L, L);
      const Tensor y = flex_attention(q, k, v, window ? alibi() : nullptr, bm);
      check_tensor(c.name + " output", y, c.at("output"), 1e-6, 1e-5);
      (y * c.at("loss_weights")).sum().backward();
      check_tensor(c.name + " grad.q", q.grad(), c.at("grad.q"), 1e-6, 1e-5);
      check_tensor(c.name + " grad.k", k.grad(), c.at("grad.k"), 1e-6, 1e-5);
      check_tensor(c.name + " grad.v", v.grad(), c.at("grad.v"), 1e-6, 1e-5);
      continue;
    }
    testing::check_module_goldens({c}, [](const std::string& name) {
      return name == "MHAPyTorchFlexAttention"
                 ? std::make_unique<nn::MHAPyTorchFlexAttention>(8, 8, 2, 6)
                 : std::make_unique<nn::MHAPyTorchFlexAttention>(5, 6, 3, 9, 0.5, true);
    });
  }
}
