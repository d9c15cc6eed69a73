// The linear-layer entries of the CPU ops table (model.h, ABI 2): one GEMM each, with the bias,
// residual, GELU and bias-gradient work done in the GEMM's epilogue (gemm_native.h) while the
// tile is in registers or the panel in cache, instead of separate passes over activations.
//
// CUDA: these will be filled by cublasLtMatmul with the matching epilogues (EPILOGUE_BIAS,
// EPILOGUE_GELU_AUX_BIAS for gelu_out, EPILOGUE_BGRADA for dbias, EPILOGUE_DGELU for gelu_pre)
// in kernels/cuda; until then the CUDA table leaves these entries NULL.
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_native.h"

namespace dscpp::kernels::cpu {
namespace {

bool bad_sizes(int64_t rows, int64_t in, int64_t out) {
  return !fits_int32(rows) || !fits_int32(in) || !fits_int32(out);
}

}  // namespace

namespace op {

int linear_forward(const dscpp_ops* o, const void* x, const void* W, const void* bias, const void* residual, void* y,
                   void* gelu_out, int64_t rows, int64_t in, int64_t out) {
  if (int s = check_table(o)) return s;
  if (bad_sizes(rows, in, out) || bad_ptr(y, rows * out) || bad_ptr(x, rows * in) ||
      bad_ptr(W, rows > 0 ? out * in : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  // y[rows×out] = x·Wᵀ (+ residual) + bias, then GELU.
  GemmArgs g = make_args(DSCPP_NO_TRANS, DSCPP_TRANS, rows, out, in, 1.0f, x, in, W, in,
                         residual != nullptr ? 1.0f : 0.0f, y, out);
  g.bias = static_cast<const float*>(bias);
  g.c_in = static_cast<const float*>(residual);
  if (gelu_out != nullptr) {
    g.act = GemmArgs::Act::gelu;
    g.act_out = static_cast<float*>(gelu_out);
  }
  gemm_f32(g);
  return DSCPP_OK;
}

int linear_backward(const dscpp_ops* o, const void* dy, const void* x, const void* W, void* dW, void* dbias, void* dx,
                    const void* gelu_pre, int64_t rows, int64_t in, int64_t out) {
  if (int s = check_table(o)) return s;
  if (bad_sizes(rows, in, out) || bad_ptr(dy, rows * out) || bad_ptr(x, rows * in) || bad_ptr(W, out * in) ||
      bad_ptr(dW, out * in))
    return DSCPP_E_INVALID_ARGUMENT;
  // dW[out×in] += dyᵀ·x; the row sums of op(A) = dyᵀ are dbias.
  GemmArgs gw = make_args(DSCPP_TRANS, DSCPP_NO_TRANS, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dW, in);
  gw.a_row_sums = static_cast<float*>(dbias);
  gemm_f32(gw);
  if (dx == nullptr) return DSCPP_OK;
  // dx[rows×in] = dy·W, through GELU's derivative when the layer had one.
  GemmArgs gx = make_args(DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
  if (gelu_pre != nullptr) {
    gx.act = GemmArgs::Act::gelu_backward;
    gx.act_in = static_cast<const float*>(gelu_pre);
  }
  gemm_f32(gx);
  return DSCPP_OK;
}

}  // namespace op

}  // namespace dscpp::kernels::cpu
