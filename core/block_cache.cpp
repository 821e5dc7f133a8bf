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
#include <new>
#include <string>
#include <vector>

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
constexpr size_t kMaxMiB = size_t(1) << 24;  // 16 TiB: past any machine, short of overflow

// Under AddressSanitizer an idle block is poisoned, so a tensor used after its free is still
// reported as it would be without the cache.
void poison(void* p, size_t n, bool on) {
#ifdef TG_ASAN
  if (on)
    ASAN_POISON_MEMORY_REGION(p, n);
  else
    ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n, (void)on;
#endif
}

struct Idle {
  void* p;
  size_t capacity, align;
};

struct Cache {
  std::mutex m;
  std::vector<Idle> idle;  // oldest first
  size_t bytes = 0, limit = 0;

  // Frees the oldest idle blocks until `bytes` is at most `keep`. Called with m held.
  void trim(size_t keep) {
    size_t i = 0;
    for (; i < idle.size() && bytes > keep; ++i) {
      poison(idle[i].p, idle[i].capacity, false);
      ::operator delete(idle[i].p, std::align_val_t(idle[i].align));
      bytes -= idle[i].capacity;
    }
    idle.erase(idle.begin(), idle.begin() + std::ptrdiff_t(i));
  }
};

Cache& cache() {
  // Never destroyed: tensors held by other statics are freed after it would be.
  // The variable is read first: a bad one throws before anything is made.
  static Cache* c = [] {
    const size_t limit = block_cache_mb_from(std::getenv("TAPEGRAD_BLOCK_CACHE_MB")) * kMiB;
    auto* made = new Cache;
    made->limit = limit;
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
    size_t best = c.idle.size();
    for (size_t i = 0; i < c.idle.size(); ++i) {
      const Idle& b = c.idle[i];
      if (b.align == align && b.capacity >= n && b.capacity - n <= n / 8 &&
          (best == c.idle.size() || b.capacity < c.idle[best].capacity))
        best = i;
    }
    if (best < c.idle.size()) {
      const Idle b = c.idle[best];
      c.idle.erase(c.idle.begin() + std::ptrdiff_t(best));
      c.bytes -= b.capacity;
      poison(b.p, b.capacity, false);
      *capacity = b.capacity;
      return b.p;
    }
  }
  *capacity = n;
  void* p = ::operator new(n, std::align_val_t(align), std::nothrow);
  if (p == nullptr && n >= kCacheFrom) {  // what the cache holds may be what is missing
    block_cache_trim_all();
    p = ::operator new(n, std::align_val_t(align), std::nothrow);
  }
  return p;
}

void block_release(void* p, size_t capacity, size_t align) {
  if (capacity >= kCacheFrom) {
    Cache& c = cache();
    const std::lock_guard<std::mutex> lock(c.m);
    if (capacity <= c.limit) {
      c.trim(c.limit - capacity);
      c.idle.push_back({p, capacity, align});
      c.bytes += capacity;
      poison(p, capacity, true);
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
