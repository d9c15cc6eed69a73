// Multi-tensor optimizer kernels: each body loads one element of each list, calls the shared
// update rule and stores the results.
#include "kernels/cuda/optim.h"

namespace dscpp::DSCPP_CUDA_NS {
namespace {

using kernels::AdagradCoeffs;
using kernels::AdamCoeffs;
using kernels::LambCoeffs;
using kernels::LionCoeffs;
using kernels::SgdCoeffs;

// List order in every launch: w, g, s1, s2.
template <int Depth>
DSCPP_HD float& at(const TensorList<Depth>& l, int list, int slot, int64_t i) {
  return static_cast<float*>(l.ptr[list][slot])[i];
}

struct Adam {
  AdamCoeffs<float> c;
  hd::Storage gs;
  DSCPP_HD void operator()(const TensorList<4>& l, int slot, int64_t i) const {
    float w = at(l, 0, slot, i), m = at(l, 2, slot, i), v = at(l, 3, slot, i);
    kernels::adam_update(w, hd::load(l.ptr[1][slot], i, gs), m, v, c);
    at(l, 0, slot, i) = w, at(l, 2, slot, i) = m, at(l, 3, slot, i) = v;
  }
};

struct Sgd {
  SgdCoeffs<float> c;
  hd::Storage gs;
  DSCPP_HD void operator()(const TensorList<3>& l, int slot, int64_t i) const {
    float w = at(l, 0, slot, i), buf = c.has_momentum ? at(l, 2, slot, i) : 0.0f;
    kernels::sgd_update(w, hd::load(l.ptr[1][slot], i, gs), buf, c);
    at(l, 0, slot, i) = w;
    if (c.has_momentum) at(l, 2, slot, i) = buf;
  }
};

struct Adagrad {
  AdagradCoeffs<float> c;
  hd::Storage gs;
  DSCPP_HD void operator()(const TensorList<3>& l, int slot, int64_t i) const {
    float w = at(l, 0, slot, i), sum = at(l, 2, slot, i);
    kernels::adagrad_update(w, hd::load(l.ptr[1][slot], i, gs), sum, c);
    at(l, 0, slot, i) = w, at(l, 2, slot, i) = sum;
  }
};

struct Lion {
  LionCoeffs<float> c;
  hd::Storage gs;
  DSCPP_HD void operator()(const TensorList<3>& l, int slot, int64_t i) const {
    float w = at(l, 0, slot, i), m = at(l, 2, slot, i);
    kernels::lion_update(w, hd::load(l.ptr[1][slot], i, gs), m, c);
    at(l, 0, slot, i) = w, at(l, 2, slot, i) = m;
  }
};

struct LambMoments {
  LambCoeffs<float> c;
  hd::Storage gs;
  DSCPP_HD void operator()(const TensorList<4>& l, int slot, int64_t i) const {
    float m = at(l, 2, slot, i), v = at(l, 3, slot, i);
    kernels::lamb_moments(at(l, 0, slot, i), hd::load(l.ptr[1][slot], i, gs), m, v, c);
    at(l, 2, slot, i) = m, at(l, 3, slot, i) = v;
  }
};

// Σw² (which = 0) or Σu² (which = 1) of one tensor, block b's slice into partials[b].
struct LambNorm {
  static constexpr int kRounds = 1;
  const float *w, *m, *v;
  int64_t n;
  LambCoeffs<float> c;
  int which;
  double* partials;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const Range r = block_slice(n, t.block, t.blocks);
    double acc = 0;
    for (int64_t i = r.begin + t.thread; i < r.end; i += t.threads) {
      const double x = which == 0 ? w[i] : kernels::lamb_direction(w[i], m[i], v[i], c);
      acc += x * x;
    }
    return acc;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a + b; }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    if (t.thread == 0) partials[t.block] = totals[0];
  }
};

// One block per tensor: round 0 sums its Σw² partials, round 1 its Σu² partials, then the
// clamped trust ratio.
struct LambRatio {
  static constexpr int kRounds = 2;
  const double* partials;  // blocks Σw² partials, then blocks Σu² partials
  unsigned blocks;
  double min_coeff, max_coeff;
  double* ratio;
  DSCPP_HD double partial(const Thread& t, int round, const double*) const {
    double acc = 0;
    for (unsigned b = t.thread; b < blocks; b += t.threads) acc += partials[round * blocks + b];
    return acc;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a + b; }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    if (t.thread == 0) *ratio = kernels::lamb_trust_ratio(::sqrt(totals[0]), ::sqrt(totals[1]), min_coeff, max_coeff);
  }
};

struct LambApply {
  LambCoeffs<float> c;
  double neg_step;  // rounded to float after the ratio, as the CPU loop does
  const double* ratios;
  DSCPP_HD void operator()(const TensorList<4>& l, int slot, int64_t i) const {
    const float step = static_cast<float>(neg_step * ratios[l.tensor[slot]]);
    kernels::lamb_apply(at(l, 0, slot, i), at(l, 2, slot, i), at(l, 3, slot, i), step, c);
  }
};

// The lists of t as launch.h wants them: ptrs[d][k]; g and s2 may be absent (nullptr lists).
struct Lists {
  void* const* p[4];
  explicit Lists(const TensorLists& t)
      : p{reinterpret_cast<void* const*>(t.w), const_cast<void* const*>(t.g), reinterpret_cast<void* const*>(t.s1),
          reinterpret_cast<void* const*>(t.s2)} {}
};

// SGD without momentum has no buffer list: w stands in, never read or written.
Lists sgd_lists(const TensorLists& t) {
  Lists l(t);
  if (t.s1 == nullptr) l.p[2] = l.p[0];
  return l;
}

}  // namespace

Status adam_step(const TensorLists& t, const AdamCoeffs<float>& c, Stream stream) {
  return launch_multi_tensor<4>(t.count, Lists(t).p, t.sizes, stream, Adam{c, t.g_type});
}
Status sgd_step(const TensorLists& t, const SgdCoeffs<float>& c, Stream stream) {
  return launch_multi_tensor<3>(t.count, sgd_lists(t).p, t.sizes, stream, Sgd{c, t.g_type});
}
Status adagrad_step(const TensorLists& t, const AdagradCoeffs<float>& c, Stream stream) {
  return launch_multi_tensor<3>(t.count, Lists(t).p, t.sizes, stream, Adagrad{c, t.g_type});
}
Status lion_step(const TensorLists& t, const LionCoeffs<float>& c, Stream stream) {
  return launch_multi_tensor<3>(t.count, Lists(t).p, t.sizes, stream, Lion{c, t.g_type});
}

// Layout: [count ratios][per tensor: Σw² partials, Σu² partials].
int64_t lamb_scratch_doubles(const TensorLists& t) {
  int64_t total = t.count;
  for (int k = 0; k < t.count; ++k) total += 2 * int64_t(reduce_blocks(t.sizes[k]));
  return total;
}

Status lamb_step(const TensorLists& t, const LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff,
                 double* scratch, Stream stream) {
  Status s = launch_multi_tensor<4>(t.count, Lists(t).p, t.sizes, stream, LambMoments{c, t.g_type});
  double* ratios = scratch;
  double* partials = scratch + t.count;
  for (int k = 0; k < t.count && s == kOk; ++k) {
    const unsigned blocks = reduce_blocks(t.sizes[k]);
    for (int which = 0; which < 2 && s == kOk; ++which)
      s = launch_block_reduce(blocks, stream,
                              LambNorm{t.w[k], t.s1[k], t.s2[k], t.sizes[k], c, which, partials + which * blocks});
    if (s == kOk) s = launch_block_reduce(1, stream, LambRatio{partials, blocks, min_coeff, max_coeff, ratios + k});
    partials += 2 * blocks;
  }
  if (s != kOk) return s;
  return launch_multi_tensor<4>(t.count, Lists(t).p, t.sizes, stream, LambApply{c, -step_size, ratios});
}

}  // namespace dscpp::DSCPP_CUDA_NS
