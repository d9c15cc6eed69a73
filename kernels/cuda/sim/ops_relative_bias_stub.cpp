// kernels/cuda/ops_relative_bias.cu compiled as C++ against the host launch layer
// (kernels/cuda/launch_host_stub.h): the unit tests and the cuda-sim device run it on the CPU.
#include "kernels/cuda/ops_relative_bias.cu"
