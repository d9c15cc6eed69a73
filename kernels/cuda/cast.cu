// Element-wise fp32 <-> fp16 / bf16 casts. The per-element math is core/half.h, shared with
// the CPU path; the loop is map.h's (quads where the pointers are aligned: a bf16 step casts
// every GEMM operand, the largest item of its GPU time).
#include "kernels/cuda/cast.h"

#include "core/half.h"
#include "kernels/cuda/map.h"

namespace dscpp::DSCPP_CUDA_NS {
namespace {

struct ToF16 {
  DSCPP_HD uint16_t operator()(float x) const { return float_to_fp16_bits(x); }
};
struct FromF16 {
  DSCPP_HD float operator()(uint16_t h) const { return fp16_bits_to_float(h); }
};
struct ToBf16 {
  DSCPP_HD uint16_t operator()(float x) const { return float_to_bf16_bits(x); }
};
struct FromBf16 {
  DSCPP_HD float operator()(uint16_t h) const { return bf16_bits_to_float(h); }
};

}  // namespace

Status launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_map(src, dst, int64_t(n), ToF16{}, stream);
}

Status launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_map(src, dst, int64_t(n), FromF16{}, stream);
}

Status launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_map(src, dst, int64_t(n), ToBf16{}, stream);
}

Status launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_map(src, dst, int64_t(n), FromBf16{}, stream);
}

Status launch_cast_f32_to_16(const float* src, uint16_t* dst, size_t n, bool bf16, Stream stream) {
  return bf16 ? launch_cast_f32_to_bf16(src, dst, n, stream) : launch_cast_f32_to_f16(src, dst, n, stream);
}

Status launch_cast_16_to_f32(const uint16_t* src, float* dst, size_t n, bool bf16, Stream stream) {
  return bf16 ? launch_cast_bf16_to_f32(src, dst, n, stream) : launch_cast_f16_to_f32(src, dst, n, stream);
}

}  // namespace dscpp::DSCPP_CUDA_NS
