// The masked softmax row that the table's softmax (ops_rows.cu) and blockwise attention
// (ops_attention.cu) share, as pieces of a launch.h reduction body: round 0 the max of scale·x
// over the row's live entries begin … live−1, round 1 Σ e^(scale·x − max), then the
// probabilities (0 outside the live entries).
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/ops_math.h"

namespace dscpp::DSCPP_CUDA_NS::ops {

// Row and Out: float pointers (attention's fp32 scores) or compute-dtype views (elems.h).
template <class Row>
DSCPP_HD inline double softmax_partial(Row row, int64_t begin, int64_t live, float scale, const Thread& t, int round,
                                       const double* totals) {
  if (round == 0) {
    float m = -3.402823466e38f;
    for (int64_t c = begin + t.thread; c < live; c += t.threads) m = scale * row[c] > m ? scale * row[c] : m;
    return m;
  }
  const float m = static_cast<float>(totals[0]);
  double acc = 0;
  for (int64_t c = begin + t.thread; c < live; c += t.threads) acc += hd::softmax_exp(row[c], scale, m);
  return acc;
}

DSCPP_HD inline double softmax_combine(int round, double p, double q) {
  return round == 0 ? (p > q ? p : q) : p + q;
}

// out may be row.
template <class Row, class Out>
DSCPP_HD inline void softmax_write(Row row, Out out, int64_t cols, int64_t begin, int64_t live, float scale,
                                   const double* totals, const Thread& t) {
  const float m = static_cast<float>(totals[0]), inv = 1.0f / static_cast<float>(totals[1]);
  for (int64_t c = t.thread; c < cols; c += t.threads)
    out[c] = c >= begin && c < live ? hd::softmax_exp(row[c], scale, m) * inv : 0.0f;
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
