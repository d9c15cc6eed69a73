// Column reductions of the CUDA ops table: bias, layer-norm and RMSNorm parameter gradients (sums over
// rows) and the embedding gradient (sums over each token's positions).
//
// One thread per column looping over all rows (what these were) gives a 768-column layer 768
// threads for 8192 rows: under 1% of an H100's threads, and those three kernels were 81% of a
// GPT-2 step. Here the rows are cut into chunks and a thread sums one (chunk, column); neighbours
// take neighbouring columns, so each warp reads 128 consecutive bytes of a row. A second
// launch adds each column's chunk partials in a fixed tree. Both passes are fixed orders: no
// atomics, the same bits on every run.
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_math.h"

#include <algorithm>
#include <numeric>

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

struct BiasTerms {
  static constexpr int kOut = 1;
  Src dy;
  int64_t cols;
  DSCPP_HD void add(int64_t r, int64_t c, float* acc) const { acc[0] += dy[r * cols + c]; }
};
// dgamma += Σ dy·x̂, dbeta += Σ dy.
struct LayerNormTerms {
  static constexpr int kOut = 2;
  Src dy, x;
  const float *mean, *rstd;
  int64_t cols;
  DSCPP_HD void add(int64_t r, int64_t c, float* acc) const {
    const int64_t i = r * cols + c;
    acc[0] += dy[i] * hd::layernorm_xhat(x[i], mean[r], rstd[r]);
    acc[1] += dy[i];
  }
};

// dgamma += Σ dy·x·rstd (RMSNorm).
struct RmsNormTerms {
  static constexpr int kOut = 1;
  Src dy, x;
  const float* rstd;
  int64_t cols;
  DSCPP_HD void add(int64_t r, int64_t c, float* acc) const {
    const int64_t i = r * cols + c;
    acc[0] += dy[i] * (x[i] * rstd[r]);
  }
};

// Index i = chunk·cols + column. With one chunk the sums go straight into the outputs.
template <class Terms>
struct ColumnChunks {
  Terms terms;
  Dst out[Terms::kOut];
  float* partials;  // [kOut][chunks][cols]; unused with one chunk
  int64_t rows, cols;
  ColumnPlan plan;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem kc = divmod(i, cols);
    const int64_t k = kc.quot, c = kc.rem;
    const int64_t r0 = k * plan.rows_per_chunk;
    const int64_t r1 = r0 + plan.rows_per_chunk < rows ? r0 + plan.rows_per_chunk : rows;
    float acc[Terms::kOut] = {};
    for (int64_t r = r0; r < r1; ++r) terms.add(r, c, acc);
    for (int o = 0; o < Terms::kOut; ++o) {
      if (plan.chunks == 1) out[o][c] += acc[o];
      else partials[(o * plan.chunks + k) * cols + c] = acc[o];
    }
  }
};
// One warp per (output, column): its lanes share the column's chunk partials, a fixed tree adds
// them (launch.h's launch_rows), lane 0 adds the total on. A thread per column
// looping over the partials (the first version) left 768 threads reading 256 values one after
// another: 83 µs per layer norm on an H200 (ncu), longer than the first pass.
struct ColumnTotals {
  static constexpr int kRounds = 1;
  Dst out0, out1;  // the outputs (out1 unused with one output)
  const float* partials;
  int64_t cols, chunks;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const int64_t o = t.block / cols, c = t.block % cols;
    double acc = 0;
    for (int64_t k = t.thread; k < chunks; k += t.threads) acc += partials[(o * chunks + k) * cols + c];
    return acc;
  }
  DSCPP_HD static double combine(int, double a, double b) { return a + b; }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    if (t.thread != 0) return;
    const int64_t o = t.block / cols, c = t.block % cols;
    (o == 0 ? out0 : out1)[c] += static_cast<float>(totals[0]);
  }
};

template <class Terms>
Status column_sums(Terms terms, const Dst* out, float* scratch, int64_t rows, int64_t cols, Stream s) {
  if (rows == 0 || cols == 0) return kOk;
  const ColumnPlan plan = column_plan(rows, cols);
  static_assert(Terms::kOut <= 2, "ColumnTotals writes at most two outputs");
  ColumnChunks<Terms> pass1{terms, {}, scratch, rows, cols, plan};
  for (int o = 0; o < Terms::kOut; ++o) pass1.out[o] = out[o];
  if (Status st = launch_per_index(plan.chunks * cols, s, pass1); st != kOk || plan.chunks == 1) return st;
  const ColumnTotals pass2{out[0], Terms::kOut > 1 ? out[Terms::kOut - 1] : Dst{}, scratch, cols, plan.chunks};
  return launch_rows(unsigned(Terms::kOut * cols), plan.chunks, s, pass2);
}

// Index i = segment·dim + column: the segment's positions in order, added onto the table row as
// the CPU table adds them (row by row), so the result is the same bits.
struct SegmentSums {
  const int32_t *order, *start, *id;
  Src dout;
  Dst dtable;
  int64_t dim;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem sc = divmod(i, dim);
    const int64_t seg = sc.quot, c = sc.rem;
    const ElemRef dst = dtable[int64_t(id[seg]) * dim + c];
    float acc = dst;
    for (int32_t k = start[seg]; k < start[seg + 1]; ++k) acc += dout[int64_t(order[k]) * dim + c];
    dst = acc;
  }
};

}  // namespace

int64_t column_scratch_floats(int64_t rows, int64_t cols, int outputs) {
  if (rows <= 0 || cols <= 0) return 0;
  const ColumnPlan plan = column_plan(rows, cols);
  return plan.chunks == 1 ? 0 : outputs * plan.chunks * cols;
}

Status bias_grad(Src dy, Dst dbias, int64_t rows, int64_t cols, float* scratch, Stream s) {
  const Dst out[1] = {dbias};
  return column_sums(BiasTerms{dy, cols}, out, scratch, rows, cols, s);
}

Status layernorm_param_grads(Src dy, Src x, const float* mean, const float* rstd, Dst dgamma, Dst dbeta, int64_t rows,
                             int64_t cols, float* scratch, Stream s) {
  const Dst out[2] = {dgamma, dbeta};
  return column_sums(LayerNormTerms{dy, x, mean, rstd, cols}, out, scratch, rows, cols, s);
}

Status rmsnorm_param_grad(Src dy, Src x, const float* rstd, Dst dgamma, int64_t rows, int64_t cols, float* scratch,
                          Stream s) {
  const Dst out[1] = {dgamma};
  return column_sums(RmsNormTerms{dy, x, rstd, cols}, out, scratch, rows, cols, s);
}

std::vector<int32_t> embedding_segments(const int32_t* ids, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  std::vector<int32_t> start, id;
  for (int64_t k = 0; k < n; ++k)
    if (k == 0 || ids[order[size_t(k)]] != ids[order[size_t(k - 1)]]) {
      start.push_back(int32_t(k));
      id.push_back(ids[order[size_t(k)]]);
    }
  start.push_back(int32_t(n));
  std::vector<int32_t> out = std::move(order);
  out.insert(out.end(), start.begin(), start.end());
  out.insert(out.end(), id.begin(), id.end());
  return out;
}

Status embedding_backward(const int32_t* segments, int64_t n, int64_t count, Src dout, Dst dtable,
                          int64_t dim, Stream s) {
  if (count == 0 || dim == 0) return kOk;
  const int32_t* start = segments + n;
  return launch_per_index(count * dim, s, SegmentSums{segments, start, start + count + 1, dout, dtable, dim});
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
