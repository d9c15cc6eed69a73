// The single-threaded span loops, one template for every instruction set. Included by exactly
// one translation unit per ISA (optim_cpu.cpp: scalar; optim_avx2.cpp; optim_avx512.cpp),
// each compiled with its own -m flags, which supplies a vector type V and then calls
// make_span_kernels<V>().
//
// ODR safety: everything here is in an anonymous namespace and the update-rule templates of
// kernels/optimizer_math.h are instantiated only with these TU-local lane types (never with
// plain float, whose instantiations would be COMDAT-merged across TUs and could hand AVX-512
// code to a CPU without it). Lane1 and the vector types call compiler builtins / intrinsics,
// never <cmath> inline functions, for the same reason.
//
// A vector type V provides: static constexpr int64_t width; explicit V(float) (broadcast);
// static V load(const float*); void store(float*) const; + - * / and unary -; hd_fma, hd_sqrt,
// hd_sign_step overloads; and a double accumulator `typename V::Acc` with acc_sq(Acc&, V)
// (adds the exact squares in double) and hsum(const Acc&).
#pragma once

#include "kernels/cpu/optim/optim_cpu.h"
#include "kernels/optimizer_math.h"

#include <cstdint>
#include <type_traits>

namespace dscpp::kernels::cpu {
namespace {

// One fp32 lane: the scalar tails of the SIMD loops and the whole scalar path.
struct Lane1 {
  static constexpr int64_t width = 1;
  float x;
  Lane1() = default;
  explicit Lane1(float f) : x(f) {}
  static Lane1 load(const float* p) { return Lane1(*p); }
  void store(float* p) const { *p = x; }
  struct Acc {
    double s = 0;
  };
};
inline Lane1 operator+(Lane1 a, Lane1 b) { return Lane1(a.x + b.x); }
inline Lane1 operator-(Lane1 a, Lane1 b) { return Lane1(a.x - b.x); }
inline Lane1 operator*(Lane1 a, Lane1 b) { return Lane1(a.x * b.x); }
inline Lane1 operator/(Lane1 a, Lane1 b) { return Lane1(a.x / b.x); }
inline Lane1 operator-(Lane1 a) { return Lane1(-a.x); }
inline Lane1 hd_fma(Lane1 a, Lane1 b, Lane1 c) { return Lane1(__builtin_fmaf(a.x, b.x, c.x)); }
inline Lane1 hd_sqrt(Lane1 a) { return Lane1(__builtin_sqrtf(a.x)); }
inline Lane1 hd_sign_step(Lane1 c, Lane1 step) {
  return Lane1(c.x > 0.0f ? step.x : (c.x < 0.0f ? -step.x : 0.0f));
}
inline void acc_sq(Lane1::Acc& a, Lane1 x) {
  double d = x.x;
  a.s += d * d;
}
inline double hsum(const Lane1::Acc& a) { return a.s; }

// f(lane_tag, i) over [0, n): 4×W-unrolled vectors, then single vectors, then scalar lanes.
template <class V, class F>
inline void span_loop(int64_t n, F&& f) {
  constexpr int64_t W = V::width;
  int64_t i = 0;
  if constexpr (W > 1) {
    for (; i + 4 * W <= n; i += 4 * W) {
      f(V{}, i);
      f(V{}, i + W);
      f(V{}, i + 2 * W);
      f(V{}, i + 3 * W);
    }
    for (; i + W <= n; i += W) f(V{}, i);
  }
  for (; i < n; ++i) f(Lane1{}, i);
}

template <class V>
struct Spans {
  template <class L, class C>
  static const auto& pick(const C& vec, const auto& one) {
    if constexpr (std::is_same_v<L, V>)
      return vec;
    else
      return one;
  }

  static void adam(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      L wi = L::load(w + i), mi = L::load(m + i), vi = L::load(v + i);
      kernels::adam_update(wi, L::load(g + i), mi, vi, pick<L>(cv, c1));
      wi.store(w + i);
      mi.store(m + i);
      vi.store(v + i);
    });
  }

  static void sgd(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    if (c.has_momentum) {
      span_loop<V>(n, [&](auto tag, int64_t i) {
        using L = decltype(tag);
        L wi = L::load(w + i), bi = L::load(buf + i);
        kernels::sgd_update(wi, L::load(g + i), bi, pick<L>(cv, c1));
        wi.store(w + i);
        bi.store(buf + i);
      });
    } else {  // no buffer traffic
      span_loop<V>(n, [&](auto tag, int64_t i) {
        using L = decltype(tag);
        L wi = L::load(w + i), bi(0.0f);
        kernels::sgd_update(wi, L::load(g + i), bi, pick<L>(cv, c1));
        wi.store(w + i);
      });
    }
  }

  static void adagrad(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      L wi = L::load(w + i), si = L::load(sum + i);
      kernels::adagrad_update(wi, L::load(g + i), si, pick<L>(cv, c1));
      wi.store(w + i);
      si.store(sum + i);
    });
  }

  static void lion(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      L wi = L::load(w + i), mi = L::load(m + i);
      kernels::lion_update(wi, L::load(g + i), mi, pick<L>(cv, c1));
      wi.store(w + i);
      mi.store(m + i);
    });
  }

  static void lamb_moments(const float* w, const float* g, float* m, float* v, int64_t n, const LambCoeffs<float>& c,
                           double* w_sq, double* u_sq) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    typename V::Acc wa_v, ua_v;
    Lane1::Acc wa_1, ua_1;
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      L wi = L::load(w + i), mi = L::load(m + i), vi = L::load(v + i);
      L u = kernels::lamb_moments(wi, L::load(g + i), mi, vi, pick<L>(cv, c1));
      mi.store(m + i);
      vi.store(v + i);
      if constexpr (std::is_same_v<L, V>) {
        acc_sq(wa_v, wi);
        acc_sq(ua_v, u);
      } else {
        acc_sq(wa_1, wi);
        acc_sq(ua_1, u);
      }
    });
    *w_sq += hsum(wa_v);
    *u_sq += hsum(ua_v);
    *w_sq += hsum(wa_1);
    *u_sq += hsum(ua_1);
  }

  static void lamb_apply(float* w, const float* m, const float* v, int64_t n, float neg_step,
                         const LambCoeffs<float>& c) {
    const auto cv = c.template as<V>();
    const auto c1 = c.template as<Lane1>();
    const V sv(neg_step);
    const Lane1 s1(neg_step);
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      L wi = L::load(w + i);
      kernels::lamb_apply(wi, L::load(m + i), L::load(v + i), pick<L>(sv, s1), pick<L>(cv, c1));
      wi.store(w + i);
    });
  }

  static void traffic(float* w, const float* g, float* m, float* v, int64_t n) {
    const V a(-1e-3f), b(0.5f);
    const Lane1 a1(-1e-3f), b1(0.5f);
    span_loop<V>(n, [&](auto tag, int64_t i) {
      using L = decltype(tag);
      const L& ai = pick<L>(a, a1);
      const L& bi = pick<L>(b, b1);
      L gi = L::load(g + i);
      hd_fma(gi, ai, L::load(w + i)).store(w + i);
      hd_fma(L::load(m + i), bi, gi).store(m + i);
      hd_fma(L::load(v + i), bi, gi * gi).store(v + i);  // keeps v >= 0 for a following Adam step
    });
  }
};

template <class V>
SpanKernels make_span_kernels() {
  return {&Spans<V>::adam,         &Spans<V>::sgd,        &Spans<V>::adagrad, &Spans<V>::lion,
          &Spans<V>::lamb_moments, &Spans<V>::lamb_apply, &Spans<V>::traffic};
}

}  // namespace
}  // namespace dscpp::kernels::cpu
