#include "launcher/commands/cuda_report.h"

#include "build_config.h"

#include <dlfcn.h>
#include <fmt/format.h>

#if DSCPP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if DSCPP_HAVE_NCCL
#include <nccl.h>
#endif

namespace dscpp::launcher {

#if DSCPP_HAVE_CUDA
namespace {

// CUDA encodes versions as 1000·major + 10·minor.
std::string cuda_version(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}
#if DSCPP_HAVE_NCCL
// NCCL: 10000·major + 100·minor + patch since 2.9 (1000·major before).
std::string nccl_version(int v) {
  const int scale = v >= 10000 ? 10000 : 1000;
  return fmt::format("{}.{}.{}", v / scale, v % scale / 100, v % 100);
}
#endif

// A symbol from the first library of `names` that loads; nullptr and the dlerror otherwise.
template <class Fn>
Fn load(const char* lib, const char* symbol, std::string& why) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return nullptr;
  }
  void* s = dlsym(h, symbol);  // the handle stays open: the process is about to exit anyway
  if (s == nullptr) why = fmt::format("{} has no {}", lib, symbol);
  return reinterpret_cast<Fn>(s);
}

}  // namespace
#endif

std::string cuda_report() {
#if !DSCPP_HAVE_CUDA
  constexpr const char* absent = "no (not found at build time; reconfigure after installing it)";
  return fmt::format("  {:<10} {}\n  {:<10} {}\n", "cuda", absent, "nccl", absent);
#else
  std::string out;
  out += fmt::format("  {:<10} yes: built for sm {} (+ PTX for the newest) with CUDA {} headers\n", "cuda",
                     DSCPP_CUDA_ARCHS, cuda_version(CUDART_VERSION));
  const std::string cudart = fmt::format("libcudart.so.{}", CUDART_VERSION / 1000);
  std::string why;
  using VersionFn = int (*)(int*);
  auto runtime = load<VersionFn>(cudart.c_str(), "cudaRuntimeGetVersion", why);
  auto driver = load<VersionFn>(cudart.c_str(), "cudaDriverGetVersion", why);
  auto count = load<VersionFn>(cudart.c_str(), "cudaGetDeviceCount", why);
  if (runtime == nullptr || driver == nullptr || count == nullptr) {
    out += fmt::format("  {:<10} cannot load {}: {}\n", "", cudart, why);
  } else {
    int rv = 0, dv = 0, n = 0;
    runtime(&rv);
    driver(&dv);  // 0 without a driver
    const int err = count(&n);
    out += fmt::format("  {:<10} runtime {}, driver {}\n", "", cuda_version(rv), dv ? cuda_version(dv) : "none");
    out += fmt::format("  {:<10} devices: {}\n", "",
                       err == 0 && n > 0 ? fmt::format("{} usable (dscpp-cuda-check lists them)", n)
                                         : fmt::format("none usable (cudaGetDeviceCount error {})", err));
  }
#if DSCPP_HAVE_NCCL
  auto nccl = load<VersionFn>("libnccl.so.2", "ncclGetVersion", why);
  int nv = 0;
  const std::string runtime_nccl = nccl != nullptr && nccl(&nv) == 0 ? nccl_version(nv) : "cannot load: " + why;
  out += fmt::format("  {:<10} yes: headers {}, library {}\n", "nccl", nccl_version(NCCL_VERSION_CODE), runtime_nccl);
#else
  out += fmt::format("  {:<10} {}\n", "nccl", "no (not found at build time; reconfigure after installing it)");
#endif
#if DSCPP_HAVE_CUDNN_SDPA
  // cuDNN's fused attention for bf16/fp16 runs: the library is loaded when a run needs it.
  using SizeFn = size_t (*)();
  auto cudnn = load<SizeFn>("libcudnn.so.9", "cudnnGetVersion", why);
  out += fmt::format("  {:<10} yes (fused attention for 16-bit runs): library {}\n", "cudnn sdpa",
                     cudnn != nullptr ? fmt::format("{}", cudnn()) : "cannot load: " + why);
#else
  out += fmt::format("  {:<10} {}\n", "cudnn sdpa",
                     "no (cuDNN frontend headers not found at build time: scripts/setup.sh fetches them)");
#endif
  return out;
#endif
}

}  // namespace dscpp::launcher
