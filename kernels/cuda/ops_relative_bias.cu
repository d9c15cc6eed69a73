// T5's relative position bias (model.h ABI 8) on the CUDA table. A bucket depends on the key's
// offset from the query alone, so it is constant along each diagonal s − t of a head's Tq × Tk
// matrix: the forward computes it once per (t, s) for every head, and the backward sums each
// diagonal first (one thread per head and diagonal, reading neighbouring keys across a warp),
// then each (bucket, head) adds its diagonals. Both passes run in a fixed order: no atomics,
// the same bits on every run.
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_math.h"

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

DSCPP_HD inline int32_t bucket_of(const RelativeBias& rb, int64_t key_minus_query) {
  return hd::relative_bucket(key_minus_query, rb.bidirectional, rb.num_buckets, rb.max_distance);
}

// Index i = t·Tk + s; every head's element of that (t, s).
struct Forward {
  Src table;
  Dst out;
  RelativeBias rb;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem ts = divmod(i, rb.Tk);
    const int64_t row = int64_t(bucket_of(rb, ts.rem - (rb.q0 + ts.quot))) * rb.heads, n = rb.Tq * rb.Tk;
    for (int64_t h = 0; h < rb.heads; ++h) out[h * n + i] = table[row + h];
  }
};

// Index i = h·diagonals + j, diagonal j holding the (t, t + j − (Tq − 1)).
struct DiagonalSums {
  Src dout;
  float* sums;
  int32_t* buckets;  // per diagonal
  RelativeBias rb;
  int64_t diagonals;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem hj = divmod(i, diagonals);
    const int64_t off = hj.rem - (rb.Tq - 1);  // s − t
    const int64_t t0 = off < 0 ? -off : 0, t1 = rb.Tk - off < rb.Tq ? rb.Tk - off : rb.Tq;
    const Src d = dout + hj.quot * rb.Tq * rb.Tk + off;
    float acc = 0.0f;
    for (int64_t t = t0; t < t1; ++t) acc += d[t * (rb.Tk + 1)];
    sums[i] = acc;
    if (hj.quot == 0) buckets[hj.rem] = bucket_of(rb, off - rb.q0);
  }
};

// Index i = k·heads + h, the table's layout.
struct BucketSums {
  const float* sums;
  const int32_t* buckets;
  Dst dtable;
  int64_t heads, diagonals;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem kh = divmod(i, heads);
    const float* s = sums + kh.rem * diagonals;
    float acc = 0.0f;
    for (int64_t j = 0; j < diagonals; ++j)
      if (buckets[j] == kh.quot) acc += s[j];
    dtable[i] += acc;
  }
};

int64_t diagonals_of(const RelativeBias& rb) {
  return rb.Tq > 0 && rb.Tk > 0 ? rb.Tq + rb.Tk - 1 : 0;
}

}  // namespace

Status relative_bias_forward(Src table, Dst out, const RelativeBias& rb, Stream s) {
  if (rb.heads == 0) return kOk;
  return launch_elementwise(rb.Tq * rb.Tk, s, Forward{table, out, rb});
}

int64_t relative_bias_scratch_floats(const RelativeBias& rb) {
  return (rb.heads + 1) * diagonals_of(rb);
}

Status relative_bias_backward(Src dout, Dst dtable, const RelativeBias& rb, float* scratch, Stream s) {
  const int64_t diagonals = diagonals_of(rb);
  if (rb.heads == 0 || diagonals == 0) return kOk;
  // The buckets (int32, as wide as a float) follow the sums in the same scratch.
  auto* buckets = reinterpret_cast<int32_t*>(scratch + rb.heads * diagonals);
  if (Status st = launch_per_index(rb.heads * diagonals, s, DiagonalSums{dout, scratch, buckets, rb, diagonals});
      st != kOk)
    return st;
  return launch_per_index(int64_t(rb.num_buckets) * rb.heads, s,
                          BucketSums{scratch, buckets, dtable, rb.heads, diagonals});
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
