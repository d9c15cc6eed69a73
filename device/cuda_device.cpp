#include "device/cuda_device.h"

#include "core/log.h"
#include "device/caching_allocator.h"
#include "device/cuda_check.h"
#include "device/device_select.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <optional>

namespace dscpp {
namespace {

// Runs on the device's thread-current context: every entry point sets the device first, so
// a rank that touches several devices (tests) does not allocate on the wrong one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    DSCPP_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) DSCPP_CUDA_CHECK(cudaSetDevice(index));
    changed_ = previous_ != index;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class CudaDeviceImpl final : public CudaDevice {
 public:
  explicit CudaDeviceImpl(int index)
      : index_(index),
        cache_([this](size_t bytes) { return raw_cuda_alloc(bytes); }, [this](void* p) { raw_cuda_free(p); }) {
    DSCPP_CUDA_CHECK(cudaSetDevice(index));
    DSCPP_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    DSCPP_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    DSCPP_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    DSCPP_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  }
  ~CudaDeviceImpl() override {
    drop_math();
    cudaSetDevice(index_);
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(comm_);
    cache_.empty_cache();
    cudaEventDestroy(compute_done_);
    cudaEventDestroy(comm_done_);
    cudaStreamDestroy(compute_);
    cudaStreamDestroy(comm_);
  }

  std::string name() const override { return fmt::format("cuda:{}", index_); }
  bool is_host() const override { return false; }
  int index() const override { return index_; }
  cudaStream_t compute_stream() const override { return compute_; }
  cudaStream_t comm_stream() const override { return comm_; }

  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
    wait_for_enqueued();  // the caller reads host_dst next
  }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute_));
    wait_for_enqueued();  // the caller may reuse host_src as soon as we return
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  }
  void zero(void* ptr, size_t bytes) override {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, compute_));
  }
  void synchronize() override {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaStreamSynchronize(compute_));
    DSCPP_CUDA_CHECK(cudaStreamSynchronize(comm_));
  }
  bool holds(const void* ptr) const override {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
      cudaGetLastError();  // an unknown pointer is plain host memory
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice && attributes.device == index_;
  }
  void comm_waits_for_compute() override { order(compute_, compute_done_, comm_); }
  void compute_waits_for_comm() override { order(comm_, comm_done_, compute_); }
  size_t cached_bytes() const override { return cache_.cached_bytes(); }
  void empty_cache() override {
    DeviceGuard g(index_);
    synchronize();  // cached blocks may still be read by enqueued work
    cache_.empty_cache();
  }

 protected:
  void* raw_allocate(size_t bytes) override {
    DeviceGuard g(index_);
    return cache_.allocate(bytes);  // nullptr → Device::allocate names the device and category
  }
  void raw_free(void* ptr) override { cache_.release(ptr); }

 private:
  // Waits for the compute stream's work enqueued so far (a copy and the kernels before it), not
  // for what other threads enqueue meanwhile: a communicator thread staging a gradient bucket
  // must not wait for the rest of the backward pass. One event per call: the engine's and the
  // communicators' threads copy concurrently.
  void wait_for_enqueued() {
    cudaEvent_t done = nullptr;
    DSCPP_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    cudaError_t rc = cudaEventRecord(done, compute_);
    if (rc == cudaSuccess) rc = cudaEventSynchronize(done);
    cudaEventDestroy(done);
    DSCPP_CUDA_CHECK(rc);
  }
  void order(cudaStream_t from, cudaEvent_t ev, cudaStream_t to) {
    DeviceGuard g(index_);
    DSCPP_CUDA_CHECK(cudaEventRecord(ev, from));
    DSCPP_CUDA_CHECK(cudaStreamWaitEvent(to, ev, 0));
  }
  void* raw_cuda_alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so the retry can succeed
      return nullptr;
    }
    return p;
  }
  void raw_cuda_free(void* p) { cudaFree(p); }

  int index_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, comm_done_ = nullptr;
  CachingAllocator cache_;
};

class PinnedHostDevice final : public HostMemoryDevice {
 public:
  std::string name() const override { return "pinned host"; }

 protected:
  // cudaHostAlloc pins pages (slow, a few ms per call): cache the blocks like device memory.
  void* raw_allocate(size_t bytes) override { return cache_.allocate(bytes); }
  void raw_free(void* ptr) override { cache_.release(ptr); }

 private:
  CachingAllocator cache_{[](size_t bytes) -> void* {
                            void* p = nullptr;
                            if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
                              cudaGetLastError();
                              return nullptr;
                            }
                            return p;
                          },
                          [](void* p) { cudaFreeHost(p); }};
};

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

}  // namespace

std::unique_ptr<CudaDevice> make_cuda_device(int index) {
  return std::make_unique<CudaDeviceImpl>(index);
}

std::unique_ptr<CudaDevice> make_cuda_device_from_env(std::string_view backend) {
  int visible = 0;
  const cudaError_t err = cudaGetDeviceCount(&visible);
  if (err != cudaSuccess) {
    cudaGetLastError();
    visible = 0;
  }
  std::optional<int> local_rank;
  if (auto v = env("LOCAL_RANK")) {
    try {
      local_rank = std::stoi(*v);
    } catch (const std::exception&) {
      fail("LOCAL_RANK=\"{}\" is not an integer; the launcher sets it to the rank's index on its node", *v);
    }
  }
  const std::optional<std::string> cvd = env("CUDA_VISIBLE_DEVICES");
  const int index = choose_cuda_device(local_rank, visible, cvd, backend);
  if (cuda_device_shared(local_rank, visible, cvd))
    log::info("LOCAL_RANK={} shares CUDA device {} with other ranks of this host ({} visible, {}); comm backend {}",
              local_rank.value_or(0), index, visible,
              cvd ? fmt::format("CUDA_VISIBLE_DEVICES=\"{}\"", *cvd) : std::string("CUDA_VISIBLE_DEVICES unset"),
              backend);
  return make_cuda_device(index);
}

std::unique_ptr<Device> make_pinned_host_device() {
  return std::make_unique<PinnedHostDevice>();
}

}  // namespace dscpp
