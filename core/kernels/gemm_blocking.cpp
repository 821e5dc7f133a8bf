// The GEMM's block sizes (table.h: gemm_blocking_for): derived from the caches the CPU reports,
// following BLIS's analytical model (Low, Igual, Smith, Quintana-Ortí, "Analytical modeling is
// enough for high-performance BLIS", ACM TOMS 43(2), 2016), or overridden.
//
// Which panel lives where in our nest (gemm.cpp) — the operands' roles are swapped against BLIS:
//   L1: the A micro-panel MR×kc, reused across the jr sweep, while B micro-panels kc×NR stream
//       through, each read once per micro-kernel call (in BLIS the B micro-panel is the resident
//       one and A's stream);
//   L2, L3: the packed B panel kc×nc, reused by every row panel of every row block (BLIS's A
//       block, but with a longer reuse distance: the whole ic loop), and the A block mc×kc, packed
//       just before its row panels are read back;
//   memory: A and C as a whole, and the kept packed A (gemm.cpp) when N > NC.
// So KC comes from L1 and the micro-tile (shortened if the B panel would be too narrow), NC
// from L2 or the share of L3, MC from L2. The caches
// change a C element's FMAs only through KC, so results depend on the machine and ISA, never on
// the thread count.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/kernels/cache_info.h"
#include "core/kernels/table.h"

namespace tg::kernels {

namespace {

// bench_matmul --blocking: MC, KC, NC replacing every table's (0: none), read as one snapshot.
std::mutex g_override_mutex;
int64_t g_override[3] = {0, 0, 0};

constexpr int64_t kMaxBlock[3] = {8192, 8192, 65536};  // MC, KC, NC
constexpr int64_t kMinNC = 1024;                       // see derive_blocking

// v rounded down to a multiple of m, and at least m.
int64_t round_down(int64_t v, int64_t m) { return std::max(m, v / m * m); }

// TAPEGRAD_GEMM_BLOCKING, parsed once: mc == 0 when unset; error non-empty when malformed.
struct EnvBlocking {
  int64_t mc = 0, kc = 0, nc = 0;
  std::string error;
};

EnvBlocking read_env() {
  EnvBlocking e;
  const char* s = std::getenv("TAPEGRAD_GEMM_BLOCKING");
  if (s == nullptr || *s == '\0') return e;
  int64_t v[3];
  if (!parse_gemm_blocking(s, v, e.error))
    e.error = "TAPEGRAD_GEMM_BLOCKING: " + e.error;
  else
    e.mc = v[0], e.kc = v[1], e.nc = v[2];
  return e;
}

EnvBlocking g_env = read_env();  // guarded by g_override_mutex

}  // namespace

void reload_gemm_blocking_env() {
  EnvBlocking e = read_env();
  const std::lock_guard<std::mutex> lock(g_override_mutex);
  g_env = std::move(e);
}

bool parse_gemm_blocking(const std::string& s, int64_t out[3], std::string& error) {
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? s.find(',', pos) : s.size();
    const std::string part = end == std::string::npos ? "" : s.substr(pos, end - pos);
    const bool digits = !part.empty() && part.size() <= 6 &&
                        part.find_first_not_of("0123456789") == std::string::npos;
    out[i] = digits ? std::stoll(part) : 0;
    if (out[i] < 1 || out[i] > kMaxBlock[i]) {
      error = "'" + s + "' is not MC,KC,NC: three positive integers (MC and KC at most 8192, NC " +
              "at most 65536), e.g. 240,256,1024";
      return false;
    }
    pos = end + 1;
  }
  return true;
}

void set_sgemm_blocking_override(int64_t mc, int64_t kc, int64_t nc) {
  const std::lock_guard<std::mutex> lock(g_override_mutex);
  g_override[0] = mc, g_override[1] = kc, g_override[2] = nc;
}

GemmBlocking derive_blocking(const GemmBlocking& table, const CacheInfo& c) {
  GemmBlocking bk = table;
  const int64_t f = sizeof(float);
  if (c.l1d.bytes > 0 && c.l1d.ways > 2) {
    // The paper's kc = C_Ar·(way bytes)/(MR·4) for the resident micro-panel, with C_Ar all the
    // ways but two: one for the B micro-panel's lines passing through (read once per call, they
    // need no residency; the paper's share for the second panel is for BLIS's order, where it
    // is reused) and one for C and the stack. A multiple of 8 (whole lines), at least 128, at
    // most 512: beyond that the C tile's reload is under 0.5% of a call, and a longer KC only
    // grows the packed panels (measurements: bench/README.md, "The GEMM's constants").
    const int64_t way = c.l1d.bytes / c.l1d.ways;
    bk.kc = std::clamp<int64_t>((c.l1d.ways - 2) * way / (bk.mr * f) / 8 * 8, 128, 512);
  }
  if (c.l2.bytes > 0) {
    // The B panel kc×nc is reused by every row panel of every row block, and each micro-kernel
    // call streams one of its micro-panels: 4/MR bytes per FMA lane, over 8 bytes a cycle for
    // AVX2's 6-row tile on a core with two 8-lane FMA units. An L3 that streams a panel as L2
    // does (CacheInfo::l3_streams_panel) keeps up with half of that (MR >= 8), so such tiles
    // may use this core's share of L3 (at most twice L2: the C rows a row panel updates, MR×nc,
    // should stay in L2), and a 6-row tile's panel may take all of L2. Otherwise the panel
    // keeps to half of L2, beside the A block being packed and C's rows.
    int64_t panel = c.l3_streams_panel ? c.l2.bytes : c.l2.bytes / 2;
    if (c.l3_streams_panel && bk.mr >= 8 && c.l3.bytes > 0 && c.l3.shared_by > 0)
      panel = std::clamp(c.l3.bytes / c.l3.shared_by, panel, 2 * panel);
    // NC at least kMinNC, shortening KC if need be: each column block reads (and packs, or reads
    // the kept copy of) all of A again.
    bk.kc = std::max<int64_t>(128, std::min(bk.kc, panel / (kMinNC * f) / 8 * 8));
    bk.nc = round_down(panel / (bk.kc * f), bk.nr);
    // The A block mc×kc: a quarter of L2, beside the part of the B panel that L2 holds; packed
    // just before its row panels are read back.
    bk.mc = round_down(c.l2.bytes / 4 / (bk.kc * f), bk.mr);
  }
  // Whatever the caches claim (a hypervisor may report anything), the blocks stay within what
  // TAPEGRAD_GEMM_BLOCKING accepts, so the packing buffers stay bounded.
  bk.mc = std::min(bk.mc, round_down(kMaxBlock[0], bk.mr));
  bk.kc = std::min(bk.kc, kMaxBlock[1]);
  bk.nc = std::min(bk.nc, round_down(kMaxBlock[2], bk.nr));
  return bk;
}

namespace {

// gemm_blocking_for's rule from a table's own blocks; derive: whether the caches may replace them.
GemmBlocking blocking_for(GemmBlocking bk, bool derive, const char** source) {
  const char* from = "table";
  EnvBlocking env;
  {
    const std::lock_guard<std::mutex> lock(g_override_mutex);
    if (g_override[0] > 0) {
      bk.mc = g_override[0], bk.kc = g_override[1], bk.nc = g_override[2];
      if (source != nullptr) *source = "--blocking";
      return bk;
    }
    env = g_env;
  }
  if (!env.error.empty()) throw std::invalid_argument(env.error);
  if (env.mc > 0) {
    bk.mc = env.mc, bk.kc = env.kc, bk.nc = env.nc;
    from = "TAPEGRAD_GEMM_BLOCKING";
  } else if (derive && cache_info().l1d.bytes > 0) {
    bk = derive_blocking(bk, cache_info());
    from = "caches";
  }
  if (source != nullptr) *source = from;
  return bk;
}

}  // namespace

// The scalar table is the oracle, not a fast path: it keeps its own small blocks.
GemmBlocking gemm_blocking_for(const KernelTable& t, const char** source) {
  return blocking_for(t.sgemm_blocking, &t != &kScalarTable, source);
}

// A pair of bf16 takes the bytes of one float, so the float model, read in pairs, sizes the bf16
// panels: KC pairs of the A micro-panel in L1, the B panel of KC pairs × NC in L2, and so on.
GemmBlocking gemm_bf16_blocking_for(const KernelTable& t, const char** source) {
  return blocking_for(t.gemm_bf16_blocking, &t != &kScalarTable, source);
}

}  // namespace tg::kernels
