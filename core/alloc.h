// Tensor storage blocks: 64-byte aligned, and the large ones reused.
//
// A training step frees and allocates the same large buffers every step (activations, logits,
// gradients). Returned to malloc, a block of more than 32 MiB (glibc's largest mmap threshold)
// goes back to the OS, and the next step's block of that size is a fresh mapping whose every
// page faults on first touch: on a virtual machine that was ~16% of a gpt2-124m step. So blocks
// of 1 MiB and more are kept when freed, by size class (sizes rounded up to 1/16 of their power of
// two, so at most ~6% is wasted), and handed to the next request of their class.
//
// The cache never makes the process larger than it would be without it: live plus cached bytes
// stay at or below the largest live total so far (a miss evicts cached blocks, largest first,
// until the new block fits under that mark). Under AddressSanitizer nothing is cached, so a use
// after free is still caught.
#pragma once
#include <cstddef>

namespace tg::alloc {

// nbytes (at least 1) 64-byte aligned; nullptr when out of memory (the cache emptied first).
void* allocate(size_t nbytes);
// A block from allocate(nbytes), with the same nbytes.
void release(void* p, size_t nbytes) noexcept;
// Gives every cached block back.
void empty_cache() noexcept;

// Whether large blocks are kept (false under AddressSanitizer).
bool caching();

struct Stats {
  size_t live_bytes = 0, cached_bytes = 0, peak_bytes = 0;  // large blocks, by class size
  size_t hits = 0, misses = 0;
};
Stats stats();

}  // namespace tg::alloc
