// The one dispatch point: picks the active KernelTable (TAPEGRAD_ISA, else the fastest path this
// CPU runs), and implements the public float entries of kernels.h by splitting large problems
// over the thread pool and calling the active table on each piece. GEMM lives in gemm.cpp, the
// bf16 GEMM in gemm_bf16.cpp.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "core/kernels/table.h"
#include "core/threadpool.h"

namespace tg::kernels {

namespace {

const KernelTable* find_table(const std::string& name) {
  if (name == "scalar") return &kScalarTable;
  IsaEntry e[kNativeIsas];
  native_isas(e);
  for (const IsaEntry& x : e) {
    if (name != x.name) continue;
    if (x.table == nullptr) {
      std::string avail;
      for (const std::string& a : available_isas()) avail += (avail.empty() ? "" : ", ") + a;
      throw std::runtime_error("kernel path '" + name + "' is not available: " + x.why_not +
                               " (available here: " + avail + ")");
    }
    return x.table;
  }
  throw std::invalid_argument("unknown kernel path '" + name +
                              "': use one of scalar, avx2, avx512, avx512_bf16, neon");
}

const KernelTable* table_from_env() {
  const char* s = std::getenv("TAPEGRAD_ISA");
  if (s != nullptr && *s != '\0') {
    try {
      return find_table(s);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("TAPEGRAD_ISA: ") + e.what());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("TAPEGRAD_ISA: ") + e.what());
    }
  }
  return find_table(available_isas().back());
}

std::atomic<const KernelTable*> g_active{nullptr};

// Pieces of at least this many elements (or row elements) before a job is split over threads.
constexpr int64_t kMinPerTask = int64_t(1) << 15;

// Calls f(lo, hi) over [0, n) cut into up to num_threads() · per_thread pieces of >= min_per_task
// units each (one piece on one thread), boundaries aligned to `align` units. Each unit is
// independent, so the cut cannot change results.
template <class F>
void split(int64_t n, int64_t min_per_task, int64_t align, F f, int per_thread = 1) {
  const int nt = num_threads();
  const int64_t parts =
      nt <= 1 ? 1
              : std::min<int64_t>(int64_t(nt) * per_thread, n / std::max<int64_t>(min_per_task, 1));
  if (parts <= 1) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  const int64_t units = (n + align - 1) / align;
  parallel_for(parts, [&](int64_t p) {
    const int64_t lo = std::min(n, units * p / parts * align);
    const int64_t hi = std::min(n, units * (p + 1) / parts * align);
    if (hi > lo) f(lo, hi);
  });
}

// Rows per task so that each task holds at least kMinPerTask elements.
int64_t min_rows(int64_t cols) {
  return std::max<int64_t>(1, kMinPerTask / std::max<int64_t>(cols, 1));
}

}  // namespace

const KernelTable& active_table() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = table_from_env();
    g_active.store(t, std::memory_order_release);
  }
  return *t;
}

std::vector<std::string> available_isas() {
  std::vector<std::string> names{"scalar"};
  IsaEntry e[kNativeIsas];
  native_isas(e);
  for (const IsaEntry& x : e)
    if (x.table != nullptr) names.emplace_back(x.name);
  return names;
}

std::string active_isa() { return active_table().name; }
void set_isa(const std::string& name) { g_active.store(find_table(name)); }
void set_isa_from_env() { g_active.store(table_from_env()); }

// ---- float entries: split over threads, then the active table --------------------------------
void binary(BinOp op, int64_t n, const float* a, const float* b, float* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64,
        [&](int64_t lo, int64_t hi) { t.binary(op, hi - lo, a + lo, b + lo, out + lo); });
}
void binary_rowbcast(BinOp op, int64_t rows, int64_t cols, const float* a, const float* b,
                     float* out) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
    t.binary_rowbcast(op, hi - lo, cols, a + lo * cols, b, out + lo * cols);
  });
}
void binary_scalar(BinOp op, int64_t n, const float* a, float s, float* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64,
        [&](int64_t lo, int64_t hi) { t.binary_scalar(op, hi - lo, a + lo, s, out + lo); });
}
void exp(int64_t n, const float* x, float* y) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64, [&](int64_t lo, int64_t hi) { t.exp(hi - lo, x + lo, y + lo); });
}
void softmax_rows(int64_t rows, int64_t cols, const float* x, float* y) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
    t.softmax_rows(hi - lo, cols, x + lo * cols, y + lo * cols);
  });
}
void softmax_rows_backward(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
    t.softmax_rows_backward(hi - lo, cols, y + lo * cols, dy + lo * cols, dx + lo * cols);
  });
}
void softmax_stats_rows(int64_t rows, int64_t cols, int64_t ld, const float* x, float* mx,
                        float* sum) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
    t.softmax_stats_rows(hi - lo, cols, ld, x + lo * ld, mx + lo, sum + lo);
  });
}
void exp_rows_scaled(int64_t rows, int64_t cols, int64_t ld, const float* x, const float* mx,
                     const float* scale, float* out) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
    t.exp_rows_scaled(hi - lo, cols, ld, x + lo * ld, mx + lo, scale + lo, out + lo * ld);
  });
}
void masked_fill(int64_t rows, int64_t cols, const float* x, const uint8_t* mask, int64_t mask_rows,
                 float value, float* out) {
  const KernelTable& t = active_table();
  if (mask_rows == rows) {  // a full mask moves with the rows
    split(rows, min_rows(cols), 1, [&](int64_t lo, int64_t hi) {
      t.masked_fill(hi - lo, cols, x + lo * cols, mask + lo * cols, hi - lo, value,
                    out + lo * cols);
    });
  } else if (rows % mask_rows == 0) {  // a broadcast mask: cut at whole mask repetitions
    split(rows, std::max(min_rows(cols), mask_rows), mask_rows, [&](int64_t lo, int64_t hi) {
      t.masked_fill(hi - lo, cols, x + lo * cols, mask, mask_rows, value, out + lo * cols);
    });
  } else {
    t.masked_fill(rows, cols, x, mask, mask_rows, value, out);
  }
}
void layernorm_forward(int64_t rows, int64_t C, const float* x, const float* weight,
                       const float* bias, float eps, float* out, float* mean, float* rstd) {
  const KernelTable& t = active_table();
  split(rows, min_rows(C), 1, [&](int64_t lo, int64_t hi) {
    t.layernorm_forward(hi - lo, C, x + lo * C, weight, bias, eps, out + lo * C, mean + lo,
                        rstd + lo);
  });
}
// Single-threaded: dweight and dbias sum over rows, and a split would change their rounding.
void layernorm_backward(int64_t rows, int64_t C, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, float* dx,
                        float* dweight, float* dbias) {
  active_table().layernorm_backward(rows, C, dout, x, weight, mean, rstd, dx, dweight, dbias);
}
void gelu_forward(int64_t n, const float* x, float* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask / 4, 64,
        [&](int64_t lo, int64_t hi) { t.gelu_forward(hi - lo, x + lo, out + lo); });
}
void gelu_backward(int64_t n, const float* x, const float* dout, float* dx) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask / 4, 64,
        [&](int64_t lo, int64_t hi) { t.gelu_backward(hi - lo, x + lo, dout + lo, dx + lo); });
}
void sum_rows(int64_t rows, int64_t cols, const float* x, float* out) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1,
        [&](int64_t lo, int64_t hi) { t.sum_rows(hi - lo, cols, x + lo * cols, out + lo); });
}
// The gemvs (a Linear on one row: each token of generation) are cut into kGemvPieces pieces per
// thread, taken dynamically: a worker that starts a job a little late (still in the system call of
// its spin's yield) then takes fewer pieces instead of the caller waiting for its whole half.
constexpr int kGemvPieces = 4;
void gemv_rows(int64_t rows, int64_t cols, const float* w, int64_t ldw, const float* x,
               const float* b, float* y) {
  const KernelTable& t = active_table();
  split(
      rows, min_rows(cols), 4,
      [&](int64_t lo, int64_t hi) {
        t.gemv_rows(hi - lo, cols, w + lo * ldw, ldw, x, b ? b + lo : nullptr, y + lo);
      },
      kGemvPieces);
}
// Blocks of 64 rows stay whole (the widest path's block of four 16-row groups, whose chains run
// side by side; a lone group runs slower), so no path computes a group's rows through its scalar
// tail, or a block as single groups, because of where a piece ended.
void gemv_rows_bf16(int64_t rows, int64_t cols, const uint16_t* w, int64_t ldw, const uint16_t* x,
                    const float* b, float* y) {
  const KernelTable& t = active_table();
  split(
      rows, min_rows(cols), 64,
      [&](int64_t lo, int64_t hi) {
        t.gemv_rows_bf16(hi - lo, cols, w + lo * ldw, ldw, x, b ? b + lo : nullptr, y + lo);
      },
      kGemvPieces);
}
bool gemv_packed_bf16_available() { return active_table().gemv_packed_bf16 != nullptr; }
void gemv_packed_bf16(int64_t rows, int64_t cols, const uint32_t* panels, const uint16_t* x,
                      const float* b, float* y) {
  const KernelTable& t = active_table();
  const int64_t pairs = (cols + 1) / 2;
  split(
      rows, min_rows(cols), 64,
      [&](int64_t lo, int64_t hi) {  // lo: a whole block's first row
        t.gemv_packed_bf16(hi - lo, cols, panels + lo * pairs, x, b ? b + lo : nullptr, y + lo);
      },
      kGemvPieces);
}
void max_rows(int64_t rows, int64_t cols, const float* x, float* out) {
  const KernelTable& t = active_table();
  split(rows, min_rows(cols), 1,
        [&](int64_t lo, int64_t hi) { t.max_rows(hi - lo, cols, x + lo * cols, out + lo); });
}
void sum_cols(int64_t rows, int64_t cols, const float* x, float* out) {
  active_table().sum_cols(rows, cols, x, out);
}
void adamw(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64, [&](int64_t lo, int64_t hi) {
    t.adamw(hi - lo, p + lo, g + lo, m + lo, v + lo, lr, beta1, beta2, eps, weight_decay, step);
  });
}

void adamw_to_bf16(int64_t n, float* p, const float* g, float* m, float* v, float lr, float beta1,
                   float beta2, float eps, float weight_decay, int64_t step, uint16_t* p_bf16) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kChunk = 2048;  // p's chunk (8 KiB) beside g's, m's and v's stays in L1
    for (int64_t i = lo; i < hi; i += kChunk) {
      const int64_t c = std::min(kChunk, hi - i);
      t.adamw(c, p + i, g + i, m + i, v + i, lr, beta1, beta2, eps, weight_decay, step);
      t.f32_to_bf16(c, p + i, p_bf16 + i);
    }
  });
}
void adamw_bf16(int64_t n, uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v,
                const AdamWBf16& s) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64,
        [&](int64_t lo, int64_t hi) { t.adamw_bf16(hi - lo, p + lo, g + lo, m + lo, v + lo, s); });
}

void f32_to_bf16(int64_t n, const float* x, uint16_t* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64,
        [&](int64_t lo, int64_t hi) { t.f32_to_bf16(hi - lo, x + lo, out + lo); });
}
void bf16_to_f32(int64_t n, const uint16_t* x, float* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64,
        [&](int64_t lo, int64_t hi) { t.bf16_to_f32(hi - lo, x + lo, out + lo); });
}
// Through the path's two conversions, a chunk at a time: the bf16 chunk stays in L1.
void bf16_round(int64_t n, const float* x, float* out) {
  const KernelTable& t = active_table();
  split(n, kMinPerTask, 64, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kChunk = 1024;
    uint16_t half[kChunk];
    for (int64_t i = lo; i < hi; i += kChunk) {
      const int64_t m = std::min(kChunk, hi - i);
      t.f32_to_bf16(m, x + i, half);
      t.bf16_to_f32(m, half, out + i);
    }
  });
}

// The generator's kernels stay on the calling thread: its draws are sequential.
void mt19937_twist(uint32_t* state) { active_table().mt19937_twist(state); }
void mt19937_temper(int64_t n, const uint32_t* in, uint32_t* out) {
  active_table().mt19937_temper(n, in, out);
}
void bernoulli_words(int64_t n, const uint32_t* w, uint64_t limit, float kept, float dropped,
                     float* out) {
  active_table().bernoulli_words(n, w, limit, kept, dropped, out);
}

}  // namespace tg::kernels
