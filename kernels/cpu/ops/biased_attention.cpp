// The CPU table's ops for attention with an additive bias (T5's): the relative position bias
// from its bucket table, and the masked softmax of biased scores. The bias gradient is split by
// head, so each thread owns its column of the table and sums in one fixed order.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"

#include <algorithm>
#include <vector>

namespace dscpp::kernels::cpu {
namespace {

// The bucket of every (t, s): they depend on the shape alone, not on the head.
std::vector<int32_t> buckets(int64_t Tq, int64_t Tk, int64_t q0, int32_t bidirectional, int32_t num_buckets,
                             int32_t max_distance) {
  std::vector<int32_t> b(static_cast<size_t>(Tq * Tk));
  for (int64_t t = 0; t < Tq; ++t)
    for (int64_t s = 0; s < Tk; ++s)
      b[t * Tk + s] = hd::relative_bucket(s - (q0 + t), bidirectional != 0, num_buckets, max_distance);
  return b;
}

}  // namespace

namespace op {

int relative_bias_forward(const dscpp_ops* o, const void* table, void* out, int64_t heads, int64_t Tq, int64_t Tk,
                          int64_t q0, int32_t bidirectional, int32_t num_buckets, int32_t max_distance) {
  if (int s = check_table(o)) return s;
  if (!relative_bias_args_ok(heads, Tq, Tk, bidirectional, num_buckets, max_distance) ||
      bad_ptr(table, num_buckets * heads) ||
      bad_ptr(out, heads * Tq * Tk))
    return DSCPP_E_INVALID_ARGUMENT;
  const std::vector<int32_t> b = buckets(Tq, Tk, q0, bidirectional, num_buckets, max_distance);
  const auto* w = static_cast<const float*>(table);
  auto* y = static_cast<float*>(out);
  const int64_t n = Tq * Tk;
  dscpp::parallel_for(heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t i = 0; i < n; ++i) y[h * n + i] = w[int64_t{b[i]} * heads + h];
  });
  return DSCPP_OK;
}

int relative_bias_backward(const dscpp_ops* o, const void* dout, void* dtable, int64_t heads, int64_t Tq, int64_t Tk,
                           int64_t q0, int32_t bidirectional, int32_t num_buckets, int32_t max_distance) {
  if (int s = check_table(o)) return s;
  if (!relative_bias_args_ok(heads, Tq, Tk, bidirectional, num_buckets, max_distance) ||
      bad_ptr(dtable, num_buckets * heads) ||
      bad_ptr(dout, heads * Tq * Tk))
    return DSCPP_E_INVALID_ARGUMENT;
  const std::vector<int32_t> b = buckets(Tq, Tk, q0, bidirectional, num_buckets, max_distance);
  const auto* dy = static_cast<const float*>(dout);
  auto* dw = static_cast<float*>(dtable);
  const int64_t n = Tq * Tk;
  dscpp::parallel_for(heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> sums(static_cast<size_t>(num_buckets));
    for (int64_t h = h0; h < h1; ++h) {
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (int64_t i = 0; i < n; ++i) sums[b[i]] += dy[h * n + i];
      for (int32_t k = 0; k < num_buckets; ++k) dw[int64_t{k} * heads + h] += sums[k];
    }
  });
  return DSCPP_OK;
}

int masked_softmax_forward(const dscpp_ops* o, const void* scores, const void* bias, const int32_t* key_len,
                           int64_t key_len_ld, void* probs, int64_t batch, int64_t heads, int64_t Tq, int64_t Tk,
                           int32_t causal) {
  if (int s = check_table(o)) return s;
  const int64_t rows = batch * heads * Tq;
  if (batch < 0 || heads < 0 || Tq < 0 || Tk < 0 || (causal != 0 && Tq > Tk) || bad_ptr(scores, rows * Tk) ||
      bad_ptr(probs, rows * Tk) || (key_len != nullptr && key_len_ld < 1))
    return DSCPP_E_INVALID_ARGUMENT;
  const auto* x = static_cast<const float*>(scores);
  const auto* bs = static_cast<const float*>(bias);
  auto* y = static_cast<float*>(probs);
  dscpp::parallel_for(rows, row_grain(Tk, kGrainElements / 4), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (heads * Tq), ht = r % (heads * Tq), t = r % Tq;
      int64_t live = key_len != nullptr ? std::clamp<int64_t>(key_len[b * key_len_ld], 0, Tk) : Tk;
      if (causal != 0) live = std::min(live, t + Tk - Tq + 1);
      const float* xr = x + r * Tk;
      float* yr = y + r * Tk;
      if (bs != nullptr) {
        const float* br = bs + ht * Tk;
        for (int64_t s = 0; s < live; ++s) yr[s] = xr[s] + br[s];
        softmax_row(yr, 1.0f, yr, live);
      } else {
        softmax_row(xr, 1.0f, yr, live);
      }
      std::fill(yr + live, yr + Tk, 0.0f);
    }
  });
  return DSCPP_OK;
}

}  // namespace op
}  // namespace dscpp::kernels::cpu
