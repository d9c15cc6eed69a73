// cuBLASLt's fused GEMM epilogues for the CUDA ops table's linear layers: the bias of a forward
// and the bias gradient of a weight gradient, each inside the GEMM instead of a separate pass
// over the output. Same math as the table's GEMM followed by its epilogue kernels (exact fp32,
// or the tensor-core math of kernels/gemm_math.h).
//
// The GELU epilogues are not used: on an H200 (ncu) cuBLASLt ran GELU_AUX_BIAS and DGELU as
// separate epilogue kernels after the GEMM (80 µs and, by elimination, 190 µs per 8192 × 3072
// output), the same passes over memory as the table's own GELU maps (map.h), which follow the
// GEMM instead.
//
// Each call answers false when it did not run (DSCPP_CUBLASLT=0, a shape, alignment or type
// combination cuBLASLt has no algorithm for, a failed call — the first failure is logged), and
// the table then does what it did before. The GEMM operands (x, W, dy) are in storage `ab`
// (fp32; under bf16/fp16 math the 16-bit copies the table staged, compute_type.h; a 16-bit
// table's tensors as they are), the output and a forward's bias in storage `cs` (the table's
// dtype), a bias gradient always fp32 (the table adds it into the parameter's gradient with
// one rounding). GPU builds only; gpu_parity compares both paths with the CPU table in fp32,
// bf16 and fp16.
#pragma once

#include "kernels/cuda/elems.h"
#include "kernels/cuda/launch.h"
#include "kernels/gemm_math.h"

#include <cstdint>
#include <memory>

namespace dscpp::cuda {

class LtLinear {
 public:
  static std::unique_ptr<LtLinear> create(Stream stream);  // null when disabled or unavailable
  ~LtLinear();
  LtLinear(const LtLinear&) = delete;
  LtLinear& operator=(const LtLinear&) = delete;

  // y[rows×out] = x·Wᵀ + bias (+ y itself when accumulate).
  bool forward(kernels::GemmMath math, Storage ab, Storage cs, const void* x, const void* W, const void* bias,
               bool accumulate, void* y, int64_t rows, int64_t in, int64_t out);
  // dW[out×in] += dyᵀ·x and bias_grad[out] = Σ_rows dy (overwritten, fp32) in one GEMM.
  bool weight_and_bias_grad(kernels::GemmMath math, Storage ab, Storage cs, const void* dy, const void* x, void* dW,
                            float* bias_grad, int64_t rows, int64_t in, int64_t out);

 private:
  struct Impl;
  explicit LtLinear(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscpp::cuda
