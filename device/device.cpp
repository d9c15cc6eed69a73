#include "device/device.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace dscpp {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::params:
      return "params";
    case MemCategory::grads:
      return "grads";
    case MemCategory::optimizer_state:
      return "optimizer state";
    case MemCategory::activations:
      return "activations";
    case MemCategory::buffers:
      return "buffers";
    case MemCategory::count:
      break;
  }
  return "?";
}

namespace {
std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }
}  // namespace

void* Device::allocate(size_t bytes, MemCategory category, bool zero) {
  auto c = static_cast<size_t>(category);
  int64_t now = total_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  if (limit_ > 0 && now > limit_) {
    total_.fetch_sub(static_cast<int64_t>(bytes));
    std::string parts;
    for (size_t i = 0; i < kMemCategories; ++i)
      parts += fmt::format("{}{} {}", i ? ", " : "", mem_category_name(static_cast<MemCategory>(i)),
                           mib(current_[i].load()));
    throw OutOfDeviceMemory(fmt::format(
        "{}: out of memory allocating {} for {}: {} of the {} limit in use ({}). Use a higher ZeRO stage or "
        "offload to reduce what each rank holds.",
        name(), mib(static_cast<int64_t>(bytes)), mem_category_name(category), mib(now - static_cast<int64_t>(bytes)),
        mib(limit_), parts));
  }
  void* p = bytes ? raw_allocate(bytes) : nullptr;
  if (bytes && !p) {
    total_.fetch_sub(static_cast<int64_t>(bytes));
    fail("{}: the system refused {} for {}", name(), mib(static_cast<int64_t>(bytes)), mem_category_name(category));
  }
  if (zero && p) this->zero(p, bytes);
  int64_t cur = current_[c].fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  for (int64_t old = peak_[c].load(); cur > old && !peak_[c].compare_exchange_weak(old, cur);) {
  }
  for (int64_t old = total_peak_.load(); now > old && !total_peak_.compare_exchange_weak(old, now);) {
  }
  return p;
}

void Device::release(void* ptr, size_t bytes, MemCategory category) {
  if (!ptr) return;
  raw_free(ptr);
  current_[static_cast<size_t>(category)].fetch_sub(static_cast<int64_t>(bytes));
  total_.fetch_sub(static_cast<int64_t>(bytes));
}

MemoryStats Device::stats() const {
  MemoryStats s;
  for (size_t i = 0; i < kMemCategories; ++i) {
    s.current[i] = current_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_current = total_.load();
  s.total_peak = total_peak_.load();
  s.limit = limit_;
  return s;
}

void Device::reset_peaks() {
  for (size_t i = 0; i < kMemCategories; ++i) peak_[i] = current_[i].load();
  total_peak_ = total_.load();
}

// Zero bytes is a valid request whose pointers may be null (the buffer of an empty group), which
// memcpy and memset may not be given.
void HostMemoryDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void HostMemoryDevice::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void HostMemoryDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}
void HostMemoryDevice::zero(void* ptr, size_t bytes) {
  if (bytes > 0) std::memset(ptr, 0, bytes);
}

namespace {

class CpuDevice final : public HostMemoryDevice {
 public:
  explicit CpuDevice(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

 protected:
  void* raw_allocate(size_t bytes) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* ptr) override { std::free(ptr); }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>("cpu"); }
std::unique_ptr<Device> make_host_device() { return std::make_unique<CpuDevice>("host"); }

}  // namespace dscpp
