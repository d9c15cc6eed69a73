#include "core/protected_memory.h"

#include "core/error.h"
#include "core/knobs.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string_view>

namespace dscpp {
namespace {

constexpr size_t kPage = 4096;
// Address space only: MAP_NORESERVE, and a page costs memory only once it is written.
constexpr size_t kReserve = size_t(1) << 38;  // 256 GiB

size_t round_pages(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// The reserved range, its protection and a first-fit free list of whole pages. Never destroyed:
// blocks may be released while other statics are being torn down.
class Region {
 public:
  Region() {
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fail("protected memory: reserving {} GiB of address space failed: {}", kReserve >> 30, std::strerror(errno));
    base_ = static_cast<char*>(p);
    const char* env = knob("DSCPP_PROTECTED_MEMORY");
    const std::string_view want = env != nullptr ? env : "";
    if (!want.empty() && want != "keys" && want != "mprotect")
      fail("DSCPP_PROTECTED_MEMORY='{}': expected keys (per-thread protection keys, the default where the CPU has "
           "them) or mprotect",
           want);
    if (want != "mprotect") {
      // The key starts with access disabled for this thread; every other thread already has it
      // disabled (the kernel's default rights deny every key but 0).
      pkey_ = pkey_alloc(0, PKEY_DISABLE_ACCESS);
      if (pkey_ >= 0 && pkey_mprotect(base_, kReserve, PROT_READ | PROT_WRITE, pkey_) != 0) {
        pkey_free(pkey_);
        pkey_ = -1;
      }
    }
  }

  bool keys() const { return pkey_ >= 0; }
  int pkey() const { return pkey_; }

  void* allocate(size_t bytes) {
    const size_t size = round_pages(bytes == 0 ? 1 : bytes);
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const size_t offset = it->first, rest = it->second - size;
      free_.erase(it);
      if (rest > 0) free_[offset + size] = rest;
      return base_ + offset;
    }
    if (size > kReserve - top_) return nullptr;
    const size_t offset = top_;
    top_ += size;
    // mprotect mode: pages past the old top were left closed by the scope that is open now.
    if (!keys() && process_open_ > 0) protect(base_ + offset, size, PROT_READ | PROT_WRITE);
    return base_ + offset;
  }

  void release(void* ptr, size_t bytes) {
    const size_t size = round_pages(bytes == 0 ? 1 : bytes);
    madvise(ptr, size, MADV_DONTNEED);  // private anonymous pages: gone, and zero when touched again
    std::lock_guard lock(mu_);
    size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - base_), length = size;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + length) {
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += length;
        return;
      }
    }
    free_[offset] = length;
  }

  bool contains(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
    return a >= b && a < b + kReserve;
  }

  // mprotect mode: the first scope in the process opens what has been handed out, the last closes it.
  void open_process() {
    std::lock_guard lock(mu_);
    if (process_open_++ == 0 && top_ > 0) protect(base_, top_, PROT_READ | PROT_WRITE);
  }
  void close_process() {
    std::lock_guard lock(mu_);
    if (--process_open_ == 0 && top_ > 0) protect(base_, top_, PROT_NONE);
  }

 private:
  static void protect(void* p, size_t bytes, int prot) {
    if (mprotect(p, bytes, prot) != 0) fail("protected memory: mprotect failed: {}", std::strerror(errno));
  }

  char* base_ = nullptr;
  int pkey_ = -1;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset → bytes, coalesced
  size_t top_ = 0;                 // bytes of the range ever handed out, from its start
  int process_open_ = 0;           // mprotect mode: scopes open in the process
};

std::atomic<Region*> made{nullptr};

Region& region() {
  static Region* r = [] {
    auto* fresh = new Region;
    made = fresh;
    return fresh;
  }();
  return *r;
}

thread_local int depth = 0;

}  // namespace

void* protected_allocate(size_t bytes) { return region().allocate(bytes); }
void protected_release(void* ptr, size_t bytes) {
  if (ptr != nullptr) region().release(ptr, bytes);
}
bool protected_contains(const void* ptr) { return region().contains(ptr); }
const char* protected_mechanism() {
  return region().keys() ? "protection keys (per thread)" : "mprotect (whole process)";
}

ProtectedAccess::ProtectedAccess() {
  if (depth++ > 0) return;
  Region& r = region();
  if (r.keys())
    pkey_set(r.pkey(), 0);
  else
    r.open_process();
}

ProtectedAccess::~ProtectedAccess() {
  if (--depth > 0) return;
  Region& r = region();
  if (r.keys())
    pkey_set(r.pkey(), PKEY_DISABLE_ACCESS);
  else
    r.close_process();
}

bool ProtectedAccess::open_here() { return depth > 0; }

void ProtectedAccess::close_this_thread() {
  // Without a region nothing was ever opened, and threads of CPU-only runs should not make one.
  const Region* r = made.load();
  if (depth == 0 && r != nullptr && r->keys()) pkey_set(r->pkey(), PKEY_DISABLE_ACCESS);
}

}  // namespace dscpp
