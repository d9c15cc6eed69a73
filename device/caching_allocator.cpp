#include "device/caching_allocator.h"

#include "core/error.h"

#include <utility>

namespace dscpp {

namespace {
constexpr size_t kSmall = size_t(1) << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;
size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}
}  // namespace

CachingAllocator::CachingAllocator(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

size_t CachingAllocator::size_class(size_t bytes) {
  return bytes < kSmall ? round_up(bytes, kSmallRound) : round_up(bytes, kLargeRound);
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = free_.find(cls); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
    live_.emplace(p, cls);
    return p;
  }
  void* p = raw_alloc_(cls);
  if (p == nullptr && cached_ > 0) {  // free memory held by other classes, then retry
    empty_cache_locked();
    p = raw_alloc_(cls);
  }
  if (p == nullptr) return nullptr;
  reserved_ += cls;
  live_.emplace(p, cls);
  return p;
}

void CachingAllocator::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) fail("CachingAllocator::release: {} was not allocated here (or was released twice)", ptr);
  free_[it->second].push_back(ptr);
  cached_ += it->second;
  live_.erase(it);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  for (auto& [cls, blocks] : free_) {
    for (void* p : blocks) raw_free_(p);
    reserved_ -= cls * blocks.size();
  }
  free_.clear();
  cached_ = 0;
}

size_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

}  // namespace dscpp
