// A caching allocator for devices whose raw allocation is slow or synchronising (cudaMalloc,
// cudaFree): freed blocks go to per-size-class free lists and are handed out again for the
// same class. The device accounting (Device::allocate/release: current, peak, categories,
// limit) sits above it and counts requested bytes, so it is unchanged; this layer only adds
// the reserved-but-free bytes, reported by cached_bytes().
//
// Size classes: requests round up to 512 bytes below 1 MiB and to 2 MiB above (PyTorch's
// CUDA caching allocator uses the same two granularities), so a class wastes at most 512 B
// or 2 MiB per block. Blocks are never split or merged. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dscpp {

class CachingAllocator {
 public:
  // raw_alloc returns nullptr on failure; raw_free releases what raw_alloc returned.
  CachingAllocator(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free);
  ~CachingAllocator();  // returns every cached block; blocks still handed out are leaked by the caller
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t size_class(size_t bytes);

  // A block of at least `bytes` (0 → nullptr). On a raw failure the cache is emptied and the
  // allocation retried once; nullptr if it still fails.
  void* allocate(size_t bytes);
  void release(void* ptr);  // back to its class's free list (nullptr: nothing)
  void empty_cache();       // returns every free block to the raw allocator

  size_t cached_bytes() const;    // reserved and free
  size_t reserved_bytes() const;  // reserved in total (free + handed out)

 private:
  std::function<void*(size_t)> raw_alloc_;
  std::function<void(void*)> raw_free_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // class size → free blocks
  std::unordered_map<void*, size_t> live_;     // handed-out block → class size
  size_t cached_ = 0, reserved_ = 0;
  void empty_cache_locked();
};

}  // namespace dscpp
