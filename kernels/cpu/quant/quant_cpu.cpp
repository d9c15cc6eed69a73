#include "kernels/cpu/quant/quant_cpu.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant_math.h"

namespace dscpp::kernels {

namespace {

int64_t group_size(int64_t n, int64_t groups, const char* what) {
  if (n < 0 || groups <= 0 || n % groups != 0)
    fail("{}: {} elements do not split into {} equal groups; use hd::qwz_group_count(n)", what, n, groups);
  return n / groups;
}

// Groups per parallel chunk: about 64K elements each, so small tensors stay on one thread.
int64_t group_grain(int64_t per) {
  return per >= 65536 ? 1 : 65536 / (per > 0 ? per : 1);
}

}  // namespace

void quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales) {
  const int64_t per = group_size(n, groups, "quantize_int8_groups");
  parallel_for(groups, group_grain(per), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const float* xg = x + g * per;
      float absmax = 0.0f;
      for (int64_t i = 0; i < per; ++i) absmax = hd::quant_absmax_step(absmax, xg[i]);
      const float s = hd::quant_scale(absmax);
      for (int64_t i = 0; i < per; ++i) q[g * per + i] = hd::quantize_int8(xg[i], s);
      inv_scales[g] = 1.0f / s;
    }
  });
}

void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x) {
  const int64_t per = group_size(n, groups, "dequantize_int8_groups");
  parallel_for(groups, group_grain(per), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t i = 0; i < per; ++i) x[g * per + i] = hd::dequantize_int8(q[g * per + i], inv_scales[g]);
  });
}

}  // namespace dscpp::kernels
