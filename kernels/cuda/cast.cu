// Element-wise fp32 <-> fp16 / bf16 casts. The per-element math is core/half.h, shared with
// the CPU path; the loop is launch.h's.
#include "core/half.h"
#include "kernels/cuda/cast.h"

#include <cstdint>

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
  DSCPP_HD void quad(int64_t q) const { convert(*reinterpret_cast<const Quad<Src>*>(src + 4 * q), 4 * q); }
  DSCPP_HD void quads4(int64_t q, int64_t stride) const {
    Quad<Src> in[4];
    for (int k = 0; k < 4; ++k) in[k] = *reinterpret_cast<const Quad<Src>*>(src + 4 * (q + k * stride));
    for (int k = 0; k < 4; ++k) convert(in[k], 4 * (q + k * stride));
  }
  DSCPP_HD void convert(const Quad<Src>& in, int64_t i) const {
    Quad<Dst> out;
    for (int j = 0; j < 4; ++j) out.v[j] = Op{}(in.v[j]);
    *reinterpret_cast<Quad<Dst>*>(dst + i) = out;
  }
};

// The casts stream large tensors (a bf16 step casts every GEMM operand): quads where both
// pointers are 16-byte aligned, the scalar loop otherwise.
template <typename Src, typename Dst, typename Op>
Status launch_cast(const Src* src, Dst* dst, size_t n, Stream stream) {
  const Cast<Src, Dst, Op> body{src, dst};
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0)
    return launch_quads(int64_t(n), stream, body);
  return launch_elementwise(int64_t(n), stream, body);
}

}  // namespace

Status launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_cast<float, uint16_t, ToF16>(src, dst, n, stream);
}

Status launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_cast<uint16_t, float, FromF16>(src, dst, n, stream);
}

Status launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, Stream stream) {
  return launch_cast<float, uint16_t, ToBf16>(src, dst, n, stream);
}

Status launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream) {
  return launch_cast<uint16_t, float, FromBf16>(src, dst, n, stream);
}

}  // namespace dscpp::DSCPP_CUDA_NS
