// cuDNN's fused causal attention (its SDPA graphs: FlashAttention-2's algorithm on the tensor
// cores) behind the CUDA ops table's flash_attention_* entries, for runs whose GEMMs are on 16-bit
// math (kernels/gemm_math.h: bf16 or fp16) or whose compute dtype is 16-bit. cuDNN's SDPA takes
// only 16-bit inputs: a 16-bit table's tensors go in as they are; an fp32 table's q/k/v (and,
// backward, out and dout) are cast into scratch, and the results cast back; its statistics output
// is the same per-query log Σ exp(scale·q·k) (natural log, fp32) that the table's contract keeps,
// so either direction may fall back to the fp32 kernels of ops_attention.cu and still meet the
// other.
//
// A shape cuDNN has no plan for (or a build without the cuDNN frontend headers: see
// meson_options.txt) is answered false, once logged with cuDNN's reason, and the table runs its
// own kernels. Built graphs are kept per shape. Only a real GPU runs this; gpu_parity compares
// it with the CPU table.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/gemm_math.h"

#include <cstdint>
#include <memory>

namespace dscpp::cuda {

class CudnnAttention {
 public:
  // Null when this build has no cuDNN SDPA or no cuDNN handle can be made (the reason logged).
  static std::unique_ptr<CudnnAttention> create(Stream stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  struct Shape {
    int64_t batch, T, heads, head_dim;
    float scale;
    kernels::GemmMath math;                             // bf16 or fp16: the dtype cuDNN computes in
    bool tensors16;                                     // the table's tensors are already in that dtype
    int64_t width() const { return heads * head_dim; }  // C of a B × T × C tensor
    size_t elements() const { return size_t(batch * T * heads * head_dim); }  // of out (q, k, v each)
  };
  // The table's flash_attention_forward / _backward (tensors fp32, or 16-bit with tensors16);
  // false: not run, nothing written, the caller runs its own kernels.
  bool forward(const Shape& s, const void* qkv, float* lse, void* out);
  bool backward(const Shape& s, const void* qkv, const void* out, const float* lse, const void* dout, void* dqkv);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscpp::cuda
