// The cache of big tensor buffers (core/block_cache.cpp): which blocks it keeps, which requests it
// serves from them, its limit, and the one-line refusal of a bad TAPEGRAD_BLOCK_CACHE_MB.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/block_cache.h"
#include "core/impl.h"
#include "core/ops.h"

using namespace tg;

namespace {
constexpr int64_t kMiBFloats = int64_t(1) << 18;  // floats in one MiB
constexpr size_t kMiB = size_t(1) << 20;

const void* address(const Tensor& t) { return t.impl()->storage->data; }

// Runs a test case at a limit of its own, from an empty cache, and leaves the process's limit and
// an empty cache behind.
struct WithLimit {
  size_t saved = block_cache_limit_mb() * kMiB;
  explicit WithLimit(size_t mb) {
    detail::set_block_cache_limit(mb * kMiB);
    empty_cache();
  }
  ~WithLimit() {
    empty_cache();
    detail::set_block_cache_limit(saved);
  }
};
}  // namespace

TEST_CASE(
    "TAPEGRAD_BLOCK_CACHE_MB is a whole number of MiB, and anything else is refused naming it") {
  CHECK(block_cache_mb_from(nullptr) == 2048);
  CHECK(block_cache_mb_from("") == 2048);
  CHECK(block_cache_mb_from("0") == 0);
  CHECK(block_cache_mb_from("512") == 512);
  CHECK(block_cache_mb_from("16777216") == 16777216);
  for (const char* bad : {"lots", "-1", " 5", "5 ", "05", "1e3", "1.5", "16777217", "999999999"}) {
    std::string what;
    try {
      block_cache_mb_from(bad);
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    CHECK(what == std::string("TAPEGRAD_BLOCK_CACHE_MB='") + bad +
                      "' is not a size: use a whole number of MiB up to 16777216, 0 to cache "
                      "nothing (the default is 2048)");
  }
}

TEST_CASE("a freed buffer of 1 MiB or more serves the next tensor of about its size") {
  const WithLimit limit(256);
  Tensor a = empty({40 * kMiBFloats});
  const void* first = address(a);
  a = Tensor();
  CHECK(detail::block_cache_bytes() == 40 * kMiB);
  // Down to 8/9 of the block's size it is taken again, whatever the shape or dtype.
  Tensor b = empty({9 * kMiBFloats, 2}, DType::Float64);  // 36 MiB
  CHECK(address(b) == first);
  CHECK(detail::block_cache_bytes() == 0);
  b = Tensor();
  // Smaller than that, a block of its own; the idle one stays.
  Tensor c = empty({35 * kMiBFloats});
  CHECK(address(c) != first);
  CHECK(detail::block_cache_bytes() == 40 * kMiB);
  c = Tensor();
  CHECK(detail::block_cache_bytes() == 75 * kMiB);
  // Under 1 MiB a block goes back to glibc's heap.
  { const Tensor d = empty({kMiBFloats - 16}); }
  CHECK(detail::block_cache_bytes() == 75 * kMiB);
  { const Tensor e = empty({kMiBFloats}); }
  CHECK(detail::block_cache_bytes() == 76 * kMiB);
}

TEST_CASE("the cache holds no more than its limit, freeing the oldest blocks first") {
  const WithLimit limit(100);
  std::vector<Tensor> ts;
  for (int i = 0; i < 3; ++i) ts.push_back(empty({(40 + i) * kMiBFloats}));
  const void* newest = address(ts[2]);
  ts.clear();  // frees 40, 41 then 42 MiB: the 40 MiB block goes to make room for the 42
  CHECK(detail::block_cache_bytes() == 83 * kMiB);
  CHECK(address(empty({42 * kMiBFloats})) == newest);
  empty_cache();
  CHECK(detail::block_cache_bytes() == 0);
  detail::set_block_cache_limit(0);
  { const Tensor d = empty({40 * kMiBFloats}); }
  CHECK(detail::block_cache_bytes() == 0);
}

TEST_CASE("a reused block gives its new tensor the values written to it, from several threads") {
  const WithLimit limit(512);
  std::vector<std::thread> team;
  std::vector<int> bad(2, 0);
  for (int id = 0; id < 2; ++id)
    team.emplace_back([id, &bad] {
      for (int round = 0; round < 4; ++round) {
        const double v = id * 10 + round;
        const Tensor t = full({33 * kMiBFloats}, v);
        const float* p = t.data<float>();
        for (int64_t i = 0; i < t.numel(); i += 4099) bad[size_t(id)] += p[i] != float(v);
      }
    });
  for (std::thread& t : team) t.join();
  CHECK(bad == std::vector<int>{0, 0});
  CHECK(detail::block_cache_bytes() <= 2 * 33 * kMiB);
}

TEST_CASE("with TAPEGRAD_HUGE_PAGES=1 a buffer of 32 MiB is 2 MiB-aligned, from the cache too") {
  if (!huge_pages_enabled()) {
    // This binary again, this case only, with the switch on (it is read once per process). Its
    // summary must say one case ran: a filter that matched nothing would also exit 0.
    const std::string cmd = "TAPEGRAD_HUGE_PAGES=1 /proc/" + std::to_string(getpid()) +
                            "/exe --no-intro=true --no-version=true "
                            "-tc='with TAPEGRAD_HUGE_PAGES=1*' 2>&1";
    FILE* const child = popen(cmd.c_str(), "r");
    REQUIRE(child != nullptr);
    std::string out;
    for (char buf[256]; std::fgets(buf, sizeof buf, child) != nullptr;) out += buf;
    CHECK(WEXITSTATUS(pclose(child)) == 0);
    CHECK(out.find("test cases: 1 | 1 passed | 0 failed") != std::string::npos);
    return;
  }
  const WithLimit limit(256);
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  Tensor a = full({32 * kMiBFloats}, 3.0);
  const void* first = address(a);
  CHECK(reinterpret_cast<uintptr_t>(first) % kHuge == 0);
  a = Tensor();
  // Under 32 MiB the 64-byte alignment, so not that block, though its size would fit.
  const Tensor b = full({31 * kMiBFloats}, 1.0);
  CHECK(address(b) != first);
  CHECK(reinterpret_cast<uintptr_t>(address(b)) % 64 == 0);
  // 32 MiB again, an op's output: that block, with the op's values.
  const Tensor c = cat({b, full({kMiBFloats}, 2.0)}, 0);
  CHECK(address(c) == first);
  CHECK(c.data<float>()[31 * kMiBFloats - 1] == 1.0f);
  CHECK(c.data<float>()[32 * kMiBFloats - 1] == 2.0f);
}

TEST_CASE("when operator new finds no memory, the idle blocks are given back before it gives up") {
  const WithLimit limit(256);
  { const Tensor a = empty({40 * kMiBFloats}); }
  REQUIRE(detail::block_cache_bytes() == 40 * kMiB);
  // What operator new calls on failure, called here as it would be.
  const std::new_handler handler = std::get_new_handler();
  REQUIRE(bool(handler));
  handler();
  CHECK(detail::block_cache_bytes() == 0);
  // Nothing left to give: the failure stands.
  CHECK_THROWS_AS(handler(), std::bad_alloc);
}
