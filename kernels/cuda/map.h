// Streaming elementwise maps, out[i] = op(a[i]) or op(a[i], b[i]), the shape of most of the
// table's elementwise ops and of the fp32 ↔ 16-bit casts. Where every pointer is 16-byte aligned
// they run as quads (launch.h's for_each_quad: four quads loaded per thread before any is
// stored), else as the scalar loop; both give the same bits. out may be a (in place). Over
// compute-dtype views (elems.h) the fp32 ones take that path and the 16-bit ones the scalar loop.
#pragma once

#include "kernels/cuda/elems.h"
#include "kernels/cuda/launch.h"

#include <cstdint>
#include <initializer_list>

namespace dscpp::DSCPP_CUDA_NS {

template <class T>
DSCPP_HD inline Quad<T> load_quad(const T* p, int64_t q) {
  return *reinterpret_cast<const Quad<T>*>(p + 4 * q);
}
template <class T>
DSCPP_HD inline void store_quad(T* p, int64_t q, const Quad<T>& v) {
  *reinterpret_cast<Quad<T>*>(p + 4 * q) = v;
}

template <class A, class Out, class Op>
struct Map1 {
  const A* a;
  Out* out;
  Op op;
  DSCPP_HD void operator()(int64_t i) const { out[i] = op(a[i]); }
  DSCPP_HD void quad(int64_t q) const { put(load_quad(a, q), q); }
  DSCPP_HD void quads4(int64_t q, int64_t stride) const {
    Quad<A> x[4];
    for (int k = 0; k < 4; ++k) x[k] = load_quad(a, q + k * stride);
    for (int k = 0; k < 4; ++k) put(x[k], q + k * stride);
  }
  DSCPP_HD void put(const Quad<A>& x, int64_t q) const {
    Quad<Out> y;
    for (int j = 0; j < 4; ++j) y.v[j] = op(x.v[j]);
    store_quad(out, q, y);
  }
};

template <class T, class Op>
struct Map2 {
  const T *a, *b;
  T* out;
  Op op;
  DSCPP_HD void operator()(int64_t i) const { out[i] = op(a[i], b[i]); }
  DSCPP_HD void quad(int64_t q) const { put(load_quad(a, q), load_quad(b, q), q); }
  DSCPP_HD void quads4(int64_t q, int64_t stride) const {
    Quad<T> x[4], y[4];
    for (int k = 0; k < 4; ++k) x[k] = load_quad(a, q + k * stride), y[k] = load_quad(b, q + k * stride);
    for (int k = 0; k < 4; ++k) put(x[k], y[k], q + k * stride);
  }
  DSCPP_HD void put(const Quad<T>& x, const Quad<T>& y, int64_t q) const {
    Quad<T> z;
    for (int j = 0; j < 4; ++j) z.v[j] = op(x.v[j], y.v[j]);
    store_quad(out, q, z);
  }
};

inline bool aligned16(std::initializer_list<const void*> ptrs) {
  uintptr_t bits = 0;
  for (const void* p : ptrs) bits |= reinterpret_cast<uintptr_t>(p);
  return (bits & 15u) == 0;
}

template <class A, class Out, class Op>
Status launch_map(const A* a, Out* out, int64_t n, Op op, Stream s) {
  const Map1<A, Out, Op> body{a, out, op};
  return aligned16({a, out}) ? launch_quads(n, s, body) : launch_elementwise(n, s, body);
}
template <class Op>
Status launch_map(const float* a, const float* b, float* out, int64_t n, Op op, Stream s) {
  const Map2<float, Op> body{a, b, out, op};
  return aligned16({a, b, out}) ? launch_quads(n, s, body) : launch_elementwise(n, s, body);
}

// A float op over 16-bit bits of storage s: widen each argument, apply, round once.
template <class Op>
struct Bits {
  Storage s;
  Op op;
  template <class... U>
  DSCPP_HD uint16_t operator()(U... x) const {
    uint16_t r;
    hd::store(&r, 0, s, op(hd::load(&x, 0, s)...));
    return r;
  }
};

// The maps over views: fp32 ones as above; ones whose tensors share one 16-bit storage as quads
// of its bits where aligned (8-byte accesses); mixed storages element by element through the
// views' conversions.
template <class Op>
struct ViewMap1 {
  Src a;
  Dst out;
  Op op;
  DSCPP_HD void operator()(int64_t i) const { out[i] = op(a[i]); }
};
template <class Op>
struct ViewMap2 {
  Src a, b;
  Dst out;
  Op op;
  DSCPP_HD void operator()(int64_t i) const { out[i] = op(a[i], b[i]); }
};
template <class Op>
Status launch_map(Src a, Dst out, int64_t n, Op op, Stream s) {
  if (a.is_f32() && out.is_f32()) return launch_map(a.f32(), out.f32(), n, op, s);
  if (a.s == out.s)
    return launch_map(static_cast<const uint16_t*>(a.p), static_cast<uint16_t*>(out.p), n, Bits<Op>{a.s, op}, s);
  return launch_elementwise(n, s, ViewMap1<Op>{a, out, op});
}
template <class Op>
Status launch_map(Src a, Src b, Dst out, int64_t n, Op op, Stream s) {
  if (a.is_f32() && b.is_f32() && out.is_f32()) return launch_map(a.f32(), b.f32(), out.f32(), n, op, s);
  if (a.s == out.s && b.s == out.s) {
    const Map2<uint16_t, Bits<Op>> body{static_cast<const uint16_t*>(a.p), static_cast<const uint16_t*>(b.p),
                                        static_cast<uint16_t*>(out.p), Bits<Op>{out.s, op}};
    return aligned16({a.p, b.p, out.p}) ? launch_quads(n, s, body) : launch_elementwise(n, s, body);
  }
  return launch_elementwise(n, s, ViewMap2<Op>{a, b, out, op});
}

}  // namespace dscpp::DSCPP_CUDA_NS
