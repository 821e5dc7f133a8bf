// The cache of big tensor buffers. glibc's malloc maps a block of 32 MiB or more afresh each time
// (its largest mmap threshold) and unmaps it on free; smaller ones come from its heap, which it
// trims as soon as the free space at the top passes twice the mmap threshold. Either way a tensor
// freed and allocated again is faulted in page by page again: on a Zen 5 VM a 4 KiB first-touch
// fault cost ~13 us, a fresh 384 MiB buffer took 1.3 s to fill (longer than the attention that
// wrote it), and the fused attention's backward, whose three 24 MiB float32 gradients the heap
// gave back each step, spent a third of its time at 2 threads faulting (both threads wait on the
// kernel's lock). A training step or a benchmark loop allocates the same sizes each time, so
// blocks of 1 MiB and more are kept and handed out again, as PyTorch's CUDA caching allocator does
// with device memory.
//
// Bounded: the idle blocks hold at most TAPEGRAD_BLOCK_CACHE_MB (2048 by default; 0 caches
// nothing), the oldest freed first. A block serves a request of its capacity down to 8/9 of it,
// so a slightly smaller tensor does not map a new one while a near-fit sits idle.
#include "core/block_cache.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <new>
#include <string>

#include "core/tensor.h"

#if defined(__SANITIZE_ADDRESS__)
#define TG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_ASAN 1
#endif
#endif
#ifdef TG_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace tg {

namespace {
constexpr size_t kCacheFrom = size_t(1) << 20;
constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGlibcMmapMax = size_t(32) << 20;  // DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
constexpr size_t kMaxMiB = size_t(1) << 24;         // 16 TiB: past any machine, short of overflow

// An idle block's own first bytes hold its place in the list, so that keeping a block allocates
// nothing: the cache can then give memory back from inside operator new (its new_handler) without
// meeting itself half-way through an allocation.
struct Idle {
  Idle *prev, *next;
  size_t capacity, align;
};

// Under AddressSanitizer an idle block is poisoned past its list node, so a tensor used after its
// free is still reported as it would be without the cache.
void poison(Idle* b, bool on) {
#ifdef TG_ASAN
  char* const p = reinterpret_cast<char*>(b) + sizeof(Idle);
  if (on)
    ASAN_POISON_MEMORY_REGION(p, b->capacity - sizeof(Idle));
  else
    ASAN_UNPOISON_MEMORY_REGION(p, b->capacity - sizeof(Idle));
#else
  (void)b, (void)on;
#endif
}

struct Cache {
  std::mutex m;
  Idle *oldest = nullptr, *newest = nullptr;
  size_t bytes = 0, limit = 0;

  // Called with m held, as the two below.
  void unlink(Idle* b) {
    (b->prev ? b->prev->next : oldest) = b->next;
    (b->next ? b->next->prev : newest) = b->prev;
    bytes -= b->capacity;
    poison(b, false);
  }
  void keep(void* p, size_t capacity, size_t align) {
    auto* b = new (p) Idle{newest, nullptr, capacity, align};
    (newest ? newest->next : oldest) = b;
    newest = b;
    bytes += capacity;
    poison(b, true);
  }
  // Frees the oldest idle blocks until `bytes` is at most `keep_bytes`.
  void trim(size_t keep_bytes) {
    while (oldest != nullptr && bytes > keep_bytes) {
      Idle* const b = oldest;
      unlink(b);
      ::operator delete(static_cast<void*>(b), std::align_val_t(b->align));
    }
  }
};

Cache& cache();

// glibc raises its mmap threshold to the size of each mapped block it frees (up to 32 MiB) and its
// trim threshold to twice that, so that a program's recurring sizes come from its heap. The
// cache now takes every free of 1 MiB and more, glibc sees none, and the thresholds stay at their
// 128 KiB start: every buffer between 128 KiB and 1 MiB (the kernels' packing scratch among them)
// was mapped afresh and faulted in on each call, and the bf16 attention's forward ran 4x slower.
// They are set where glibc's own rule would have taken them.
void settle_malloc_thresholds() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, int(kGlibcMmapMax));
  mallopt(M_TRIM_THRESHOLD, int(2 * kGlibcMmapMax));
#endif
}

// operator new calls this when it finds no memory: the idle blocks are freed and it tries again;
// with none left, whatever handler was there before (or std::bad_alloc). So what the cache holds
// never makes an allocation fail that would have succeeded without it.
std::new_handler g_previous_handler = nullptr;
void give_back_idle_blocks() {
  Cache& c = cache();
  {
    const std::lock_guard<std::mutex> lock(c.m);
    if (c.bytes > 0) {
      c.trim(0);
      return;
    }
  }
  if (g_previous_handler != nullptr) return g_previous_handler();
  throw std::bad_alloc();
}

Cache& cache() {
  // Never destroyed: tensors held by other statics are freed after it would be.
  // The variable is read first: a bad one throws before anything is made.
  static Cache* c = [] {
    const size_t limit = block_cache_mb_from(std::getenv("TAPEGRAD_BLOCK_CACHE_MB")) * kMiB;
    auto* made = new Cache;
    made->limit = limit;
    g_previous_handler = std::set_new_handler(give_back_idle_blocks);
    settle_malloc_thresholds();
    return made;
  }();
  return *c;
}
}  // namespace

size_t block_cache_mb_from(const char* text) {
  if (text == nullptr || *text == '\0') return 2048;
  const std::string s(text);
  const bool digits = s.size() <= 8 && std::all_of(s.begin(), s.end(),
                                                   [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits || (s.size() > 1 && s[0] == '0') || size_t(std::stoull(s)) > kMaxMiB)
    throw std::invalid_argument("TAPEGRAD_BLOCK_CACHE_MB='" + s +
                                "' is not a size: use a whole number of MiB up to 16777216, 0 to "
                                "cache nothing (the default is 2048)");
  return size_t(std::stoull(s));
}

size_t block_cache_limit_mb() { return cache().limit / kMiB; }
void empty_cache() { detail::block_cache_trim_all(); }

namespace detail {

void* block_acquire(size_t n, size_t align, size_t* capacity) {
  if (n >= kCacheFrom) {
    Cache& c = cache();
    const std::lock_guard<std::mutex> lock(c.m);
    Idle* best = nullptr;
    for (Idle* b = c.oldest; b != nullptr; b = b->next)
      if (b->align == align && b->capacity >= n && b->capacity - n <= n / 8 &&
          (best == nullptr || b->capacity < best->capacity))
        best = b;
    if (best != nullptr) {
      c.unlink(best);
      *capacity = best->capacity;
      return best;
    }
  }
  *capacity = n;
  return ::operator new(n, std::align_val_t(align), std::nothrow);
}

void block_release(void* p, size_t capacity, size_t align) {
  if (capacity >= kCacheFrom) {
    Cache& c = cache();
    const std::lock_guard<std::mutex> lock(c.m);
    if (capacity <= c.limit) {
      c.trim(c.limit - capacity);
      c.keep(p, capacity, align);
      return;
    }
  }
  ::operator delete(p, std::align_val_t(align));
}

void block_cache_trim_all() {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.m);
  c.trim(0);
}

size_t block_cache_bytes() {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.m);
  return c.bytes;
}

void set_block_cache_limit(size_t bytes) {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.m);
  c.limit = bytes;
  c.trim(bytes);
}

}  // namespace detail
}  // namespace tg
