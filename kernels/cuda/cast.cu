// Element-wise fp32 <-> fp16 / bf16 casts. The per-element math is core/half.h, shared with
// the CPU path; the loop is launch.h's.
#include "core/half.h"
#include "kernels/cuda/cast.h"

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

template <typename Src, typename Dst, typename Op>
struct Cast {
  const Src* src;
  Dst* dst;
  DSCPP_HD void operator()(int64_t i) const { dst[i] = Op{}(src[i]); }
};

}  // namespace

Status launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_elementwise(int64_t(n), stream, Cast<float, uint16_t, ToF16>{src, dst});
}

Status launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_elementwise(int64_t(n), stream, Cast<uint16_t, float, FromF16>{src, dst});
}

Status launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_elementwise(int64_t(n), stream, Cast<float, uint16_t, ToBf16>{src, dst});
}

Status launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_elementwise(int64_t(n), stream, Cast<uint16_t, float, FromBf16>{src, dst});
}

}  // namespace dscpp::DSCPP_CUDA_NS
