// dscpp-cuda-check: reports the CUDA (and NCCL) this build links, whether a device is usable
// and, when one is, whether the cast kernels agree bit for bit with the CPU conversions.
//
// Exit codes: 0 all good (or no device and --allow-no-device); 77 no usable device (Meson's
// "skipped", so a test wrapping this passes on GPU-less machines without lying); 1 a CUDA
// call failed or a result differs; 2 bad arguments.
#include "build_config.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/check.h"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if DSCPP_HAVE_NCCL
#include <nccl.h>
#endif

namespace {

constexpr int exit_skip = 77;
constexpr size_t check_elements = size_t(1) << 20;


// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version(int v) {
  if (v == 0) return "none (0)";
  return fmt::format("{}.{} ({})", v / 1000, (v % 1000) / 10, v);
}

// Owns one device allocation; freed on every exit path, including a failed comparison.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) {
    void* p = nullptr;  // the typed cudaMalloc overload lives in cuda_runtime.h (nvcc only)
    DSCPP_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

// Inputs that cover every fp16 and bf16 value, the fp16/bf16 rounding midpoints, and random
// bit patterns (NaNs, Infs, subnormals included) for the rest.
std::vector<float> make_float_inputs(size_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(20240601u);
  using dscpp::bits_to_float;
  using dscpp::float_to_bits;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    switch (i >> 16) {
      case 0:
        v[i] = dscpp::fp16_bits_to_float(h);
        break;
      case 1:
        v[i] = dscpp::bf16_bits_to_float(h);
        break;
      // An fp16 value with its dropped bits set to exactly half an fp16 ulp (normal range):
      // a tie, to be broken toward the even neighbour.
      case 2:
        v[i] = bits_to_float(float_to_bits(dscpp::fp16_bits_to_float(h)) | 0x1000u);
        break;
      // The same for bf16: half a bf16 ulp above every bf16 pattern.
      case 3:
        v[i] = bits_to_float((uint32_t(h) << 16) | 0x8000u);
        break;
      default:
        v[i] = bits_to_float(static_cast<uint32_t>(rng()));
        break;
    }
  }
  return v;
}

template <typename Dst, typename Src, typename Launch, typename Reference>
size_t check_cast(const char* what, const std::vector<Src>& input, Launch launch, Reference reference) {
  const size_t n = input.size();
  DeviceBuffer<Src> d_src(n);
  DeviceBuffer<Dst> d_dst(n);
  DSCPP_CUDA_CHECK(cudaMemcpy(d_src.get(), input.data(), n * sizeof(Src), cudaMemcpyHostToDevice));
  DSCPP_CUDA_CHECK(launch(d_src.get(), d_dst.get(), n, cudaStream_t{}));
  DSCPP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<Dst> output(n);
  DSCPP_CUDA_CHECK(cudaMemcpy(output.data(), d_dst.get(), n * sizeof(Dst), cudaMemcpyDeviceToHost));

  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const Dst expected = reference(input[i]);
    // Compare bits: NaN payloads and the sign of zero must match too.
    if (std::memcmp(&expected, &output[i], sizeof(Dst)) == 0) continue;
    if (++mismatches <= 5) {
      uint32_t in = 0, got = 0, want = 0;
      std::memcpy(&in, &input[i], sizeof(Src));
      std::memcpy(&got, &output[i], sizeof(Dst));
      std::memcpy(&want, &expected, sizeof(Dst));
      fmt::print("  {} mismatch at {}: input 0x{:0{}x} -> device 0x{:0{}x}, cpu 0x{:0{}x}\n", what, i, in,
                 2 * sizeof(Src), got, 2 * sizeof(Dst), want, 2 * sizeof(Dst));
    }
  }
  fmt::print("  {:<10} {} elements, {} mismatches\n", what, n, mismatches);
  return mismatches;
}

int run_cast_checks() {
  namespace dc = dscpp::cuda;
  const std::vector<float> floats = make_float_inputs(check_elements);
  std::vector<uint16_t> halves(check_elements);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);

  size_t bad = 0;
  bad += check_cast<uint16_t>("fp32->fp16", floats, dc::launch_cast_f32_to_f16,
                              [](float x) { return dscpp::float_to_fp16_bits(x); });
  bad += check_cast<float>("fp16->fp32", halves, dc::launch_cast_f16_to_f32,
                           [](uint16_t h) { return dscpp::fp16_bits_to_float(h); });
  bad += check_cast<uint16_t>("fp32->bf16", floats, dc::launch_cast_f32_to_bf16,
                              [](float x) { return dscpp::float_to_bf16_bits(x); });
  bad += check_cast<float>("bf16->fp32", halves, dc::launch_cast_bf16_to_f32,
                           [](uint16_t h) { return dscpp::bf16_bits_to_float(h); });
  if (bad != 0) {
    fmt::print("FAILED: the cast kernels disagree with the CPU conversions in {} elements\n", bad);
    return 1;
  }
  fmt::print("cast kernels match the CPU conversions bit for bit\n");
  return 0;
}

void print_usage() {
  fmt::print(
      "usage: dscpp-cuda-check [--allow-no-device]\n"
      "  Prints the CUDA runtime/driver and NCCL versions, lists the devices and checks the\n"
      "  cast kernels against the CPU conversions on the first one.\n"
      "  --allow-no-device  exit 0 instead of 77 when no usable device is found\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool allow_no_device = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--allow-no-device") {
      allow_no_device = true;
    } else if (arg == "-h" || arg == "--help") {
      print_usage();
      return 0;
    } else {
      fmt::print(stderr, "dscpp-cuda-check: unknown argument '{}'\n", arg);
      print_usage();
      return 2;
    }
  }

  try {
    int runtime_version = 0;
    DSCPP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
    // Reports 0 rather than failing when no driver is installed.
    int driver_version = 0;
    DSCPP_CUDA_CHECK(cudaDriverGetVersion(&driver_version));
    fmt::print("CUDA runtime : {}\n", cuda_version(runtime_version));
    fmt::print("CUDA driver  : {}\n", cuda_version(driver_version));
    fmt::print("built for    : sm {} (plus PTX for the newest)\n", DSCPP_CUDA_ARCHS);
#if DSCPP_HAVE_NCCL
    int nccl_version = 0;
    const ncclResult_t nccl_result = ncclGetVersion(&nccl_version);
    if (nccl_result != ncclSuccess) dscpp::fail("ncclGetVersion failed: {}", ncclGetErrorString(nccl_result));
    // NCCL_VERSION: 1000*major + 100*minor + patch up to 2.8, 10000*major + ... after.
    const int nccl_scale = nccl_version >= 10000 ? 10000 : 1000;
    fmt::print("NCCL         : {}.{}.{} ({})\n", nccl_version / nccl_scale, nccl_version % nccl_scale / 100,
               nccl_version % 100, nccl_version);
#else
    fmt::print("NCCL         : not built in (not found, or disabled, at configure time)\n");
#endif

    int device_count = 0;
    const cudaError_t count_err = cudaGetDeviceCount(&device_count);
    if (count_err != cudaSuccess || device_count == 0) {
      if (count_err != cudaSuccess)
        fmt::print("no usable CUDA device: {} ({} = {})\n", cudaGetErrorString(count_err), cudaGetErrorName(count_err),
                   static_cast<int>(count_err));
      else
        fmt::print("no usable CUDA device: cudaGetDeviceCount found 0 devices\n");
      if (allow_no_device) return 0;
      fmt::print("(exit {}: skipped; pass --allow-no-device to exit 0)\n", exit_skip);
      return exit_skip;
    }

    fmt::print("devices      : {}\n", device_count);
    for (int d = 0; d < device_count; ++d) {
      cudaDeviceProp prop{};
      DSCPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
      fmt::print("  [{}] {} (sm_{}{}, {} SMs, {:.1f} GiB)\n", d, prop.name, prop.major, prop.minor,
                 prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / double(1u << 30));
    }
    DSCPP_CUDA_CHECK(cudaSetDevice(0));
    fmt::print("cast kernels on device 0:\n");
    return run_cast_checks();
  } catch (const dscpp::Error& e) {
    fmt::print(stderr, "dscpp-cuda-check: {}\n", e.what());
    return 1;
  }
}
