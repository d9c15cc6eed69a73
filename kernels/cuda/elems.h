// Tensors in the ops table's compute dtype as the kernels see them: Src and Dst behave like
// const float* and float* (indexing, pointer arithmetic, comparison with nullptr), but the
// elements are stored as fp32, bf16 or fp16 (kernels/amp_math.h's Storage), chosen at run time.
// Reading gives the float value; assigning rounds once to nearest even. So one kernel body
// serves every compute dtype, computing in fp32 whatever the storage, and the fp32 tables keep
// their exact arithmetic. Statistics the ABI pins to fp32 (layer-norm mean/rstd, attention's
// log-sum-exp, scratch) stay plain float*.
//
// The storage is uniform across a launch, so the per-element switch is a branch every thread
// of a warp takes the same way.
#pragma once

#include "kernels/amp_math.h"
#include "kernels/cuda/cuda_ns.h"

#include <cstddef>
#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

using hd::Storage;

DSCPP_HD constexpr int64_t storage_bytes(Storage s) { return s == Storage::f32 ? 4 : 2; }

// One element of a Dst: converts to float, and assignment stores with one rounding.
struct ElemRef {
  void* base;
  Storage s;
  DSCPP_HD operator float() const { return hd::load(base, 0, s); }
  DSCPP_HD const ElemRef& operator=(float v) const {
    hd::store(base, 0, s, v);
    return *this;
  }
  // Element to element copies the value (not where the reference points).
  DSCPP_HD const ElemRef& operator=(const ElemRef& other) const { return *this = float(other); }
  DSCPP_HD const ElemRef& operator+=(float v) const { return *this = float(*this) + v; }
};

struct Src {
  const void* p = nullptr;
  Storage s = Storage::f32;
  Src() = default;
  DSCPP_HD Src(const void* data, Storage storage) : p(data), s(storage) {}
  DSCPP_HD Src(const float* f32) : p(f32) {}  // fp32 buffers (scratch, tests) pass as they are
  DSCPP_HD Src(std::nullptr_t) {}
  DSCPP_HD float operator[](int64_t i) const { return hd::load(p, i, s); }
  DSCPP_HD Src operator+(int64_t i) const { return {static_cast<const char*>(p) + i * storage_bytes(s), s}; }
  DSCPP_HD Src& operator+=(int64_t i) { return *this = *this + i; }
  DSCPP_HD bool operator==(std::nullptr_t) const { return p == nullptr; }
  DSCPP_HD bool operator!=(std::nullptr_t) const { return p != nullptr; }
  DSCPP_HD bool is_f32() const { return s == Storage::f32; }
  DSCPP_HD const float* f32() const { return static_cast<const float*>(p); }  // only when is_f32()
};

struct Dst {
  void* p = nullptr;
  Storage s = Storage::f32;
  Dst() = default;
  DSCPP_HD Dst(void* data, Storage storage) : p(data), s(storage) {}
  DSCPP_HD Dst(float* f32) : p(f32) {}
  DSCPP_HD Dst(std::nullptr_t) {}
  DSCPP_HD ElemRef operator[](int64_t i) const { return {static_cast<char*>(p) + i * storage_bytes(s), s}; }
  DSCPP_HD Dst operator+(int64_t i) const { return {static_cast<char*>(p) + i * storage_bytes(s), s}; }
  DSCPP_HD Dst& operator+=(int64_t i) { return *this = *this + i; }
  DSCPP_HD bool operator==(std::nullptr_t) const { return p == nullptr; }
  DSCPP_HD bool operator!=(std::nullptr_t) const { return p != nullptr; }
  DSCPP_HD operator Src() const { return {p, s}; }
  DSCPP_HD bool is_f32() const { return s == Storage::f32; }
  DSCPP_HD float* f32() const { return static_cast<float*>(p); }  // only when is_f32()
};

}  // namespace dscpp::DSCPP_CUDA_NS
