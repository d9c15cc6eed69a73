// The CUDA ops table: argument checks as in the CPU table, cuBLAS for the GEMMs (exact fp32 like
// the CPU's sgemm unless the context's gemm_math puts them on the tensor cores; 16-bit in and out
// with fp32 accumulation under a 16-bit compute dtype), the kernels of
// ops_kernels.h for the rest, all on the context's stream. Ops that must answer on the host
// (invalid ids or targets, the loss sums, the embedding gradient's grouping, copies) synchronise
// the stream; everything else returns as soon as it is enqueued.
#include "kernels/cuda/ops_table.h"

#include "core/knobs.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/compute_type.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_args.h"  // the CPU table's argument rules

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"  // the CPU table's GEMM behind cuBLAS's interface
namespace dscpp::DSCPP_CUDA_NS {
class CudnnAttention {};  // no cuDNN or cuBLASLt on the host: the members stay null
class LtLinear {};
}  // namespace dscpp::DSCPP_CUDA_NS
#else
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/lt_linear.h"

#include <cublas_v2.h>
#endif

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::DSCPP_CUDA_NS {

using kernels::bad_ptr;
using kernels::fits_int32;
using kernels::ids_in_range;

namespace {

void blas_check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("{} failed: {} ({})", call, cublasGetStatusString(s), static_cast<int>(s));
}

#define DSCPP_CUBLAS_CHECK(call) blas_check((call), #call)

// ---- elementwise -------------------------------------------------------------------------------

template <class Launch>
int unary_op(const dscpp_ops* o, const void* x, void* y, int64_t n, Launch launch) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(launch(rd(o, x), wr(o, y), n, ctx(o).stream));
}

template <class Launch>
int binary_op(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n, Launch launch) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(dy, n) || bad_ptr(dx, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(launch(rd(o, x), rd(o, dy), wr(o, dx), n, ctx(o).stream));
}

// Causal rows must fit one grid so that row r of the launch is query r mod T (ops_rows.cu).
bool causal_ok(int64_t groups, int64_t T) {
  return groups >= 0 && T >= 0 && fits_int32(groups * T);
}

// Runs check(flag) on the stream and reads the flag back: true when the kernel set it.
template <class Check>
bool flagged(OpsContext& c, Check check) {
  DSCPP_CUDA_CHECK(cudaMemsetAsync(c.flag, 0, sizeof(int32_t), c.stream));
  DSCPP_CUDA_CHECK(check(c.flag));
  int32_t host = 0;
  DSCPP_CUDA_CHECK(cudaMemcpyAsync(&host, c.flag, sizeof host, cudaMemcpyDeviceToHost, c.stream));
  DSCPP_CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return host != 0;
}

}  // namespace

namespace op {

int gemm_strided_batched(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb,
                         float beta, void* C, int64_t ldc, int64_t sc, int64_t batch) {
  if (int s = check_ops(o)) return s;
  if (!fits_int32(M) || !fits_int32(N) || !fits_int32(K) || !fits_int32(lda) || !fits_int32(ldb) || !fits_int32(ldc) ||
      !fits_int32(batch))
    return DSCPP_E_INVALID_ARGUMENT;
  if (M == 0 || N == 0 || batch == 0) return DSCPP_OK;
  if (A == nullptr || B == nullptr || C == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  const Storage st = storage_of(o->dtype);
  return guarded([&] {
    if (K > 0) {
      A = c.operand(0, A, st, operand_span(ta, M, K, lda, sa, batch));
      B = c.operand(1, B, st, operand_span(tb, K, N, ldb, sb, batch));
    }
    return gemm_on(c, c.operand_storage(st), st, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                   batch);
  });
}

int gemm(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
         const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc) {
  return gemm_strided_batched(o, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

int fill(const dscpp_ops* o, void* x, float v, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::fill(wr(o, x), v, n, ctx(o).stream));
}

int copy(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0 || x == y) return DSCPP_OK;
  return status(
      cudaMemcpyAsync(y, x, size_t(n * storage_bytes(storage_of(o->dtype))), cudaMemcpyDeviceToDevice, ctx(o).stream));
}

int add(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(a, n) || bad_ptr(b, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::add(rd(o, a), rd(o, b), wr(o, y), n, ctx(o).stream));
}

int axpy(const dscpp_ops* o, float alpha, const void* x, void* y, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::axpy(alpha, rd(o, x), wr(o, y), n, ctx(o).stream));
}

int scale(const dscpp_ops* o, float alpha, void* x, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::scale(alpha, wr(o, x), n, ctx(o).stream));
}

int bias_add(const dscpp_ops* o, void* x, const void* bias, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || cols < 0 || bad_ptr(x, rows * cols) || bad_ptr(bias, rows > 0 ? cols : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::bias_residual_gelu(wr(o, x), rd(o, bias), Src{}, Dst{}, rows, cols, ctx(o).stream));
}

int bias_grad(const dscpp_ops* o, const void* dy, void* dbias, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || cols < 0 || bad_ptr(dy, rows * cols) || bad_ptr(dbias, cols)) return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    return status(ops::bias_grad(rd(o, dy), wr(o, dbias), rows, cols, c.column_scratch(rows, cols, 1), c.stream));
  });
}

int gelu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary_op(o, x, y, n, ops::gelu_forward);
}

int relu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary_op(o, x, y, n, ops::relu_forward);
}

int gelu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary_op(o, x, dy, dx, n, ops::gelu_backward);
}

int relu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary_op(o, x, dy, dx, n, ops::relu_backward);
}

int mul(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(a, n) || bad_ptr(b, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::mul(rd(o, a), rd(o, b), wr(o, y), n, ctx(o).stream));
}

int silu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary_op(o, x, y, n, ops::silu_forward);
}

int silu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary_op(o, x, dy, dx, n, ops::silu_backward);
}

int swiglu_forward(const dscpp_ops* o, const void* gate, const void* up, void* y, int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(gate, n) || bad_ptr(up, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::swiglu_forward(rd(o, gate), rd(o, up), wr(o, y), n, ctx(o).stream));
}

int swiglu_backward(const dscpp_ops* o, const void* gate, const void* up, const void* dy, void* dgate, void* dup,
                    int64_t n) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(gate, n) || bad_ptr(up, n) || bad_ptr(dy, n) || bad_ptr(dgate, n) || bad_ptr(dup, n) ||
      (n > 0 && (dy == dgate || dy == dup || dgate == dup)))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::swiglu_backward(rd(o, gate), rd(o, up), rd(o, dy), wr(o, dgate), wr(o, dup), n, ctx(o).stream));
}

int copy_2d(const dscpp_ops* o, const void* src, int64_t src_ld, void* dst, int64_t dst_ld, int64_t rows, int64_t cols,
            int32_t accumulate) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || cols < 0 || src_ld < cols || dst_ld < cols || (accumulate != 0 && accumulate != 1))
    return DSCPP_E_INVALID_ARGUMENT;
  if (rows == 0 || cols == 0) return DSCPP_OK;
  if (src == nullptr || dst == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::copy_2d(rd(o, src), src_ld, wr(o, dst), dst_ld, rows, cols, accumulate != 0, ctx(o).stream));
}

int dropout(const dscpp_ops* o, const void* x, void* y, int64_t n, float p, uint64_t seed) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n) || !kernels::dropout_p_ok(p)) return DSCPP_E_INVALID_ARGUMENT;
  if (p == 0.0f) return copy(o, x, y, n);
  return status(ops::dropout(rd(o, x), wr(o, y), n, hd::dropout_draw(p, seed), ctx(o).stream));
}

// ---- row ops -----------------------------------------------------------------------------------

int layernorm_forward(const dscpp_ops* o, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || (cols == 0 && rows > 0) || bad_ptr(x, n) || bad_ptr(y, n) || bad_ptr(gamma, cols) ||
      bad_ptr(beta, cols) || bad_ptr(mean, rows) || bad_ptr(rstd, rows) || !(eps >= 0.0f))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::layernorm_forward(rd(o, x), rd(o, gamma), rd(o, beta), wr(o, y), mean, rstd, rows, cols, eps,
                                       ctx(o).stream));
}

int layernorm_backward(const dscpp_ops* o, const void* dy, const void* x, const void* gamma, const float* mean,
                       const float* rstd, void* dx, void* dgamma, void* dbeta, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || bad_ptr(dy, n) || bad_ptr(x, n) || bad_ptr(dx, n) || bad_ptr(gamma, cols) ||
      bad_ptr(dgamma, cols) || bad_ptr(dbeta, cols) || bad_ptr(mean, rows) || bad_ptr(rstd, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    return status(ops::layernorm_backward(rd(o, dy), rd(o, x), rd(o, gamma), mean, rstd, wr(o, dx), wr(o, dgamma),
                                          wr(o, dbeta), rows, cols,
                                          c.column_scratch(rows, cols, 2), c.stream));
  });
}

int rmsnorm_forward(const dscpp_ops* o, const void* x, const void* gamma, void* y, float* rstd, int64_t rows,
                    int64_t cols, float eps) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || (cols == 0 && rows > 0) || bad_ptr(x, n) || bad_ptr(y, n) || bad_ptr(gamma, cols) ||
      bad_ptr(rstd, rows) || !(eps >= 0.0f))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::rmsnorm_forward(rd(o, x), rd(o, gamma), wr(o, y), rstd, rows, cols, eps, ctx(o).stream));
}

int rmsnorm_backward(const dscpp_ops* o, const void* dy, const void* x, const void* gamma, const float* rstd, void* dx,
                     void* dgamma, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || bad_ptr(dy, n) || bad_ptr(x, n) || bad_ptr(dx, n) || bad_ptr(gamma, cols) ||
      bad_ptr(dgamma, cols) || bad_ptr(rstd, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    return status(ops::rmsnorm_backward(rd(o, dy), rd(o, x), rd(o, gamma), rstd, wr(o, dx), wr(o, dgamma), rows, cols,
                                        c.column_scratch(rows, cols, 1), c.stream));
  });
}

int softmax_forward(const dscpp_ops* o, const void* x, void* y, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || cols < 0 || bad_ptr(x, rows * cols) || bad_ptr(y, rows * cols)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::softmax_forward(rd(o, x), wr(o, y), rows, cols, 1.0f, false, ctx(o).stream));
}

int softmax_backward(const dscpp_ops* o, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || bad_ptr(y, n) || bad_ptr(dy, n) || bad_ptr(dx, n)) return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::softmax_backward(rd(o, y), rd(o, dy), wr(o, dx), rows, cols, 1.0f, false, ctx(o).stream));
}

int causal_softmax_forward(const dscpp_ops* o, const void* scores, void* probs, int64_t groups, int64_t T,
                           float scale) {
  if (int s = check_ops(o)) return s;
  if (!causal_ok(groups, T) || bad_ptr(scores, groups * T * T) || bad_ptr(probs, groups * T * T))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(ops::softmax_forward(rd(o, scores), wr(o, probs), groups * T, T, scale, true, ctx(o).stream));
}

int causal_softmax_backward(const dscpp_ops* o, const void* probs, const void* dprobs, void* dscores, int64_t groups,
                            int64_t T, float scale) {
  if (int s = check_ops(o)) return s;
  const int64_t n = groups * T * T;
  if (!causal_ok(groups, T) || bad_ptr(probs, n) || bad_ptr(dprobs, n) || bad_ptr(dscores, n))
    return DSCPP_E_INVALID_ARGUMENT;
  return status(
      ops::softmax_backward(rd(o, probs), rd(o, dprobs), wr(o, dscores), groups * T, T, scale, true, ctx(o).stream));
}

int embedding_forward(const dscpp_ops* o, const int32_t* ids, const void* table, void* out, int64_t n, int64_t vocab,
                      int64_t dim) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || vocab < 0 || dim < 0 || bad_ptr(ids, n) || bad_ptr(out, n * dim) ||
      bad_ptr(table, n > 0 ? vocab * dim : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    if (flagged(c, [&](int32_t* f) { return ops::check_ids(ids, n, vocab, f, c.stream); }))
      return int(DSCPP_E_INVALID_ARGUMENT);
    return status(ops::embedding_forward(ids, rd(o, table), wr(o, out), n, dim, c.stream));
  });
}

int embedding_backward(const dscpp_ops* o, const int32_t* ids, const void* dout, void* dtable, int64_t n, int64_t vocab,
                       int64_t dim) {
  if (int s = check_ops(o)) return s;
  if (n < 0 || vocab < 0 || dim < 0 || bad_ptr(ids, n) || bad_ptr(dout, n * dim) ||
      bad_ptr(dtable, n > 0 ? vocab * dim : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  if (!fits_int32(n)) return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    // The ids come to the host (which also checks them), are grouped there, and the groups go
    // back: one wait, at the end of backward where the embedding layer sits.
    std::vector<int32_t> host(static_cast<size_t>(n));
    if (n > 0) {
      DSCPP_CUDA_CHECK(
          cudaMemcpyAsync(host.data(), ids, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, c.stream));
      DSCPP_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    }
    if (!ids_in_range(host.data(), n, vocab)) return int(DSCPP_E_INVALID_ARGUMENT);
    const std::vector<int32_t> segments = ops::embedding_segments(host.data(), n);
    const int64_t count = (int64_t(segments.size()) - n - 1) / 2;
    if (count == 0) return int(DSCPP_OK);
    int32_t* dev = c.scratch.get<int32_t>(segments.size(), c.stream);
    // From pageable memory: the copy has taken `segments` when it returns.
    DSCPP_CUDA_CHECK(
        cudaMemcpyAsync(dev, segments.data(), segments.size() * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream));
    return status(ops::embedding_backward(dev, n, count, rd(o, dout), wr(o, dtable), dim, c.stream));
  });
}

int cross_entropy_forward(const dscpp_ops* o, const void* logits, const int32_t* targets, void* probs, int64_t rows,
                          int64_t cols, double* loss_sum, int64_t* counted, int64_t* correct) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || (cols == 0 && rows > 0) || bad_ptr(logits, n) || bad_ptr(probs, n) ||
      bad_ptr(targets, rows) || !loss_sum || !counted || !correct)
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    if (flagged(c, [&](int32_t* f) { return ops::check_targets(targets, rows, cols, f, c.stream); }))
      return int(DSCPP_E_INVALID_ARGUMENT);
    double* row_loss = c.row_loss.get<double>(size_t(rows), c.stream);
    int32_t* row_hit = c.row_hit.get<int32_t>(size_t(rows), c.stream);
    DSCPP_CUDA_CHECK(
        ops::cross_entropy_forward(rd(o, logits), targets, wr(o, probs), row_loss, row_hit, rows, cols, c.stream));
    // Per-row results summed on the host in row order, as the CPU table does: the fp64 total
    // is the same for any launch shape.
    std::vector<double> loss(static_cast<size_t>(rows));
    std::vector<int32_t> hit(static_cast<size_t>(rows)), tgt(static_cast<size_t>(rows));
    DSCPP_CUDA_CHECK(
        cudaMemcpyAsync(loss.data(), row_loss, loss.size() * sizeof(double), cudaMemcpyDeviceToHost, c.stream));
    DSCPP_CUDA_CHECK(
        cudaMemcpyAsync(hit.data(), row_hit, hit.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, c.stream));
    DSCPP_CUDA_CHECK(
        cudaMemcpyAsync(tgt.data(), targets, tgt.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, c.stream));
    DSCPP_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    double sum = 0;
    int64_t counted_rows = 0, hits = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (tgt[size_t(r)] < 0) continue;
      sum += loss[size_t(r)];
      ++counted_rows;
      hits += hit[size_t(r)];
    }
    *loss_sum = sum, *counted = counted_rows, *correct = hits;
    return int(DSCPP_OK);
  });
}

int cross_entropy_backward(const dscpp_ops* o, const void* probs, const int32_t* targets, void* dlogits, int64_t rows,
                           int64_t cols, float scale) {
  if (int s = check_ops(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || bad_ptr(probs, n) || bad_ptr(dlogits, n) || bad_ptr(targets, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    if (flagged(c, [&](int32_t* f) { return ops::check_targets(targets, rows, cols, f, c.stream); }))
      return int(DSCPP_E_INVALID_ARGUMENT);
    return status(ops::cross_entropy_backward(rd(o, probs), targets, wr(o, dlogits), rows, cols, scale, c.stream));
  });
}

// Positions, when given, are checked on the device first (one wait), as embedding ids are.
int rope(const dscpp_ops* o, void* x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim,
         const int32_t* positions, int64_t pos0, const dscpp_rope* r, bool backward) {
  if (int s = check_ops(o)) return s;
  hd::RopeTable table;
  if (!hd::rope_args(batch, T, width, heads, head_dim, pos0, r, &table)) return DSCPP_E_INVALID_ARGUMENT;
  if (batch * T == 0 || heads == 0) return DSCPP_OK;
  if (x == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  return guarded([&] {
    if (positions != nullptr &&
        flagged(c, [&](int32_t* f) { return ops::check_positions(positions, batch * T, f, c.stream); }))
      return int(DSCPP_E_INVALID_ARGUMENT);
    return status(ops::rope(wr(o, x), batch, T, width, heads, head_dim, positions, pos0, table, backward, c.stream));
  });
}

int rope_forward(const dscpp_ops* o, void* x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim,
                 const int32_t* positions, int64_t pos0, const dscpp_rope* r) {
  return rope(o, x, batch, T, width, heads, head_dim, positions, pos0, r, false);
}

int rope_backward(const dscpp_ops* o, void* dx, int64_t batch, int64_t T, int64_t width, int64_t heads,
                  int64_t head_dim, const int32_t* positions, int64_t pos0, const dscpp_rope* r) {
  return rope(o, dx, batch, T, width, heads, head_dim, positions, pos0, r, true);
}

// Device <-> host, either direction (cudaMemcpyDefault: unified addressing tells them apart).
int to_host(const dscpp_ops* o, const void* src, void* dst, size_t bytes) {
  if (int s = check_ops(o)) return s;
  if (bytes > 0 && (src == nullptr || dst == nullptr)) return DSCPP_E_INVALID_ARGUMENT;
  if (bytes == 0) return DSCPP_OK;
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx(o).stream) != cudaSuccess) return DSCPP_E_INTERNAL;
  return status(cudaStreamSynchronize(ctx(o).stream));
}

int from_host(const dscpp_ops* o, const void* src, void* dst, size_t bytes) {
  return to_host(o, src, dst, bytes);
}

}  // namespace op

// ---- context ---------------------------------------------------------------------------------------

OpsContext::OpsContext(Stream s) : stream(s) {
  DSCPP_CUBLAS_CHECK(cublasCreate(&blas));
  DSCPP_CUBLAS_CHECK(cublasSetStream(blas, stream));
  // Plain fp32 (no TF32 tensor-core rounding), the precision of the CPU table's sgemm.
  DSCPP_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  DSCPP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int32_t)));
  if (const char* a = knob("DSCPP_FLASH_ATTENTION"); a != nullptr) {
    const std::string_view v = a;
    if (v != "tiled" && v != "blockwise")
      throw Error("DSCPP_FLASH_ATTENTION is '" + std::string(v) + "': expected tiled or blockwise");
    tiled_attention = v == "tiled";
  }
}

OpsContext::~OpsContext() {
  cudaFree(flag);
  cublasDestroy(blas);
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ over the same memory: swap
// the operands and M/N, keep the transposes.
int gemm_on(const OpsContext& c, Storage ab, Storage cs, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
            int64_t K, float alpha, const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb,
            float beta, void* C, int64_t ldc, int64_t sc, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return DSCPP_OK;
  const cublasOperation_t opa = ta == DSCPP_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = tb == DSCPP_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool all_f32 = ab == Storage::f32 && cs == Storage::f32;
  cublasStatus_t s;
  if (all_f32 && c.gemm_math != kernels::GemmMath::tf32)
    s = cublasSgemmStridedBatched(c.blas, opb, opa, int(N), int(M), int(K), &alpha, static_cast<const float*>(B),
                                  int(ldb), sb, static_cast<const float*>(A), int(lda), sa, &beta,
                                  static_cast<float*>(C), int(ldc), sc, int(batch));
  else
    s = cublasGemmStridedBatchedEx(c.blas, opb, opa, int(N), int(M), int(K), &alpha, B, data_type(ab), int(ldb), sb, A,
                                   data_type(ab), int(lda), sa, &beta, C, data_type(cs), int(ldc), sc, int(batch),
                                   all_f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? DSCPP_OK : DSCPP_E_INTERNAL;
}

int64_t operand_span(dscpp_transpose t, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  const int64_t stored_rows = t == DSCPP_TRANS ? cols : rows, stored_cols = t == DSCPP_TRANS ? rows : cols;
  if (stored_rows == 0 || stored_cols == 0 || batch == 0) return 0;
  return (batch - 1) * stride + (stored_rows - 1) * ld + stored_cols;
}

Storage OpsContext::operand_storage(Storage s) const {
  if (s != Storage::f32 || !stages_operands(gemm_math)) return s;
  return gemm_math == kernels::GemmMath::bf16 ? Storage::bf16 : Storage::f16;
}

const void* OpsContext::operand(int slot, const void* src, Storage s, int64_t n) {
  if (operand_storage(s) == s) return src;
  auto* dst = staged[slot].get<uint16_t>(size_t(n), stream);
  const Status st = launch_cast_f32_to_16(static_cast<const float*>(src), dst, size_t(n),
                                          gemm_math == kernels::GemmMath::bf16, stream);
  if (st != kOk) fail("casting a GEMM operand to 16 bits failed ({})", int(st));
  return dst;
}

float* OpsContext::column_scratch(int64_t rows, int64_t cols, int outputs) {
  const int64_t n = ops::column_scratch_floats(rows, cols, outputs);
  return n == 0 ? nullptr : scratch.get<float>(size_t(n), stream);
}

dscpp_ops cuda_ops(dscpp_dtype dtype, OpsContext* context) {
  dscpp_ops t{};
  t.struct_size = static_cast<uint32_t>(sizeof(dscpp_ops));
  t.dtype = dtype;
  t.device = context;
  DSCPP_FILL_OPS;
  return t;
}

}  // namespace dscpp::DSCPP_CUDA_NS
