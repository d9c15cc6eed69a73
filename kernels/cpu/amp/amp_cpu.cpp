#include "kernels/cpu/amp/amp_cpu.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/amp_math.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

namespace dscpp::kernels {

hd::Storage storage_of(DType t) {
  switch (t) {
    case DType::f32: return hd::Storage::f32;
    case DType::f16: return hd::Storage::f16;
    case DType::bf16: return hd::Storage::bf16;
    default: fail("dtype {} is not a floating storage type (expected fp32, fp16 or bf16)", dtype_name(t));
  }
}

namespace {

constexpr int64_t kGrain = 1 << 14;

// Calls fn(tag) with the storage as a compile-time constant (tag.value), so the storage switch
// sits outside the caller's loop and each loop body is plain enough to vectorise.
template <typename Fn>
decltype(auto) with_storage(hd::Storage s, Fn&& fn) {
  switch (s) {
    case hd::Storage::f16: return fn(std::integral_constant<hd::Storage, hd::Storage::f16>{});
    case hd::Storage::bf16: return fn(std::integral_constant<hd::Storage, hd::Storage::bf16>{});
    default: return fn(std::integral_constant<hd::Storage, hd::Storage::f32>{});
  }
}

template <typename Body>
void for_each(int64_t n, DType t, Body body) {
  hd::Storage s = storage_of(t);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { with_storage(s, [&](auto tag) { body(b, e, tag); }); }, 16);
}

}  // namespace

void accumulate_into(void* dst, DType dst_type, const float* src, int64_t n) {
  for_each(n, dst_type, [&](int64_t b, int64_t e, auto s) {
    for (int64_t i = b; i < e; ++i) hd::accumulate(dst, i, s.value, src[i]);
  });
}

void add_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  hd::Storage from = storage_of(src_type);
  for_each(n, dst_type, [&](int64_t b, int64_t e, auto s) {
    for (int64_t i = b; i < e; ++i) hd::accumulate(dst, i, s.value, hd::load(src, i, from));
  });
}

void convert_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  hd::Storage from = storage_of(src_type);
  for_each(n, dst_type, [&](int64_t b, int64_t e, auto s) {
    for (int64_t i = b; i < e; ++i) hd::store(dst, i, s.value, hd::load(src, i, from));
  });
}

void store_from_f32(void* dst, DType dst_type, const float* src, int64_t n) {
  for_each(n, dst_type, [&](int64_t b, int64_t e, auto s) {
    for (int64_t i = b; i < e; ++i) hd::store(dst, i, s.value, src[i]);
  });
}

void load_to_f32(const void* src, DType src_type, float* dst, float scale, int64_t n) {
  for_each(n, src_type, [&](int64_t b, int64_t e, auto s) {
    if (scale == 1.0f)
      for (int64_t i = b; i < e; ++i) dst[i] = hd::load(src, i, s.value);
    else
      for (int64_t i = b; i < e; ++i) dst[i] = hd::load(src, i, s.value) * scale;
  });
}

void scale_inplace(void* x, DType type, float scale, int64_t n) {
  if (scale == 1.0f) return;
  for_each(n, type, [&](int64_t b, int64_t e, auto s) {
    for (int64_t i = b; i < e; ++i) hd::store(x, i, s.value, hd::load(x, i, s.value) * scale);
  });
}

bool any_nonfinite(const void* x, DType type, int64_t n) {
  std::atomic<bool> found{false};
  for_each(n, type, [&](int64_t b, int64_t e, auto s) {
    bool any = false;
    for (int64_t i = b; i < e; ++i) any |= hd::nonfinite(hd::load(x, i, s.value));
    if (any) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

namespace {

// Σ x[i]² over [b, e) in double, in kLanes running sums (element i into lane (i − b) mod
// kLanes) added in lane order at the end: a fixed order, like one running sum, but not a chain
// of dependent adds, which held the grad norm of a 3M-parameter model to one element per add
// latency (~4 ms of a ~500 ms training step).
template <hd::Storage S>
double block_sum_squares(const void* x, int64_t b, int64_t e) {
  constexpr int64_t kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = b;
  for (; i + kLanes <= e; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      const double v = hd::load(x, i + l, S);
      lane[l] += v * v;
    }
  for (int64_t l = 0; i < e; ++i, ++l) {
    const double v = hd::load(x, i, S);
    lane[l] += v * v;
  }
  double acc = 0;
  for (double l : lane) acc += l;
  return acc;
}

}  // namespace

double sum_squares(const void* x, DType type, int64_t n) {
  constexpr int64_t kBlocks = 64;
  int64_t per = (n + kBlocks - 1) / kBlocks;
  std::vector<double> partial(kBlocks, 0.0);
  hd::Storage st = storage_of(type);
  parallel_for(kBlocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t b = std::min(n, blk * per), e = std::min(n, (blk + 1) * per);
      partial[static_cast<size_t>(blk)] =
          with_storage(st, [&](auto tag) { return block_sum_squares<decltype(tag)::value>(x, b, e); });
    }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace dscpp::kernels
