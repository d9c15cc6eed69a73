// Block int8 quantization kernels over the shared element math of kernels/quant_math.h.
#include "kernels/cuda/quant.h"

#include "kernels/quant_math.h"

namespace dscpp::DSCPP_CUDA_NS {
namespace {

#if defined(DSCPP_CUDA_HOST_STUB)
constexpr Status kInvalid = 1;
#else
constexpr Status kInvalid = cudaErrorInvalidValue;
#endif

struct Quantize {
  static constexpr int kRounds = 1;
  const float* x;
  int64_t per;
  int8_t* q;
  float* inv_scales;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const float* xg = x + int64_t(t.block) * per;
    float m = 0.0f;
    for (int64_t i = t.thread; i < per; i += t.threads) m = hd::quant_absmax_step(m, xg[i]);
    return m;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a > b ? a : b; }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const float s = hd::quant_scale(static_cast<float>(totals[0]));  // exact: the max of floats
    const int64_t base = int64_t(t.block) * per;
    for (int64_t i = t.thread; i < per; i += t.threads) q[base + i] = hd::quantize_int8(x[base + i], s);
    if (t.thread == 0) inv_scales[t.block] = 1.0f / s;
  }
};

struct Dequantize {
  const int8_t* q;
  const float* inv_scales;
  int64_t per;
  float* x;
  DSCPP_HD void operator()(int64_t i) const { x[i] = hd::dequantize_int8(q[i], inv_scales[i / per]); }
};

bool bad_split(int64_t n, int64_t groups) {
  return n < 0 || groups <= 0 || n % groups != 0 || groups > INT32_MAX;
}

}  // namespace

Status quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales, Stream stream) {
  if (bad_split(n, groups)) return kInvalid;
  return launch_block_reduce(unsigned(groups), stream, Quantize{x, n / groups, q, inv_scales});
}

Status dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x,
                              Stream stream) {
  if (bad_split(n, groups)) return kInvalid;
  return launch_elementwise(n, stream, Dequantize{q, inv_scales, n / groups, x});
}

}  // namespace dscpp::DSCPP_CUDA_NS
