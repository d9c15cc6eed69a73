// Elementwise kernels of the CUDA ops table: the streaming ones as map.h's maps.
#include "kernels/cuda/map.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_math.h"
#include "kernels/rope_math.h"

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
struct MulOp {
  DSCPP_HD float operator()(float a, float b) const { return a * b; }
};
struct SiluOp {
  DSCPP_HD float operator()(float x) const { return hd::silu(x); }
};
struct SiluGradOp {  // (x, dy)
  DSCPP_HD float operator()(float x, float dy) const { return dy * hd::silu_grad(x); }
};
struct SwigluOp {  // (gate, up)
  DSCPP_HD float operator()(float g, float u) const { return hd::silu(g) * u; }
};
// Both inputs of an element are read before either output is written: dgate/dup may be gate/up.
struct SwigluGrad {
  Src gate, up, dy;
  Dst dgate, dup;
  DSCPP_HD void operator()(int64_t i) const {
    const float g = gate[i], u = up[i], d = dy[i];
    dgate[i] = d * u * hd::silu_grad(g);
    dup[i] = d * hd::silu(g);
  }
};
// Index i = row·cols + column of the block.
struct Copy2d {
  Src src;
  Dst dst;
  int64_t src_ld, dst_ld, cols;
  bool accumulate;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem rc = divmod(i, cols);
    const ElemRef d = dst[rc.quot * dst_ld + rc.rem];
    const float v = src[rc.quot * src_ld + rc.rem];
    d = accumulate ? float(d) + v : v;
  }
};
// Index i = row·heads·pairs + head·pairs + pair: one thread rotates one pair of one head.
struct Rope {
  Dst x;
  const int32_t* positions;
  int64_t T, width, heads, head_dim, pos0;
  hd::RopeTable table;
  bool backward;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem ip = divmod(i, table.pairs);
    const QuotRem rh = divmod(ip.quot, heads);
    const int64_t row = rh.quot;
    const int64_t pos = positions != nullptr ? positions[row] : pos0 + divmod(row, T).rem;
    const int32_t k = int32_t(ip.rem);
    const int64_t base = row * width + rh.rem * head_dim;
    const ElemRef ea = x[base + hd::rope_first(table, k)], eb = x[base + hd::rope_second(table, k)];
    float a = ea, b = eb;
    hd::rope_rotate(a, b, hd::rope_angle(table, pos, k), backward);
    ea = a;
    eb = b;
  }
};
// One thread an element: the mask needs the index, which map.h's value maps do not pass. Each
// element is read before it is written, so y may be x.
struct Dropout {
  Src x;
  Dst y;
  hd::DropoutDraw d;
  DSCPP_HD void operator()(int64_t i) const { y[i] = hd::dropout(x[i], d, i); }
};
struct CheckPositions {
  const int32_t* positions;
  int32_t* bad;
  DSCPP_HD void operator()(int64_t i) const {
    if (positions[i] < 0) *bad = 1;
  }
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

Status mul(Src a, Src b, Dst y, int64_t n, Stream s) {
  return launch_map(a, b, y, n, MulOp{}, s);
}
Status silu_forward(Src x, Dst y, int64_t n, Stream s) {
  return launch_map(x, y, n, SiluOp{}, s);
}
Status silu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s) {
  return launch_map(x, dy, dx, n, SiluGradOp{}, s);
}
Status swiglu_forward(Src gate, Src up, Dst y, int64_t n, Stream s) {
  return launch_map(gate, up, y, n, SwigluOp{}, s);
}
Status swiglu_backward(Src gate, Src up, Src dy, Dst dgate, Dst dup, int64_t n, Stream s) {
  return launch_elementwise(n, s, SwigluGrad{gate, up, dy, dgate, dup});
}
Status copy_2d(Src src, int64_t src_ld, Dst dst, int64_t dst_ld, int64_t rows, int64_t cols, bool accumulate,
               Stream s) {
  if (rows == 0 || cols == 0) return kOk;
  return launch_elementwise(rows * cols, s, Copy2d{src, dst, src_ld, dst_ld, cols, accumulate});
}
Status dropout(Src x, Dst y, int64_t n, const hd::DropoutDraw& d, Stream s) {
  return launch_elementwise(n, s, Dropout{x, y, d});
}
Status check_positions(const int32_t* positions, int64_t n, int32_t* bad, Stream s) {
  return launch_elementwise(n, s, CheckPositions{positions, bad});
}
Status rope(Dst x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim, const int32_t* positions,
            int64_t pos0, const hd::RopeTable& table, bool backward, Stream s) {
  const int64_t n = batch * T * heads * table.pairs;
  if (n == 0) return kOk;
  return launch_elementwise(n, s, Rope{x, positions, T, width, heads, head_dim, pos0, table, backward});
}

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
