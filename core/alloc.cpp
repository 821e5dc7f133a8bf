// Large-block reuse for tensor storage (see alloc.h).
#include "core/alloc.h"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <new>

namespace tg::alloc {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kLarge = size_t(1) << 20;  // below: malloc's own bins serve well

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif

// nbytes rounded up to a multiple of 1/16 of its power of two.
size_t class_of(size_t nbytes) {
  const size_t step = std::bit_floor(nbytes) / 16;
  return (nbytes + step - 1) / step * step;
}

void* system_alloc(size_t n) { return ::operator new(n, std::align_val_t(kAlign), std::nothrow); }
void system_free(void* p) { ::operator delete(p, std::align_val_t(kAlign)); }

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> blocks;  // class size -> a free block of it
  Stats stats;

  // Frees cached blocks, largest first, until live + cached <= peak. Holds mu.
  void trim() {
    while (!blocks.empty() && stats.live_bytes + stats.cached_bytes > stats.peak_bytes) {
      const auto last = std::prev(blocks.end());
      stats.cached_bytes -= last->first;
      system_free(last->second);
      blocks.erase(last);
    }
  }
};

// Never destroyed: tensors in other static objects may release blocks after main returns.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

}  // namespace

void* allocate(size_t nbytes) {
  nbytes = std::max(nbytes, kAlign);
  if (!kCache || nbytes < kLarge) return system_alloc(nbytes);
  const size_t c = class_of(nbytes);
  Cache& k = cache();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    k.stats.live_bytes += c;
    k.stats.peak_bytes = std::max(k.stats.peak_bytes, k.stats.live_bytes);
    if (const auto it = k.blocks.find(c); it != k.blocks.end()) {
      void* p = it->second;
      k.blocks.erase(it);
      k.stats.cached_bytes -= c;
      ++k.stats.hits;
      return p;
    }
    ++k.stats.misses;
    k.trim();
  }
  void* p = system_alloc(c);
  if (p == nullptr) {  // what is cached may be what the system lacks
    empty_cache();
    p = system_alloc(c);
  }
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(k.mu);
    k.stats.live_bytes -= c;
  }
  return p;
}

void release(void* p, size_t nbytes) noexcept {
  nbytes = std::max(nbytes, kAlign);
  if (!kCache || nbytes < kLarge) return system_free(p);
  const size_t c = class_of(nbytes);
  Cache& k = cache();
  std::lock_guard<std::mutex> lock(k.mu);
  k.stats.live_bytes -= c;  // live + cached is unchanged: the block stays ours
  k.stats.cached_bytes += c;
  k.blocks.emplace(c, p);
}

void empty_cache() noexcept {
  Cache& k = cache();
  std::lock_guard<std::mutex> lock(k.mu);
  for (const auto& [size, p] : k.blocks) system_free(p);
  k.blocks.clear();
  k.stats.cached_bytes = 0;
}

bool caching() { return kCache; }

Stats stats() {
  Cache& k = cache();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.stats;
}

}  // namespace tg::alloc
