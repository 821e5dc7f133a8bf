// matmul with torch.matmul's semantics, and linear (x·wᵀ + b) as one fused op.
//
// Shape legend: a (..., n, k) · b (..., k, m) = (..., n, m); batch dims broadcast. A 1-D a is read
// as (1, k) and a 1-D b as (k, 1), and the added dim is dropped from the result. Every product
// runs on kernels::sgemm_batched / dgemm through strides, so transposed operands are never
// copied.
#include "core/kernels/kernels.h"
#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

using detail::fail;

namespace {

// c (contiguous, batch..., n, m) = a · b (+ c when accumulate), batches broadcast. bfloat16 a and
// b: float32 sums (kernels::gemm_bf16_batched), stored as c's dtype asks: a bfloat16 c gets them
// rounded once as the GEMM stores its tiles (accumulate starts from c's bf16 values), a float32 c
// gets them as they are or, with `round`, rounded to bf16's precision (kernels.h: Bf16Out).
void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, bool accumulate,
                  bool round = false) {
  const int64_t na = a.dim(), nb = b.dim(), nc = c.dim();
  const int64_t n = a.shape()[na - 2], k = a.shape()[na - 1], m = b.shape()[nb - 1];
  const Shape batch(c.shape().begin(), c.shape().end() - 2);
  Shape abatch(a.shape().begin(), a.shape().end() - 2),
      bbatch(b.shape().begin(), b.shape().end() - 2);
  TensorImpl ga, gb;  // batch-only geometry, for broadcast strides
  ga.shape = abatch;
  ga.strides = Shape(a.strides().begin(), a.strides().end() - 2);
  gb.shape = bbatch;
  gb.strides = Shape(b.strides().begin(), b.strides().end() - 2);
  const Shape sa = detail::broadcast_strides(ga, batch), sb = detail::broadcast_strides(gb, batch);
  const Shape sc(c.strides().begin(), c.strides().end() - 2);
  const int64_t rsA = a.strides()[na - 2], csA = a.strides()[na - 1];
  const int64_t rsB = b.strides()[nb - 2], csB = b.strides()[nb - 1];
  const int64_t ldc = c.strides()[nc - 2];
  if (a.dtype() == DType::BFloat16) {
    const auto* pa = reinterpret_cast<const uint16_t*>(a.data<bfloat16>());
    const auto* pb = reinterpret_cast<const uint16_t*>(b.data<bfloat16>());
    const kernels::GemmBf16Out pc =
        c.dtype() == DType::BFloat16
            ? kernels::bf16_out_bf16(reinterpret_cast<uint16_t*>(c.data<bfloat16>()), ldc)
            : kernels::bf16_out_f32(c.data<float>(), ldc, round);
    detail::for_each_run<3>(batch, {&sc, &sa, &sb}, {0, 0, 0},
                            [&](std::array<int64_t, 3> o, int64_t cnt, std::array<int64_t, 3> st) {
                              kernels::gemm_bf16_batched(
                                  cnt, n, m, k, pa + o[1], st[1], rsA, csA, pb + o[2], st[2], rsB,
                                  csB, accumulate ? 1.0f : 0.0f, pc.at(o[0]), st[0]);
                            });
    return;
  }
  detail::dispatch_float("matmul", a.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    const T beta = accumulate ? T(1) : T(0);
    // Batch dims are walked in runs: a run of the last batch dim is `cnt` matrices, one call.
    detail::for_each_run<3>(
        batch, {&sc, &sa, &sb}, {0, 0, 0},
        [&](std::array<int64_t, 3> o, int64_t cnt, std::array<int64_t, 3> st) {
          if constexpr (std::is_same_v<T, float>) {
            // One call per run, so the kernel can spread small per-head
            // GEMMs over threads.
            kernels::sgemm_batched(cnt, n, m, k, pa + o[1], st[1], rsA, csA, pb + o[2], st[2], rsB,
                                   csB, beta, pc + o[0], st[0], ldc);
          } else {
            for (int64_t i = 0; i < cnt; ++i)
              kernels::dgemm(n, m, k, pa + o[1] + i * st[1], rsA, csA, pb + o[2] + i * st[2], rsB,
                             csB, beta, pc + o[0] + i * st[0], ldc);
          }
        });
  });
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  if (a.dtype() != b.dtype())
    fail(op, "expected both operands to have the same dtype, got ", dtype_name(a.dtype()), " ",
         shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
  if (!is_floating(a.dtype()))
    fail(op, "expected floating-point operands, got ", dtype_name(a.dtype()));
}

// t as rows of its last dim: reshape({-1, C}) says the same but cannot infer -1 when C is 0.
Tensor as_rows(const Tensor& t) { return t.dim() == 1 ? t.unsqueeze(0) : t.flatten(0, -2); }

// a · b of 2-D bfloat16 operands, summed in float32 and rounded once to bf16 as the GEMM stores
// it, in its input's dtype: bf16, or the float32 of that bf16 for a float32 input (a bf16 gradient
// already widened, as the cast's ToCopyBackward0 would widen it).
Tensor mm_bf16_rounded(const Tensor& a, const Tensor& b, DType input) {
  const DType dt = input == DType::Float32 ? DType::Float32 : DType::BFloat16;
  Tensor out = detail::empty_for("linear", {a.shape()[0], b.shape()[1]}, dt);
  batched_gemm(a, b, out, false, /*round=*/true);
  return out;
}

// A gradient computed as float32 and rounded to bf16 precision, in its input's dtype: kept as
// float32 for a float32 input (the cast's ToCopyBackward0 would widen it), bf16 otherwise.
Tensor as_input_dtype(const Tensor& widened, DType input) {
  return input == DType::Float32 ? widened : widened.to(input);
}

Tensor autocast_linear(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace

// --- matmul ---
//   forward:  out = a · b
//   backward: ga = g · bᵀ (summed over a's broadcast batch dims), gb = aᵀ · g (likewise)
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_enabled()) {
    const Tensor a16 = detail::autocast_bf16(a), b16 = detail::autocast_bf16(b);
    if (!a16.same(a) || !b16.same(b)) return matmul(a16, b16);
  }
  check_pair("matmul", a, b);
  if (a.dim() == 0 || b.dim() == 0)
    fail("matmul", "both arguments need at least 1 dim, got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  const Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  const Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
  if (a2.shape().back() != b2.shape()[b2.dim() - 2])
    fail("matmul", "cannot multiply ", shape_str(a.shape()), " by ", shape_str(b.shape()));
  const Shape ab(a2.shape().begin(), a2.shape().end() - 2),
      bb(b2.shape().begin(), b2.shape().end() - 2);
  if (!detail::broadcastable(ab, bb))
    fail("matmul", "cannot multiply ", shape_str(a.shape()), " by ", shape_str(b.shape()),
         " (batch dims do not broadcast)");
  Shape full = detail::broadcast_shapes("matmul", ab, bb);
  full.push_back(a2.shape()[a2.dim() - 2]);
  full.push_back(b2.shape().back());
  Shape out_shape = full;  // without the dims that 1-D operands added
  if (b.dim() == 1) out_shape.pop_back();
  if (a.dim() == 1) out_shape.erase(out_shape.end() - (b.dim() == 1 ? 1 : 2));
  // beta = 0: the GEMM writes every element without reading it, so no zero-fill is needed.
  // bfloat16: float32 sums, rounded once as the GEMM stores them, as PyTorch's bf16 matmul.
  Tensor out = detail::empty_for("matmul", out_shape, a.dtype());
  Tensor out2 = out.view(full);  // the same buffer, seen with the 1-D operands' dims
  batched_gemm(a2, b2, out2, false);

  if (any_requires_grad({&a, &b})) {
    const char* name = a.dim() == 1 && b.dim() == 1   ? "DotBackward0"
                       : b.dim() == 1 && a.dim() == 2 ? "MvBackward0"
                       : out.dim() <= 2               ? "MmBackward0"
                                                      : "UnsafeViewBackward0";
    record(name, {a, b}, {save_for(b, a), save_for(a, b)},
           [full, sa = a.shape(), sb = b.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             // ga = g · bᵀ, gb = aᵀ · g, each summed over its operand's broadcast batch dims; a
             // 1-D a is a (1, k) row and a 1-D b a (k, 1) column, as in the forward.
             const Tensor g2 = g.reshape(full);
             Tensor ga, gb;
             if (n.needs(0)) {
               const Tensor& y = n.saved_tensor(1);
               const Tensor y2 = y.dim() == 1 ? y.unsqueeze(1) : y;
               const Shape sa2 = sa.size() == 1 ? Shape{1, sa[0]} : sa;
               ga = sum_to(matmul(g2, y2.transpose(-1, -2)), sa2).reshape(sa);
             }
             if (n.needs(1)) {
               const Tensor& x = n.saved_tensor(0);
               const Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x;
               const Shape sb2 = sb.size() == 1 ? Shape{sb[0], 1} : sb;
               gb = sum_to(matmul(x2.transpose(-1, -2), g2), sb2).reshape(sb);
             }
             return {ga, gb};
           },
           {&out});
  }
  return out;
}

// The packed panels (kernels.h: gemv_packed_bf16) of a bf16 weight that a Linear reads one row at
// a time off the tape, as each token of generation does: packed on the first such read, kept with
// the weight's storage and packed again only once the weight has changed (its version). Null when
// the path has no packed kernel, the step is taped, or w is not its storage's whole contiguous
// tensor (the panels are the storage's).
static const uint32_t* gemv_panels(const Tensor& w, const Tensor& x, const Tensor& b) {
  if (!kernels::gemv_packed_bf16_available() || any_requires_grad({&x, &w, &b}) ||
      !w.is_contiguous() || w.offset() != 0)
    return nullptr;
  Storage& s = *w.impl()->storage;
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  if (s.nbytes != size_t(w.numel()) * sizeof(bfloat16)) return nullptr;
  if (!s.derived || s.derived_version != s.version) {
    const int64_t words = kernels::gemv_bf16_panel_words(rows, cols);
    auto panels = std::make_shared<Storage>(size_t(words) * sizeof(uint32_t));
    kernels::pack_gemv_bf16(rows, cols, reinterpret_cast<const uint16_t*>(w.data<bfloat16>()), cols,
                            static_cast<uint32_t*>(panels->data));
    s.derived = std::move(panels);
    s.derived_version = s.version;
  }
  return static_cast<const uint32_t*>(s.derived->data);
}

// --- linear: y = x · wᵀ + b, x (..., in), w (out, in), b (out) ---
//   backward: gx = g · w,  gw = gᵀ · x (over all leading dims),  gb = Σ g
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast_enabled()) {
    const auto f32 = [](const Tensor& t) { return t.defined() && t.dtype() == DType::Float32; };
    if (f32(x) || f32(w) || f32(b)) return autocast_linear(x, w, b);
  }
  check_pair("linear", x, w);
  if (w.dim() != 2) fail("linear", "weight must be 2-D (out, in), got ", shape_str(w.shape()));
  if (x.dim() == 0 || x.shape().back() != w.shape()[1])
    fail("linear", "input of shape ", shape_str(x.shape()), " does not match weight of shape ",
         shape_str(w.shape()), " (expected the last dim to be ", w.shape()[1], ")");
  if (b.defined()) {
    check_pair("linear", x, b);
    if (b.dim() != 1 || b.shape()[0] != w.shape()[0])
      fail("linear", "bias of shape ", shape_str(b.shape()), " does not match weight of shape ",
           shape_str(w.shape()));
  }
  const int64_t outf = w.shape()[0];
  const Tensor x2 = as_rows(x.detach());
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  // beta = 0 below without b. bfloat16: float32 sums (from the bias), rounded once: by the GEMM
  // as it stores them, or after the one-row gemv, which writes float32.
  const bool bf16 = x.dtype() == DType::BFloat16;
  const bool one_row =
      x2.shape()[0] == 1 && w.strides()[1] == 1 && (!b.defined() || b.is_contiguous());
  Tensor y = detail::empty_for("linear", out_shape, bf16 && one_row ? DType::Float32 : x.dtype());
  if (one_row && x.dtype() == DType::Float32) {
    // One row (each step of KV-cache generation): W·x + b, which streams W once instead of
    // packing it as a GEMM operand.
    const Tensor xc = x2.contiguous();
    kernels::gemv_rows(outf, w.shape()[1], w.data<float>(), w.strides()[0], xc.data<float>(),
                       b.defined() ? b.data<float>() : nullptr, y.data<float>());
  } else if (one_row && bf16) {
    // The same in bf16, half the bytes of W per token: gemv_rows_bf16 gives the GEMM's bits
    // (its chain from the bias), so which route a row takes changes nothing.
    const Tensor xc = x2.contiguous(), bf = b.defined() ? b.to(DType::Float32) : Tensor();
    const auto* xb = reinterpret_cast<const uint16_t*>(xc.data<bfloat16>());
    const float* pb = b.defined() ? bf.data<float>() : nullptr;
    if (const uint32_t* panels = gemv_panels(w, x, b))
      kernels::gemv_packed_bf16(outf, w.shape()[1], panels, xb, pb, y.data<float>());
    else
      kernels::gemv_rows_bf16(outf, w.shape()[1],
                              reinterpret_cast<const uint16_t*>(w.data<bfloat16>()), w.strides()[0],
                              xb, pb, y.data<float>());
  } else {
    if (b.defined()) detail::copy_into(*y.impl(), *b.impl());  // bf16: the bias's own bits
    Tensor y2 = y.view({x2.shape()[0], outf});                 // the same buffer, as rows
    batched_gemm(x2, w.detach().T(), y2, /*accumulate=*/b.defined());
  }
  if (bf16 && one_row) y = y.to(DType::BFloat16);

  if (any_requires_grad({&x, &w, &b})) {
    const char* name = x.dim() == 2 ? (b.defined() ? "AddmmBackward0" : "MmBackward0")
                                    : (b.defined() ? "ViewBackward0" : "UnsafeViewBackward0");
    record(name, {x, w, b}, {save_for(w, x), save_for(x, w)},
           [outf, sx = x.shape()](Node& n, const Tensor& g) -> std::vector<Tensor> {
             const Tensor g2 = as_rows(g);
             Tensor gx, gw, gb;
             if (n.needs(0)) gx = matmul(g2, n.saved_tensor(1)).reshape(sx);
             if (n.needs(1)) gw = matmul(g2.T(), as_rows(n.saved_tensor(0)));
             if (n.needs(2)) {  // Σ over rows of a contiguous (rows, out) gradient
               const Tensor gc = detail::widen(g2).contiguous();  // bf16 sums in float32
               gb = empty({outf}, gc.dtype());
               detail::dispatch_float("linear", gc.dtype(), [&](auto z) {
                 using T = decltype(z);
                 kernels::sum_cols(gc.shape()[0], outf, gc.data<T>(), gb.data<T>());
               });
               gb = gb.to(g.dtype());
             }
             return {gx, gw, gb};
           },
           {&y});
  }
  return y;
}

// --- linear under autocast, with a float32 x, w or b ---
// torch.autocast casts each float32 operand to bf16 on the tape and runs the bf16 linear; each
// cast's backward (ToCopyBackward0) then widens the bf16 gradient to float32. Here the casts are
// made off the tape and one node takes the gradients of x, w and b as they are: each is the bf16
// linear's gradient (float32 sums rounded once to bf16), kept in float32 where its input is
// float32. The same bits, without a bf16 gradient and its widened copy per operand.
//   backward: gx = round(g · w16), gw = round(gᵀ · x16), gb = round(Σ g), g bfloat16
namespace {
Tensor autocast_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const auto cast = [](const Tensor& t) {
    if (!t.defined()) return t;
    return t.dtype() == DType::Float32 ? detail::autocast_weight_bf16(t) : t.detach();
  };
  const Tensor x16 = cast(x), w16 = cast(w), b16 = cast(b);
  Tensor y = linear(x16, w16, b16);  // detached operands: no node recorded
  if (!any_requires_grad({&x, &w, &b})) return y;
  const char* name = x.dim() == 2 ? (b.defined() ? "AddmmBackward0" : "MmBackward0")
                                  : (b.defined() ? "ViewBackward0" : "UnsafeViewBackward0");
  record(name, {x, w, b}, {save_for(w, x16), save_for(x, w16)},
         // The inputs' dtypes only: holding x itself would keep its float32 activation alive.
         [sx = x.shape(), xd = x.dtype(), wd = w.dtype(),
          bd = b.defined() ? b.dtype() : DType::Float32](Node& n,
                                                         const Tensor& g) -> std::vector<Tensor> {
           const Tensor g2 = as_rows(g);
           Tensor gx, gw, gb;
           if (n.needs(0)) gx = mm_bf16_rounded(g2, n.saved_tensor(1), xd).reshape(sx);
           if (n.needs(1)) gw = mm_bf16_rounded(g2.T(), as_rows(n.saved_tensor(0)), wd);
           if (n.needs(2)) {  // Σ over rows in float32, rounded once
             const Tensor gc = detail::widen(g2).contiguous();
             gb = empty({gc.shape()[1]}, DType::Float32);
             kernels::sum_cols(gc.shape()[0], gc.shape()[1], gc.data<float>(), gb.data<float>());
             kernels::bf16_round(gb.numel(), gb.data<float>(), gb.data<float>());
             gb = as_input_dtype(gb, bd);
           }
           return {gx, gw, gb};
         },
         {&y});
  return y;
}
}  // namespace

}  // namespace tg
