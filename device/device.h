// Device: where tensors live, with every allocation counted.
//
// The engine allocates parameters, gradients, optimizer state, activations and buffers only
// through a Device, tagged with a category, so current and peak bytes are known per category.
// A limit makes the CPU device behave like a GPU of that size (ZeRO/offload are measured that
// way on machines without a GPU): exceeding it throws OutOfDeviceMemory listing the categories.
#pragma once

#include "core/error.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace dscpp {

namespace kernels {
class DeviceMath;
}

enum class MemCategory : uint8_t { params, grads, optimizer_state, activations, buffers, count };
constexpr size_t kMemCategories = static_cast<size_t>(MemCategory::count);
const char* mem_category_name(MemCategory c);

struct MemoryStats {
  std::array<int64_t, kMemCategories> current{};
  std::array<int64_t, kMemCategories> peak{};  // per category, each at its own moment
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t limit = 0;  // 0 = none
};

class OutOfDeviceMemory : public Error {
 public:
  using Error::Error;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual bool is_host() const = 0;      // pointers are plain host memory

  // Aligned to at least 64 bytes; zero-filled when `zero` is set. Throws OutOfDeviceMemory.
  void* allocate(size_t bytes, MemCategory category, bool zero = false);
  void release(void* ptr, size_t bytes, MemCategory category);

  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void copy_from_host(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void zero(void* ptr, size_t bytes) = 0;
  virtual void synchronize() {}
  // Whether `ptr` points into this device's own memory, which host code cannot touch (always
  // false for a host-memory device): how the communicators tell which buffers to stage.
  virtual bool holds(const void* ptr) const {
    (void)ptr;
    return false;
  }

  MemoryStats stats() const;
  void set_limit(int64_t bytes) { limit_ = bytes; }
  void reset_peaks();

  // The buffer math that runs on this device's memory (kernels/device_math.h, which finds it
  // through kernels::math_of). Unset, a host-memory device uses the CPU loops. Held here so
  // that every part of the engine that has the Device also has its math.
  void set_math(std::shared_ptr<kernels::DeviceMath> math) { math_ = std::move(math); }
  kernels::DeviceMath* math() const { return math_.get(); }

 protected:
  // A device whose bound math holds memory of it calls this first in its destructor: the
  // math's buffers must go back while the device can still take them.
  void drop_math() { math_.reset(); }
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;

 private:
  std::array<std::atomic<int64_t>, kMemCategories> current_{};
  std::array<std::atomic<int64_t>, kMemCategories> peak_{};
  std::atomic<int64_t> total_{0}, total_peak_{0};
  int64_t limit_ = 0;
  std::shared_ptr<kernels::DeviceMath> math_;
};

// A Device whose memory is plain host memory: copies are memcpy. The CPU devices and the pinned
// host pool of the CUDA build differ only in where their blocks come from.
class HostMemoryDevice : public Device {
 public:
  bool is_host() const override { return true; }
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
};

std::unique_ptr<Device> make_cpu_device();
// Host memory that offload moves state into (ZeRO-Offload's "CPU"), counted apart from the
// training device so that a device limit and the device peaks leave it out — on a CPU-only
// machine it is the same RAM, but a CPU device with --device_memory_limit stands for a GPU.
// (With CUDA, the pinned host pool belongs here.)
std::unique_ptr<Device> make_host_device();

// An owned allocation on a device (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& device, size_t bytes, MemCategory category, bool zero = false)
      : device_(&device), ptr_(device.allocate(bytes, category, zero)), bytes_(bytes), category_(category) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = std::exchange(o.device_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      category_ = o.category_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void reset() {
    if (ptr_) device_->release(ptr_, bytes_, category_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  Device* device_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory category_ = MemCategory::buffers;
};

}  // namespace dscpp
