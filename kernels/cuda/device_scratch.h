// Device memory that an op keeps between calls and grows on demand. Only the work of one stream
// uses it, in stream order, so growing waits for that stream before freeing the old block.
#pragma once

#include "kernels/cuda/check.h"  // the CUDA runtime (or the host stub's) and DSCPP_CUDA_CHECK
#include "kernels/cuda/launch.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace dscpp::DSCPP_CUDA_NS {

// Bytes all DeviceScratch blocks hold, now and at most: the ops table's device memory outside
// the engine's accounting (GEMM operand staging, attention blocks, cuDNN's and cuBLASLt's
// buffers), which the runtime reports beside the engine's peak.
struct ScratchBytes {
  std::atomic<int64_t> current{0}, peak{0};
  void add(int64_t bytes) {
    const int64_t now = current += bytes;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
};
inline ScratchBytes& scratch_bytes() {
  static ScratchBytes s;
  return s;
}

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    cudaFree(ptr_);
    scratch_bytes().add(-int64_t(bytes_));
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `count` elements of T, valid until a get() that grows the block; throws Error when a
  // CUDA call fails.
  template <class T = void>
  T* get(size_t count, Stream stream) {
    const size_t bytes = count * size_of<T>();
    if (bytes > bytes_) {
      DSCPP_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old block may still be in use
      cudaFree(ptr_);
      scratch_bytes().add(-int64_t(bytes_));
      ptr_ = nullptr, bytes_ = 0;
      DSCPP_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
      bytes_ = bytes;
      scratch_bytes().add(int64_t(bytes));
    }
    return static_cast<T*>(ptr_);
  }

 private:
  template <class T>
  static constexpr size_t size_of() {
    if constexpr (std::is_void_v<T>) return 1;
    else return sizeof(T);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dscpp::DSCPP_CUDA_NS
