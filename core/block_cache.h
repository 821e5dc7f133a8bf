// The cache of big tensor buffers (core/block_cache.cpp): a freed buffer of 1 MiB or more is kept
// for the next tensor of about its size instead of going back to the OS, as PyTorch's CUDA caching
// allocator keeps device blocks. Internal to core/; tg::empty_cache() in tensor.h is its face.
#pragma once

#include <cstddef>

namespace tg::detail {

// A block for n bytes at this alignment: a cached one of capacity n to n + n/8 (the smallest such),
// or a fresh one. Its capacity (what release must be given) is written to *capacity. nullptr when
// the OS has no memory left.
void* block_acquire(size_t n, size_t align, size_t* capacity);

// Gives a block back: cached when it is big enough to be worth it and the cache has room (the
// oldest blocks are freed to make room), freed otherwise.
void block_release(void* p, size_t capacity, size_t align);

// The bytes held idle in the cache.
size_t block_cache_bytes();
// Sets the limit (bytes; 0: nothing cached), freeing the oldest blocks above it. For tests.
void set_block_cache_limit(size_t bytes);
// Frees every idle block (tg::empty_cache).
void block_cache_trim_all();

}  // namespace tg::detail
