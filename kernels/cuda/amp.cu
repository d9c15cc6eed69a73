// Mixed-precision buffer kernels: each body is one call of the shared element math.
#include "kernels/cuda/amp.h"

namespace dscpp::DSCPP_CUDA_NS {
namespace {

struct Accumulate {
  void* dst;
  Storage ds;
  const void* src;
  Storage ss;
  DSCPP_HD void operator()(int64_t i) const { hd::accumulate(dst, i, ds, hd::load(src, i, ss)); }
};

struct Convert {
  void* dst;
  Storage ds;
  const void* src;
  Storage ss;
  DSCPP_HD void operator()(int64_t i) const { hd::store(dst, i, ds, hd::load(src, i, ss)); }
};

struct ScaleCheck {
  void* x;
  Storage s;
  float scale;
  int32_t* flag;  // nullptr: no check
  DSCPP_HD void operator()(int64_t i) const {
    const float v = hd::load(x, i, s);
    if (flag != nullptr && hd::nonfinite(v)) *flag = 1;  // racing writers all store 1
    hd::store(x, i, s, v * scale);
  }
};

struct Nonfinite {
  const void* x;
  Storage s;
  int32_t* flag;
  DSCPP_HD void operator()(int64_t i) const {
    if (hd::nonfinite(hd::load(x, i, s))) *flag = 1;
  }
};

struct SumSquares {
  static constexpr int kRounds = 1;
  const void* x;
  Storage s;
  int64_t n;
  double* partials;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const Range r = block_slice(n, t.block, t.blocks);
    double acc = 0;
    for (int64_t i = r.begin + t.thread; i < r.end; i += t.threads) {
      const double v = hd::load(x, i, s);
      acc += v * v;
    }
    return acc;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a + b; }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    if (t.thread == 0) partials[t.block] = totals[0];
  }
};

}  // namespace

Status accumulate_into(void* dst, Storage dst_type, const float* src, int64_t n, Stream stream) {
  return launch_elementwise(n, stream, Accumulate{dst, dst_type, src, Storage::f32});
}
Status add_into(void* dst, Storage dst_type, const void* src, Storage src_type, int64_t n, Stream stream) {
  return launch_elementwise(n, stream, Accumulate{dst, dst_type, src, src_type});
}
Status convert_into(void* dst, Storage dst_type, const void* src, Storage src_type, int64_t n, Stream stream) {
  return launch_elementwise(n, stream, Convert{dst, dst_type, src, src_type});
}
Status scale_inplace(void* x, Storage type, float scale, int64_t n, Stream stream) {
  if (scale == 1.0f) return kOk;
  return launch_elementwise(n, stream, ScaleCheck{x, type, scale, nullptr});
}
Status unscale_check(void* x, Storage type, float scale, int64_t n, int32_t* overflow, Stream stream) {
  return launch_elementwise(n, stream, ScaleCheck{x, type, scale, overflow});
}
Status any_nonfinite(const void* x, Storage type, int64_t n, int32_t* flag, Stream stream) {
  return launch_elementwise(n, stream, Nonfinite{x, type, flag});
}
unsigned sum_squares_blocks(int64_t n) {
  return reduce_blocks(n);
}
Status sum_squares_partials(const void* x, Storage type, int64_t n, double* partials, Stream stream) {
  return launch_block_reduce(sum_squares_blocks(n), stream, SumSquares{x, type, n, partials});
}

}  // namespace dscpp::DSCPP_CUDA_NS
