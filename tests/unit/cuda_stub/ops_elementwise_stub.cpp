// kernels/cuda/ops_elementwise.cu compiled as C++ against the recording host launch layer
// (kernels/cuda/launch_host_stub.h) for the CPU unit tests.
#include "kernels/cuda/ops_elementwise.cu"
