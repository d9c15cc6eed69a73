// Host buffers that O_DIRECT accepts: start and capacity aligned to kDirectIoAlignment.
//
// Every AlignedBuffer is counted in process-wide totals (current and peak bytes, locked bytes),
// so offload can report and bound what its pools hold the way device/device.h does for devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace dscpp::offload {

// O_DIRECT needs buffer addresses, file offsets and lengths aligned to the device's logical
// block size; 4 KiB covers 512-byte and 4Kn drives alike and is the page size, so it is the
// one alignment the engine asks of callers.
constexpr int64_t kDirectIoAlignment = 4096;

constexpr int64_t round_up(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}
inline bool is_aligned(int64_t n) {
  return n % kDirectIoAlignment == 0;
}
inline bool is_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kDirectIoAlignment == 0;
}

struct AlignedBufferOptions {
  bool zero = false;  // fill with zeros
  bool lock = false;  // mlock (pinned): kept out of swap; limited by RLIMIT_MEMLOCK unless root
};

struct HostBufferStats {
  int64_t current = 0;  // bytes held by live AlignedBuffers (capacities)
  int64_t peak = 0;
  int64_t locked = 0;  // of current, bytes that are mlocked
};
HostBufferStats host_buffer_stats();

// An owned, move-only allocation of round_up(bytes, kDirectIoAlignment) bytes. Throws
// dscpp::Error when memory (or, with `lock`, the memlock limit) runs out, with the remedy.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes, AlignedBufferOptions options = {});
  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { reset(); }

  void reset();
  char* data() const { return data_; }
  int64_t size() const { return size_; }          // as requested
  int64_t capacity() const { return capacity_; }  // size rounded up to kDirectIoAlignment
  bool locked() const { return locked_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  char* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  bool locked_ = false;
};

}  // namespace dscpp::offload
