// Block int8/int4 quantization kernels over the shared element math of kernels/quant_math.h.
#include "kernels/cuda/quant.h"

#include "kernels/quant_math.h"

namespace dscpp::DSCPP_CUDA_NS {
namespace {

#if defined(DSCPP_CUDA_HOST_STUB)
constexpr Status kInvalid = 1;
#else
constexpr Status kInvalid = cudaErrorInvalidValue;
#endif

// Round 0 of both quantizers: block b reduces group b's absmax. The maximum of floats is one
// of them, so carrying it in a double loses nothing and the scale matches the CPU's.
struct GroupAbsmax {
  static constexpr int kRounds = 1;
  const void* x;
  Storage st;
  int64_t per;
  DSCPP_HD int64_t base(const Thread& t) const { return int64_t(t.block) * per; }
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    float m = 0.0f;
    for (int64_t i = t.thread; i < per; i += t.threads) m = hd::quant_absmax_step(m, hd::load(x, base(t) + i, st));
    return m;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a > b ? a : b; }
};

struct QuantizeInt8 : GroupAbsmax {
  int8_t* q;
  float* inv_scales;
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const float s = hd::quant_scale(static_cast<float>(totals[0]));
    const int64_t b = base(t);
    for (int64_t i = t.thread; i < per; i += t.threads) q[b + i] = hd::quantize_int8(hd::load(x, b + i, st), s);
    if (t.thread == 0) inv_scales[t.block] = 1.0f / s;
  }
};

// Thread j packs pairs j, j + threads, …: each byte has one writer.
struct QuantizeInt4 : GroupAbsmax {
  uint8_t* q;
  float* inv_scales;
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const float s = hd::quant_scale_int4(static_cast<float>(totals[0]));
    const int64_t b = base(t);
    for (int64_t p = t.thread; p < per / 2; p += t.threads)
      q[b / 2 + p] = hd::quantize_int4_pair(hd::load(x, b + 2 * p, st), hd::load(x, b + 2 * p + 1, st), s);
    if (t.thread == 0) inv_scales[t.block] = 1.0f / s;
  }
};

struct DequantizeInt8 {
  const int8_t* q;
  const float* inv_scales;
  int64_t per;
  float* x;
  DSCPP_HD void operator()(int64_t i) const { x[i] = hd::dequantize_int8(q[i], inv_scales[i / per]); }
};

// Element p is byte p: both of its nibbles are added by the one thread that owns it.
struct DequantizeInt4Add {
  const uint8_t* q;
  const float* inv_scales;
  int64_t group;
  float* acc;
  DSCPP_HD void operator()(int64_t p) const {
    const float inv = inv_scales[2 * p / group];
    acc[2 * p] += hd::dequantize_int4(q[p], 0, inv);
    acc[2 * p + 1] += hd::dequantize_int4(q[p], 1, inv);
  }
};

// One block per group, so the group count must fit a grid.
bool bad_split(int64_t n, int64_t groups) {
  return n < 0 || groups <= 0 || n % groups != 0 || groups > INT32_MAX;
}
bool bad_int4_split(int64_t n, int64_t group) {
  return n < 0 || group <= 0 || group % 2 != 0 || n % group != 0 || n / group > INT32_MAX;
}

}  // namespace

Status quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales, Stream stream) {
  if (bad_split(n, groups)) return kInvalid;
  return launch_block_reduce(unsigned(groups), stream, QuantizeInt8{{x, Storage::f32, n / groups}, q, inv_scales});
}

Status dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x,
                              Stream stream) {
  if (bad_split(n, groups)) return kInvalid;
  return launch_elementwise(n, stream, DequantizeInt8{q, inv_scales, n / groups, x});
}

Status quantize_int4_groups(const void* x, Storage type, int64_t n, int64_t group, uint8_t* q, float* inv_scales,
                            Stream stream) {
  if (bad_int4_split(n, group)) return kInvalid;
  return launch_block_reduce(unsigned(n / group), stream, QuantizeInt4{{x, type, group}, q, inv_scales});
}

Status dequantize_int4_add(const uint8_t* q, const float* inv_scales, int64_t n, int64_t group, float* acc,
                           Stream stream) {
  if (bad_int4_split(n, group)) return kInvalid;
  return launch_elementwise(n / 2, stream, DequantizeInt4Add{q, inv_scales, group, acc});
}

}  // namespace dscpp::DSCPP_CUDA_NS
