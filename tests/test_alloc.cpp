// core/alloc.h: large blocks are reused by size class, and live + cached bytes never pass the
// largest live total, so the cache makes no process larger than it would be without it.
#include <cstring>
#include <vector>

#include "core/alloc.h"
#include "core/tensor.h"
#include "doctest/doctest.h"

namespace alloc = tg::alloc;

TEST_CASE("alloc: a freed large block serves the next request of its class; small ones are malloc's") {
  alloc::empty_cache();
  const size_t mib = size_t(1) << 20;
  void* a = alloc::allocate(5 * mib);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  std::memset(a, 1, 5 * mib);  // the whole request is usable
  alloc::release(a, 5 * mib);
  const alloc::Stats before = alloc::stats();
  // 5 MiB - 1000 bytes rounds up to the same class (multiples of 256 KiB between 4 and 8 MiB).
  void* b = alloc::allocate(5 * mib - 1000);
  const alloc::Stats after = alloc::stats();
  if (alloc::caching()) {
    CHECK(b == a);
    CHECK(after.hits == before.hits + 1);
    CHECK(after.cached_bytes + 5 * mib == before.cached_bytes);
  } else {
    CHECK(after.cached_bytes == 0);  // AddressSanitizer: every block goes back at once
  }
  alloc::release(b, 5 * mib - 1000);
  void* s = alloc::allocate(100);  // below 1 MiB: never counted
  CHECK(alloc::stats().live_bytes == after.live_bytes - (alloc::caching() ? 5 * mib : 0));
  alloc::release(s, 100);
  alloc::empty_cache();
  CHECK(alloc::stats().cached_bytes == 0);
}

TEST_CASE("alloc: live + cached bytes stay at or below the largest live total") {
  alloc::empty_cache();
  const size_t mib = size_t(1) << 20;
  const size_t base = alloc::stats().live_bytes;  // tensors other tests keep alive
  // Blocks of many classes, freed, then requests of classes nothing cached fits: each miss must
  // evict enough that the total stays under the mark.
  std::vector<void*> blocks;
  for (size_t i = 1; i <= 8; ++i) blocks.push_back(alloc::allocate(i * mib));
  for (size_t i = 0; i < blocks.size(); ++i) alloc::release(blocks[i], (i + 1) * mib);
  const size_t peak = alloc::stats().peak_bytes;
  CHECK(peak >= base + 36 * mib);
  for (size_t i = 0; i < 20; ++i) {
    const size_t n = 3 * mib + 300 * 1024 * (i % 7) + 12345;
    void* p = alloc::allocate(n);
    REQUIRE(p != nullptr);
    const alloc::Stats st = alloc::stats();
    CAPTURE(i);
    CHECK(st.live_bytes + st.cached_bytes <= std::max(peak, st.peak_bytes));
    alloc::release(p, n);
  }
  alloc::empty_cache();
}

TEST_CASE("alloc: tensors' storage goes through it, and a tensor's data survives reuse") {
  alloc::empty_cache();
  for (int round = 0; round < 3; ++round) {
    tg::Tensor t = tg::zeros({512, 1024});  // 2 MiB of float32
    CHECK(t.data<float>()[0] == 0.0f);
    CHECK(t.data<float>()[512 * 1024 - 1] == 0.0f);  // zeros() fills a reused block too
    t.data<float>()[7] = 3.0f;
  }
  if (alloc::caching()) CHECK(alloc::stats().hits >= 2);
  alloc::empty_cache();
}
