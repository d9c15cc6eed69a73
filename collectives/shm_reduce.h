// Element-wise reduction of n-way slot data for the shared-memory backend:
//   dst[i] = src[0][i] (op) src[1][i] (op) ... (op) src[nsrc-1][i]
// folded left to right in slot order, so every rank (and every code path) computes bit-identical
// results. fp16/bf16 accumulate in fp32 and round once; avg divides the accumulator by `divisor`
// before that rounding. dst may alias src[k] exactly (the kernels load a vector from every
// source before storing it).
//
// Header-only so that tests can run the scalar and AVX2 paths side by side; the AVX2/F16C code
// is compiled with target attributes and chosen at run time, so the build needs no -mavx2.
#pragma once

#include "collectives/backend.h"
#include "core/half.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define DSCPP_SHM_X86 1
#define DSCPP_SHM_AVX2 __attribute__((target("avx2,f16c")))
#else
#define DSCPP_SHM_X86 0
#endif

namespace dscpp::comm::shm {

// What reduce() handles: fp32/fp64/fp16/bf16/int32/int64/int8/uint8, all four ops.
inline bool reduce_supported(DType, ReduceOp) {
  return true;
}

inline bool cpu_has_avx2() {
#if DSCPP_SHM_X86
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

namespace detail {

// NaN-propagating max/min (as torch.max): a NaN in any slot wins. The AVX2 path mirrors this
// exactly, including which NaN survives when there are several (the later slot's).
template <typename T>
inline T max_nan(T acc, T x) {
  const T r = x > acc ? x : acc;
  return x != x ? x : r;  // NOLINT: integer types compile this away
}
template <typename T>
inline T min_nan(T acc, T x) {
  const T r = x < acc ? x : acc;
  return x != x ? x : r;  // NOLINT
}

inline float load_f(const float* p) {
  return *p;
}
inline float load_f(const fp16_t* p) {
  return static_cast<float>(*p);
}
inline float load_f(const bf16_t* p) {
  return static_cast<float>(*p);
}
inline void store_f(float* p, float v) {
  *p = v;
}
inline void store_f(fp16_t* p, float v) {
  *p = fp16_t(v);
}
inline void store_f(bf16_t* p, float v) {
  *p = bf16_t(v);
}

template <typename T>
void reduce_float_scalar(T* dst, const T* const* src, int nsrc, size_t begin, size_t end, ReduceOp op, int divisor) {
  for (size_t i = begin; i < end; ++i) {
    float acc = load_f(src[0] + i);
    for (int j = 1; j < nsrc; ++j) {
      const float x = load_f(src[j] + i);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += x;
          break;
        case ReduceOp::max:
          acc = max_nan(acc, x);
          break;
        case ReduceOp::min:
          acc = min_nan(acc, x);
          break;
      }
    }
    if (op == ReduceOp::avg) acc /= static_cast<float>(divisor);
    store_f(dst + i, acc);
  }
}

template <typename T>
void reduce_f64(T* dst, const T* const* src, int nsrc, size_t n, ReduceOp op, int divisor) {
  for (size_t i = 0; i < n; ++i) {
    T acc = src[0][i];
    for (int j = 1; j < nsrc; ++j) {
      const T x = src[j][i];
      if (op == ReduceOp::max)
        acc = max_nan(acc, x);
      else if (op == ReduceOp::min)
        acc = min_nan(acc, x);
      else
        acc += x;
    }
    if (op == ReduceOp::avg) acc /= static_cast<T>(divisor);
    dst[i] = acc;
  }
}

// Integers: sums wrap modulo 2^bits (as NCCL and torch do), computed in uint64_t so that no
// signed overflow happens; avg is the truncated quotient of the (int64) sum.
template <typename T>
void reduce_int(T* dst, const T* const* src, int nsrc, size_t n, ReduceOp op, int divisor) {
  if (op == ReduceOp::max || op == ReduceOp::min) {
    for (size_t i = 0; i < n; ++i) {
      T acc = src[0][i];
      for (int j = 1; j < nsrc; ++j)
        acc = op == ReduceOp::max ? (src[j][i] > acc ? src[j][i] : acc) : (src[j][i] < acc ? src[j][i] : acc);
      dst[i] = acc;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t acc = static_cast<uint64_t>(static_cast<int64_t>(src[0][i]));
    for (int j = 1; j < nsrc; ++j) acc += static_cast<uint64_t>(static_cast<int64_t>(src[j][i]));
    int64_t v = static_cast<int64_t>(acc);
    if (op == ReduceOp::avg) v /= divisor;
    dst[i] = static_cast<T>(v);
  }
}

#if DSCPP_SHM_X86
DSCPP_SHM_AVX2 inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
DSCPP_SHM_AVX2 inline __m256 load8(const fp16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
DSCPP_SHM_AVX2 inline __m256 load8(const bf16_t* p) {
  // A signalling NaN is not quieted here (half.h does it on load): store8 quiets it, and no
  // arithmetic result depends on it, so the bits match the scalar path.
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
DSCPP_SHM_AVX2 inline void store8(float* p, __m256 v) {
  _mm256_storeu_ps(p, v);
}
DSCPP_SHM_AVX2 inline void store8(fp16_t* p, __m256 v) {
  // F16C rounds to nearest-even and quiets NaNs with the same payload bits as half.h.
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
DSCPP_SHM_AVX2 inline void store8(bf16_t* p, __m256 v) {
  // float_to_bf16_bits, eight lanes at a time.
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x0040));
  const __m256i bits = _mm256_blendv_epi8(rounded, nan, is_nan);
  // Every lane is < 0x10000, so the saturating pack is exact; it interleaves 128-bit lanes,
  // and the permute brings quadwords 0 and 2 together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

template <ReduceOp OP>
DSCPP_SHM_AVX2 inline __m256 combine8(__m256 acc, __m256 x) {
  if constexpr (OP == ReduceOp::sum || OP == ReduceOp::avg) {
    return _mm256_add_ps(acc, x);
  } else {
    // maxps(x, acc) returns acc when either is NaN, which keeps a NaN accumulator; the blend
    // then lets a NaN x win, matching max_nan/min_nan.
    const __m256 r = OP == ReduceOp::max ? _mm256_max_ps(x, acc) : _mm256_min_ps(x, acc);
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
}

template <typename T, ReduceOp OP>
DSCPP_SHM_AVX2 void reduce_float_avx2(T* dst, T* copy, const T* const* src, int nsrc, size_t n, int divisor) {
  const __m256 div = _mm256_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  // Four vectors in flight per slot pass: enough independent adds to hide latency while the
  // loads stream from the other cores' caches.
  for (; i + 32 <= n; i += 32) {
    const T* s = src[0] + i;
    __m256 a0 = load8(s), a1 = load8(s + 8), a2 = load8(s + 16), a3 = load8(s + 24);
    for (int j = 1; j < nsrc; ++j) {
      s = src[j] + i;
      a0 = combine8<OP>(a0, load8(s));
      a1 = combine8<OP>(a1, load8(s + 8));
      a2 = combine8<OP>(a2, load8(s + 16));
      a3 = combine8<OP>(a3, load8(s + 24));
    }
    if constexpr (OP == ReduceOp::avg) {
      a0 = _mm256_div_ps(a0, div), a1 = _mm256_div_ps(a1, div);
      a2 = _mm256_div_ps(a2, div), a3 = _mm256_div_ps(a3, div);
    }
    store8(dst + i, a0), store8(dst + i + 8, a1), store8(dst + i + 16, a2), store8(dst + i + 24, a3);
    if (copy) store8(copy + i, a0), store8(copy + i + 8, a1), store8(copy + i + 16, a2), store8(copy + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = load8(src[0] + i);
    for (int j = 1; j < nsrc; ++j) a = combine8<OP>(a, load8(src[j] + i));
    if constexpr (OP == ReduceOp::avg) a = _mm256_div_ps(a, div);
    store8(dst + i, a);
    if (copy) store8(copy + i, a);
  }
  reduce_float_scalar(dst, src, nsrc, i, n, OP, divisor);
  if (copy && i < n) std::memcpy(copy + i, dst + i, (n - i) * sizeof(T));
}

template <typename T>
void reduce_float_avx2_op(T* dst, T* copy, const T* const* src, int nsrc, size_t n, ReduceOp op, int divisor) {
  switch (op) {
    case ReduceOp::sum:
      return reduce_float_avx2<T, ReduceOp::sum>(dst, copy, src, nsrc, n, divisor);
    case ReduceOp::avg:
      return reduce_float_avx2<T, ReduceOp::avg>(dst, copy, src, nsrc, n, divisor);
    case ReduceOp::max:
      return reduce_float_avx2<T, ReduceOp::max>(dst, copy, src, nsrc, n, divisor);
    case ReduceOp::min:
      return reduce_float_avx2<T, ReduceOp::min>(dst, copy, src, nsrc, n, divisor);
  }
}
#endif

template <typename T>
void reduce_float(void* dst, void* copy, const void* const* src, int nsrc, size_t n, ReduceOp op, int divisor,
                  bool simd) {
  auto* d = static_cast<T*>(dst);
  auto* s = reinterpret_cast<const T* const*>(src);
#if DSCPP_SHM_X86
  if (simd) return reduce_float_avx2_op(d, static_cast<T*>(copy), s, nsrc, n, op, divisor);
#else
  (void)simd;
#endif
  reduce_float_scalar(d, s, nsrc, 0, n, op, divisor);
  if (copy) std::memcpy(copy, dst, n * sizeof(T));
}

inline void reduce_other(DType dtype, ReduceOp op, void* dst, const void* const* src, int nsrc, size_t n, int divisor) {
  switch (dtype) {
    case DType::f64:
      return reduce_f64(static_cast<double*>(dst), reinterpret_cast<const double* const*>(src), nsrc, n, op, divisor);
    case DType::i32:
      return reduce_int(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t* const*>(src), nsrc, n, op, divisor);
    case DType::i64:
      return reduce_int(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t* const*>(src), nsrc, n, op, divisor);
    case DType::i8:
      return reduce_int(static_cast<int8_t*>(dst), reinterpret_cast<const int8_t* const*>(src), nsrc, n, op, divisor);
    case DType::u8:
      return reduce_int(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(src), nsrc, n, op, divisor);
    default:
      break;
  }
  invalid_dtype(static_cast<int>(dtype));
}

}  // namespace detail

// `simd` chooses the AVX2/F16C kernels for fp32/fp16/bf16 (only pass true when cpu_has_avx2()).
// `copy`, when not null, receives the result too (no overlap with anything): the vector
// kernels store it from registers, saving a pass over the result.
inline void reduce(DType dtype, ReduceOp op, void* dst, const void* const* src, int nsrc, size_t n, int divisor,
                   bool simd = cpu_has_avx2(), void* copy = nullptr) {
  using namespace detail;
  if (n == 0) return;
  switch (dtype) {
    case DType::f32:
      return reduce_float<float>(dst, copy, src, nsrc, n, op, divisor, simd);
    case DType::f16:
      return reduce_float<fp16_t>(dst, copy, src, nsrc, n, op, divisor, simd);
    case DType::bf16:
      return reduce_float<bf16_t>(dst, copy, src, nsrc, n, op, divisor, simd);
    default:
      break;
  }
  reduce_other(dtype, op, dst, src, nsrc, n, divisor);
  if (copy) std::memcpy(copy, dst, n * dtype_size(dtype));
}

}  // namespace dscpp::comm::shm
