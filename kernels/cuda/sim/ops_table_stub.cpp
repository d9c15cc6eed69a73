// kernels/cuda/ops_table.cpp built in host-stub mode: the CUDA ops table on the CPU, its kernels through the
// host launch layer and its runtime/cuBLAS calls through cuda_runtime_stub.h (the unit tests and the
// cuda-sim device).
#include "kernels/cuda/ops_table.cpp"
