// Elementwise kernels of the CUDA ops table: the streaming ones as map.h's maps.
#include "kernels/cuda/map.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_math.h"

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

struct Fill {
  Dst x;
  float v;
  DSCPP_HD void operator()(int64_t i) const { x[i] = v; }
};
// The per-element ops of the maps (map.h).
struct AddOp {
  DSCPP_HD float operator()(float a, float b) const { return a + b; }
};
struct AxpyOp {  // y + alpha·x, as (y, x)
  float alpha;
  DSCPP_HD float operator()(float y, float x) const { return y + alpha * x; }
};
struct ScaleOp {
  float alpha;
  DSCPP_HD float operator()(float x) const { return x * alpha; }
};
struct GeluOp {
  DSCPP_HD float operator()(float x) const { return hd::gelu(x); }
};
struct GeluGradOp {  // (x, dy)
  DSCPP_HD float operator()(float x, float dy) const { return dy * hd::gelu_grad(x); }
};
struct ReluOp {
  DSCPP_HD float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluGradOp {  // (x, dy)
  DSCPP_HD float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};
struct Epilogue {
  Dst x;
  Src bias, residual;
  Dst gelu_out;
  int64_t cols;
  DSCPP_HD void operator()(int64_t i) const {
    float v = x[i];
    if (bias != nullptr) v += bias[divmod(i, cols).rem];
    if (residual != nullptr) v += residual[i];
    x[i] = v;
    if (gelu_out != nullptr) gelu_out[i] = hd::gelu(v);
  }
};
struct CheckIds {
  const int32_t* ids;
  int64_t vocab;
  int32_t* bad;
  DSCPP_HD void operator()(int64_t i) const {
    if (hd::embedding_row(ids[i], vocab, 0) < 0) *bad = 1;
  }
};
struct Gather {
  const int32_t* ids;
  Src table;
  Dst out;
  int64_t dim;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem rc = divmod(i, dim);
    out[i] = table[int64_t{ids[rc.quot]} * dim + rc.rem];
  }
};
struct CheckTargets {
  const int32_t* targets;
  int64_t cols;
  int32_t* bad;
  DSCPP_HD void operator()(int64_t r) const {
    if (targets[r] >= cols) *bad = 1;
  }
};
struct CeGrad {
  Src probs;
  const int32_t* targets;
  Dst d;
  int64_t cols;
  float scale;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem rc = divmod(i, cols);
    const int32_t t = targets[rc.quot];
    d[i] = t < 0 ? 0.0f : hd::cross_entropy_grad(probs[i], rc.rem == t, scale);
  }
};

}  // namespace

Status fill(Dst x, float v, int64_t n, Stream s) {
  return launch_elementwise(n, s, Fill{x, v});
}
Status add(Src a, Src b, Dst y, int64_t n, Stream s) {
  return launch_map(a, b, y, n, AddOp{}, s);
}
Status axpy(float alpha, Src x, Dst y, int64_t n, Stream s) {
  return launch_map(Src(y), x, y, n, AxpyOp{alpha}, s);
}
Status scale(float alpha, Dst x, int64_t n, Stream s) {
  return launch_map(Src(x), x, n, ScaleOp{alpha}, s);
}
Status gelu_forward(Src x, Dst y, int64_t n, Stream s) {
  return launch_map(x, y, n, GeluOp{}, s);
}
Status gelu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s) {
  return launch_map(x, dy, dx, n, GeluGradOp{}, s);
}
Status relu_forward(Src x, Dst y, int64_t n, Stream s) {
  return launch_map(x, y, n, ReluOp{}, s);
}
Status relu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s) {
  return launch_map(x, dy, dx, n, ReluGradOp{}, s);
}
Status bias_residual_gelu(Dst x, Src bias, Src residual, Dst gelu_out, int64_t rows,
                          int64_t cols, Stream s) {
  if (bias == nullptr && residual == nullptr && gelu_out == nullptr) return kOk;
  return launch_elementwise(rows * cols, s, Epilogue{x, bias, residual, gelu_out, cols});
}
Status check_ids(const int32_t* ids, int64_t n, int64_t vocab, int32_t* bad, Stream s) {
  return launch_elementwise(n, s, CheckIds{ids, vocab, bad});
}
Status embedding_forward(const int32_t* ids, Src table, Dst out, int64_t n, int64_t dim, Stream s) {
  return launch_elementwise(n * dim, s, Gather{ids, table, out, dim});
}
Status check_targets(const int32_t* targets, int64_t rows, int64_t cols, int32_t* bad, Stream s) {
  return launch_elementwise(rows, s, CheckTargets{targets, cols, bad});
}
Status cross_entropy_backward(Src probs, const int32_t* targets, Dst dlogits, int64_t rows, int64_t cols,
                              float scale, Stream s) {
  return launch_elementwise(rows * cols, s, CeGrad{probs, targets, dlogits, cols, scale});
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
