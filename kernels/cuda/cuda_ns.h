// The namespace of the CUDA sources' symbols. The device build puts them in dscpp::cuda. The
// host-stub build (the same sources compiled as C++ and run on the CPU: the unit tests and the
// runtime's cuda-sim device) is linked into the same binaries as the device build, so its
// symbols go to dscpp::cuda_host instead; code compiled in stub mode still names them cuda::.
#pragma once

#if defined(DSCPP_CUDA_HOST_STUB)
#define DSCPP_CUDA_NS cuda_host
namespace dscpp {
namespace cuda_host {}
namespace cuda = cuda_host;
}  // namespace dscpp
#else
#define DSCPP_CUDA_NS cuda
#endif
