// KernelTable: one plain struct of function pointers per ISA, plus the GEMM block sizes.
// Each ISA file (ref.cpp's scalar table, avx2.cpp, avx512.cpp, neon.cpp) defines one table;
// dispatch.cpp picks the active one. Internal to core/kernels.
//
// Packed GEMM layout (see gemm.cpp): a packed A micro-panel holds MR rows × kc columns stored
// k-major (a[p*MR + i]); a packed B micro-panel holds kc rows × NR columns (b[p*NR + j]). Edge
// panels are zero-padded, so a micro-kernel may compute a full MR×NR tile and clip only its store
// to m ≤ MR rows and n ≤ NR columns (AVX-512 computes just 4 or 8 rows when m allows).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "core/kernels/cache_info.h"
#include "core/kernels/kernels.h"

namespace tg::kernels {

// c[i*ldc + j] (+)= sum_p a[p*MR + i] * b[p*ldb + j] for i < m, j < n. accumulate == false
// overwrites C without reading it. b is a packed micro-panel (ldb = NR) or, for small GEMMs,
// NR columns of a row-major B read in place (ldb = its row stride; then n == NR).
using SgemmUkernel = void (*)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                              int64_t ldc, int64_t m, int64_t n, bool accumulate);

// The same product with A read in place, for GEMMs with few column panels, which cannot repay
// the cost of packing A. Row-major A (..._rowa): a(i, p) = a[i*lda + p], rows i >= m never read.
// Transposed A (..._cola, e.g. dYᵀ in a weight gradient): a(i, p) = a[p*lda + i], full tiles
// only (m == MR), as all MR values of each k are read.
using SgemmUkernelInPlaceA = void (*)(int64_t kc, const float* a, int64_t lda, const float* b,
                                      int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                                      bool accumulate);

// The bf16 GEMM's micro-kernel: for i < m, j < n, c[i*ldc + j] = the chain of kernels.h's
// gemm_bf16 over kp pairs of k, from acc = c[i*ldc + j] (accumulate) or +0. Packed panels hold
// pairs of k side by side, the layout vdpbf16ps reads: a[(q*MR + i)*2 + t] = A(i, 2q + t),
// b[(q*NR + j)*2 + t] = B(2q + t, j), zero-padded to MR rows, NR columns and whole pairs
// (packing.h). The chain starts from C, not from zero, so K blocks continue it exactly: the
// result does not depend on KC.
// out says how the tile is stored (kernels.h: Bf16Out): the float32 sums to c (f32), those sums
// rounded as f32_to_bf16 rounds and widened back to c (f32_rounded), or their bf16 bits to
// out.c16[i*out.ld16 + j] (bf16; c is then only read, when accumulate). The driver asks for a
// rounding only with a tile's last K block, so each element is rounded once, from its whole chain.
struct Bf16TileOut {
  Bf16Out mode = Bf16Out::f32;
  uint16_t* c16 = nullptr;
  int64_t ld16 = 0;
};
using GemmBf16Ukernel = void (*)(int64_t kp, const uint16_t* a, const uint16_t* b, float* c,
                                 int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                 const Bf16TileOut& out);
// One element of a tile stored as out.mode says, by the scalar conversions (the scalar
// micro-kernel's store, gemm_bf16's K == 0): x to *c, x rounded and widened back to *c, or x's
// bf16 bits to *c16.
inline void store_bf16_out(Bf16Out mode, float x, float* c, uint16_t* c16) {
  if (mode == Bf16Out::f32) {
    *c = x;
    return;
  }
  uint16_t h;
  f32_to_bf16_ref(1, &x, &h);
  if (mode == Bf16Out::bf16)
    *c16 = h;
  else
    bf16_to_f32_ref(1, &h, c);
}
// Throws std::invalid_argument, naming op, for a bf16 C with a beta other than 0 or 1 (kernels.h:
// Bf16Out).
void check_bf16_out(const char* op, float beta, const GemmBf16Out& C);

// sgemm's route for one row of A (M == 1, kernels.h: sgemm_batched), with B read in place:
//   dots:  B(p, j) = b[j*ldb + p]  (B stored transposed: q·kᵀ, each output a dot with one row)
//   axpys: B(p, j) = b[p*ldb + j]  (B row-major: w·V, each k adds a scaled row of B to c)
// c[j] for j < n: the micro-kernels' arithmetic for one row of C, so the same bits as the GEMM
// (or a fused attention tile) on the same path. Per K block [p0, p0 + kc), a chain from zero in
// k order,
//   acc = acc + a[p]·B(p, j)   (one FMA on the SIMD paths; the product rounded first on the
//                               scalar path, as its micro-kernel)
// then c[j] = acc + c[j], except for the first block without accumulate: c[j] = acc (c not read).
// kc is the GEMM's KC (gemm_blocking_for), so a K that spans several K blocks is cut where the
// GEMM cuts it; a fused attention tile, which sums its K whole, passes kc >= k.
using SgemmRow = void (*)(int64_t n, int64_t k, int64_t kc, const float* a, const float* b,
                          int64_t ldb, float* c, bool accumulate);

// One row's chunk for a bf16 gemv (kernels.h: gemv_rows_bf16) on an ISA without 16-bit masked
// loads: src itself when the chunk is whole (len == width), else its len values copied into tail
// (width long) with zeros after them, so a short last chunk reads nothing past the row.
inline const uint16_t* gemv_chunk(const uint16_t* src, int64_t len, int64_t width, uint16_t* tail) {
  if (len == width) return src;
  std::memset(tail, 0, sizeof(uint16_t) * size_t(width));
  std::memcpy(tail, src, sizeof(uint16_t) * size_t(len));
  return tail;
}

// Copies W floats (packing.cpp, simd_generic.h); a fixed-size memcpy compiles to a few vector moves
// (a plain loop stays scalar: the compiler cannot rule out that out and in overlap).
template <int64_t W>
inline void copy_row(float* out, const float* in) {
  std::memcpy(out, in, W * sizeof(float));
}

// out[0:w] = in[0:w] for a micro-tile width w, unrolled for the widths the tables use.
inline void copy_tile_row(float* out, const float* in, int64_t w) {
  switch (w) {
    case 32:
      return copy_row<32>(out, in);
    case 16:
      return copy_row<16>(out, in);
    case 12:
      return copy_row<12>(out, in);
    case 8:
      return copy_row<8>(out, in);
    case 6:
      return copy_row<6>(out, in);
    case 4:
      return copy_row<4>(out, in);
    default:
      std::memcpy(out, in, static_cast<size_t>(w) * sizeof(float));
  }
}

// A table's own values are the fallback when the caches are unknown; sgemm derives its blocks
// from the caches (gemm_blocking_for).
struct GemmBlocking {
  int64_t mr, nr;  // micro-tile (registers)
  int64_t mc;      // rows of A packed per block (A block mc×kc)
  int64_t kc;      // depth of one rank-kc update (A micro-panel mr×kc stays in L1)
  int64_t nc;      // columns of B packed per block (B panel kc×nc stays in L2)
};

// ---- fused attention's elementwise steps (attention.cpp; references in attention_ref.cpp) ----
// One tile of one problem: s [rows, cols] (row stride ld) holds q·kᵀ for query rows i0 + r and
// keys j0 + c. Its scores are x[r, c] = scale·s[r, c] + mask[r·mask_ld + c·mask_cs], and -inf
// where causal and c > r + diag (diag = i0 − j0). mask_ld may be 0 (one mask row for every query)
// and mask_cs is 1 or 0 (one value per query row for every key: a broadcast last dim).
struct AttnTile {
  int64_t rows = 0, cols = 0, ld = 0;
  float scale = 1;
  const float* mask = nullptr;  // additive; nullptr: none
  int64_t mask_ld = 0, mask_cs = 1;
  bool causal = false;
  int64_t diag = 0;
  const uint8_t* keep = nullptr;  // dropout: keep[r·keep_ld + c] != 0 keeps (× keep_scale)
  int64_t keep_ld = 0;
  float keep_scale = 1;
};
// The online-softmax step of the forward, per row r (m[r] = -inf and l[r] = 0 before the first):
//   m' = max(m[r], max_c x[r, c]);  alpha[r] = exp(m[r] − m');  m[r] = m'
//   l[r] = l[r]·alpha[r] + Σ_c exp(x[r, c] − m');  s[r, c] = exp(x[r, c] − m') · keep[r, c]
// While every score of a row so far is -inf: s = 0, alpha = 1, m stays -inf, l stays 0.
void attn_fwd_tile_ref(const AttnTile& t, float* s, float* m, float* l, float* alpha);
// The backward step, in place: s comes in as S = q·kᵀ and leaves as P∘keep (for dv), dp comes
// in as dP = dout·vᵀ and leaves as dS (for dq and dk). Per element, P = exp(x − lse[r]) (0 when
// lse[r] = -inf), then
//   s[r, c]  = P · keep
//   dp[r, c] = scale · P · (dp[r, c] · keep − D[r])    with D[r] = dout[r] · out[r].
// lse[r] is the row's log-sum-exp over all its keys, so no x exceeds it (the SIMD paths' exp
// assumes x − lse <= 0).
void attn_bwd_tile_ref(const AttnTile& t, float* s, float* dp, const float* lse, const float* D);
// The bf16 backward's tile operands (attention_bf16.cpp): a rows × cols tile (rows ld apart, P∘keep
// or dS) rounded to bf16 as f32_to_bf16 rounds, straight into the bf16 GEMM's A panels of its
// transpose, w <= 64 rows each (GemmBf16Ukernel's layout, MR = w): pairs of tile rows side by side,
//   panels[(c / w)·panel + ((r / 2)·w + c % w)·2 + r % 2] = bf16(src[r·ld + c]),
// panel = w·2·ceil(rows / 2), and +0 in the rest of the ceil(cols / w) panels (an odd rows' last
// pair's other half, columns past cols); panels 4-byte aligned. rm, unless nullptr, also gets
// bf16(src) row-major (rows ld apart), for the product that reads the tile untransposed.
void attn_bf16_panels_ref(int64_t rows, int64_t cols, const float* src, int64_t ld, int64_t w,
                          uint16_t* panels, uint16_t* rm);

struct KernelTable {
  const char* name;
  GemmBlocking sgemm_blocking;
  SgemmUkernel sgemm_ukernel;
  SgemmUkernelInPlaceA sgemm_ukernel_rowa;  // optional (nullptr: always pack A)
  SgemmUkernelInPlaceA sgemm_ukernel_cola;  // optional (nullptr: always pack A)
  // Optional (nullptr: the portable loop): packs one full MR×kc micro-panel of a row-major A
  // (column stride 1, row stride rsA < 2^31 / MR) into out[p*MR + i]. The transposition is the
  // main packing cost for small GEMMs, so SIMD ISAs do it in registers (gathers or transposes).
  void (*sgemm_pack_a_rowmajor)(int64_t kc, const float* A, int64_t rsA, float* out);
  // Optional, the same transposition for B stored transposed (row stride 1, column stride
  // csB < 2^31 / NR): packs one full kc×NR micro-panel into out[p*NR + j].
  void (*sgemm_pack_b_colmajor)(int64_t kc, const float* B, int64_t csB, float* out);
  // The vector entries, one per vector_kernels.def entry, of its `_ref` twin's type; the tables
  // fill them by name, so two entries of one type cannot be swapped.
#define TG_KERNEL(name, params, args) decltype(&name##_ref) name;
#define TG_KERNEL_NO_F64(name, params, args) TG_KERNEL(name, params, args)
#include "core/kernels/vector_kernels.def"
  decltype(&attn_fwd_tile_ref) attn_fwd_tile;
  decltype(&attn_bwd_tile_ref) attn_bwd_tile;
  decltype(&attn_bf16_panels_ref) attn_bf16_panels;
  // Benchmark aid: runs `iters` rounds of independent multiply-add chains sized to saturate this
  // ISA's FMA units (the machine's peak) and returns the flops executed.
  double (*fma_probe)(int64_t iters);
  // ---- bfloat16 (kernels.h) ----
  decltype(&f32_to_bf16_ref) f32_to_bf16;
  decltype(&bf16_to_f32_ref) bf16_to_f32;
  GemmBlocking gemm_bf16_blocking;  // KC counted in pairs of k
  GemmBf16Ukernel gemm_bf16_ukernel;
  // Optional (nullptr: the portable loop): `panels` whole w-wide panels of pairs of k from a
  // source whose rows are k (row k at src + k·rs, its columns side by side), ps bf16 apart
  // (GemmBf16Ukernel's layout; packing.h):
  //   out[p·ps + (q·w + j)·2 + t] = src[(2q + t)·rs + p·w + j]   (0 where 2q + t >= kc)
  // for p < panels, q < ceil(kc / 2), j < w. Row-major B (w = NR) and transposed A (Aᵀ's rows,
  // w = MR).
  void (*gemm_bf16_pack_pairs)(int64_t kc, int64_t panels, int64_t w, const uint16_t* src,
                               int64_t rs, uint16_t* out, int64_t ps);
  // Optional (nullptr: the portable loop, or the float packing where its tile serves): one w-wide
  // panel of pairs of k from `lines` <= w source lines that run along k (line i at src + i·rs):
  //   out[(q·w + i)·2 + t] = src[i·rs + 2q + t]   (0 where i >= lines or 2q + t >= kc)
  // for q < ceil(kc / 2), i < w. Row-major A (rows of A, w = MR) and transposed B (columns of B,
  // w = NR), edge panels, odd kc and any alignment included: a transposition of the pairs'
  // 32 bits.
  void (*gemm_bf16_pack_lines)(int64_t kc, int64_t lines, int64_t w, const uint16_t* src,
                               int64_t rs, uint16_t* out);
  decltype(&gemv_rows_bf16_ref) gemv_rows_bf16;
  // nullptr where the path has no packed gemv (gemv_rows_bf16 serves, from the unpacked rows).
  decltype(&gemv_packed_bf16_ref) gemv_packed_bf16;
  // The bf16 unit's peak, as fma_probe (flops: 2 per bf16 multiply-add); nullptr where the bf16
  // GEMM widens to float32 (fma_probe is its bound).
  double (*bf16_probe)(int64_t iters);
  // ---- one row of A (gemm_row.cpp: the batched GEMMs' M == 1 route) ----
  SgemmRow sgemm_row_dots;
  SgemmRow sgemm_row_axpys;
  // gemm_bf16's chain for one row of A and a row-major B (the bf16 axpys; the bf16 dots are
  // gemv_rows_bf16), from C or from +0 (kernels.h: gemm_bf16_row_axpys_ref).
  decltype(&gemm_bf16_row_axpys_ref) gemm_bf16_row_axpys;
};

// Defined by the file of each ISA; only the ones meson compiled for this target exist.
extern const KernelTable kScalarTable;   // ref.cpp
const KernelTable* avx2_table();         // avx2.cpp
const KernelTable* avx512_table();       // avx512.cpp
const KernelTable* avx512_bf16_table();  // avx512_bf16.cpp: avx512's, with the bf16 unit's GEMM
const KernelTable* neon_table();         // neon.cpp

// Tables compiled for this target and supported by this CPU (cpu_x86.cpp / cpu_arm.cpp /
// cpu_other.cpp, chosen by meson), fastest last; excludes the scalar table.
// No AMX table yet: no machine a session ran on could run and check one (qemu-user emulates
// neither AVX-512 nor AMX). It would be one more entry after avx512_bf16 (cpuid 7.0 EDX bits
// 22/24, and the OS's permission for the tile state), with its own GemmBf16Ukernel and panel
// layout, and its own reference: the SDM's tdpbf16ps sums a row's products before adding them
// to C, not vdpbf16ps's chain of one rounding per product that ref.cpp follows, and which order
// the hardware keeps can only be read off an AMX CPU.
struct IsaEntry {
  const char* name;
  const KernelTable* table;  // nullptr: known name, but this binary or CPU cannot run it
  const char* why_not;       // when table == nullptr: one clause saying why
};
constexpr int kNativeIsas = 4;
// Entries for "avx2", "avx512", "avx512_bf16", "neon" in that order.
void native_isas(IsaEntry out[kNativeIsas]);

// The block sizes sgemm uses with table t (gemm_blocking.cpp): bench_matmul's --blocking, else
// TAPEGRAD_GEMM_BLOCKING=MC,KC,NC, else derived from the caches (derive_blocking; SIMD tables
// only), else the table's own. *source, when given, names which ("--blocking",
// "TAPEGRAD_GEMM_BLOCKING", "caches", "table"). Throws std::invalid_argument, one line, when the
// variable is malformed. MR and NR are always the table's.
GemmBlocking gemm_blocking_for(const KernelTable& t, const char** source = nullptr);
// The same for the bf16 GEMM from t.gemm_bf16_blocking, KC counted in pairs of k (the overrides'
// KC too); the bf16 results do not depend on the blocks.
GemmBlocking gemm_bf16_blocking_for(const KernelTable& t, const char** source = nullptr);
// The model: KC from L1 and the micro-tile, NC and MC from L2 (unknown levels keep `table`'s).
GemmBlocking derive_blocking(const GemmBlocking& table, const CacheInfo& c);
// Re-reads TAPEGRAD_GEMM_BLOCKING (read once at start-up otherwise); for tests.
void reload_gemm_blocking_env();
// Parses "MC,KC,NC" into out (1 <= MC, KC <= 8192, 1 <= NC <= 65536); else false and a one-line
// error saying what is wanted.
bool parse_gemm_blocking(const std::string& s, int64_t out[3], std::string& error);

// Tuning aid for bench_matmul --blocking: replaces every table's MC/KC/NC (all > 0), or restores
// the tables' own values when mc == 0. Not for production code paths.
void set_sgemm_blocking_override(int64_t mc, int64_t kc, int64_t nc);

// The batched GEMMs' route for one row of A (gemm_row.cpp; kernels.h: sgemm_batched): computes
// the batch with B read in place and returns true, or returns false (and computes nothing) when
// the shape is not one it takes: M != 1, beta != 0, A's columns not adjacent, or B neither
// row-major nor stored transposed.
bool sgemm_batched_row(const KernelTable& t, int64_t batch, int64_t M, int64_t N, int64_t K,
                       const float* A, int64_t strideA, int64_t csA, const float* B,
                       int64_t strideB, int64_t rsB, int64_t csB, float beta, float* C,
                       int64_t strideC);
// The bf16 form stores C as C.mode says, rounding each chunk of a row while it is in L1.
bool gemm_bf16_batched_row(const KernelTable& t, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const uint16_t* A, int64_t strideA, int64_t csA, const uint16_t* B,
                           int64_t strideB, int64_t rsB, int64_t csB, float beta,
                           const GemmBf16Out& C, int64_t strideC);

// Row panels that a team member computed from another member's share since the process started
// (gemm.cpp's PanelRange): lets the tests see that their threaded cases took that path.
int64_t sgemm_panels_taken_over();

// The active table (dispatch.cpp).
const KernelTable& active_table();

}  // namespace tg::kernels
