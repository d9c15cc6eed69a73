#include "offload/aligned_buffer.h"

#include "core/byte_size.h"
#include "core/error.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dscpp::offload {
namespace {

std::atomic<int64_t> g_current{0}, g_peak{0}, g_locked{0};

void count(int64_t delta, bool locked) {
  int64_t now = g_current.fetch_add(delta) + delta;
  if (locked) g_locked.fetch_add(delta);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

std::string memlock_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return "unknown";
  return r.rlim_cur == RLIM_INFINITY ? "unlimited" : format_bytes(static_cast<int64_t>(r.rlim_cur));
}

}  // namespace

HostBufferStats host_buffer_stats() {
  return {g_current.load(), g_peak.load(), g_locked.load()};
}

AlignedBuffer::AlignedBuffer(int64_t bytes, AlignedBufferOptions options) {
  if (bytes <= 0) fail("aligned buffer: size must be positive, got {}", bytes);
  int64_t capacity = round_up(bytes, kDirectIoAlignment);
  void* p = nullptr;
  int err = posix_memalign(&p, kDirectIoAlignment, static_cast<size_t>(capacity));
  if (err != 0)
    fail("cannot allocate a {} host buffer aligned to {} bytes: {} (lower buffer_count/buffer_size or free memory)",
         format_bytes(capacity), kDirectIoAlignment, std::strerror(err));
  if (options.zero) std::memset(p, 0, static_cast<size_t>(capacity));
  if (options.lock && mlock(p, static_cast<size_t>(capacity)) != 0) {
    int e = errno;
    std::free(p);
    fail(
        "cannot lock (pin) a {} host buffer: {}; the memlock limit is {} (raise `ulimit -l`, run with "
        "CAP_IPC_LOCK, or set pin_memory false)",
        format_bytes(capacity), std::strerror(e), memlock_limit());
  }
  data_ = static_cast<char*>(p);
  size_ = bytes;
  capacity_ = capacity;
  locked_ = options.lock;
  count(capacity_, locked_);
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    locked_ = std::exchange(o.locked_, false);
  }
  return *this;
}

void AlignedBuffer::reset() {
  if (!data_) return;
  if (locked_) munlock(data_, static_cast<size_t>(capacity_));
  std::free(data_);
  count(-capacity_, locked_);
  data_ = nullptr;
  size_ = capacity_ = 0;
  locked_ = false;
}

}  // namespace dscpp::offload
