#include "kernels/cpu/quant/quant_cpu.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/amp/amp_cpu.h"
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

void quantize_int8_groups(const void* x, DType type, int64_t n, int64_t groups, int8_t* q, float* inv_scales) {
  const int64_t per = group_size(n, groups, "quantize_int8_groups");
  const hd::Storage st = storage_of(type);
  parallel_for(groups, group_grain(per), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      float absmax = 0.0f;
      for (int64_t i = g * per; i < (g + 1) * per; ++i) absmax = hd::quant_absmax_step(absmax, hd::load(x, i, st));
      const float s = hd::quant_scale(absmax);
      for (int64_t i = g * per; i < (g + 1) * per; ++i) q[i] = hd::quantize_int8(hd::load(x, i, st), s);
      inv_scales[g] = 1.0f / s;
    }
  });
}

void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, void* x, DType type) {
  const int64_t per = group_size(n, groups, "dequantize_int8_groups");
  const hd::Storage st = storage_of(type);
  parallel_for(groups, group_grain(per), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t i = g * per; i < (g + 1) * per; ++i) hd::store(x, i, st, hd::dequantize_int8(q[i], inv_scales[g]));
  });
}

void quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales) {
  quantize_int8_groups(x, DType::f32, n, groups, q, inv_scales);
}

void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x) {
  dequantize_int8_groups(q, inv_scales, n, groups, x, DType::f32);
}

void quantize_int4_groups(const void* x, DType type, int64_t n, int64_t group, uint8_t* q, float* inv_scales) {
  if (group <= 0 || group % 2 != 0 || n % group != 0)
    fail("quantize_int4_groups: {} elements do not split into even groups of {}", n, group);
  const hd::Storage st = storage_of(type);
  parallel_for(n / group, group_grain(group), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      float absmax = 0.0f;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) absmax = hd::quant_absmax_step(absmax, hd::load(x, i, st));
      const float s = hd::quant_scale_int4(absmax);
      for (int64_t i = g * group; i < (g + 1) * group; i += 2)
        q[i / 2] = hd::quantize_int4_pair(hd::load(x, i, st), hd::load(x, i + 1, st), s);
      inv_scales[g] = 1.0f / s;
    }
  });
}

void dequantize_int4_add(const uint8_t* q, const float* inv_scales, int64_t n, int64_t group, float* acc) {
  for (int64_t i = 0; i < n; i += 2) {
    const float inv = inv_scales[i / group];
    acc[i] += hd::dequantize_int4(q[i / 2], 0, inv);
    acc[i + 1] += hd::dequantize_int4(q[i / 2], 1, inv);
  }
}

}  // namespace dscpp::kernels
