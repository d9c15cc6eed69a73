// The CUDA ops table (kernels/cuda/ops_table.cpp, ops_layers.cpp) built in host-stub mode
// (kernels/cuda/sim: kernels on the host launch layer, runtime and cuBLAS calls through
// cuda_runtime_stub.h), op by op against the CPU table (kernels/cpu/ops), on small odd shapes.
//
// Tolerances, and why:
//  - cuBLAS's column-major GEMM (the stub) is checked against an fp64 reference with the
//    rounding-error bound of a K-term dot product in any summation order, (K + 4)·u·Σ|terms|
//    (u = 2⁻²⁴; the 4 covers alpha, beta and the final add).
//  - The table's GEMMs equal the CPU table's bit for bit: the stub runs the CPU table's GEMM,
//    and the table's row-major→column-major operand swap and the stub's swap back give the
//    very same call, so any difference is a layout mistake.
//  - Elementwise ops evaluate the same shared element functions (kernels/ops_math.h) and are
//    bitwise equal (dropout's mask too: the same integer hash), except where the CPU loops
//    contract a·b + c into one FMA (axpy, GELU): there the error is relative to the terms, not to
//    a result that may cancel to ~0 (which makes ulps of the result meaningless: axpy measured
//    127 ulps, 2u of its terms).
//  - Reductions (layernorm, softmax, biases, cross-entropy, attention, linear layers) add in
//    other orders (a tree of doubles or a GEMM against SIMD lanes and fused kernels): normwise,
//    max|a − b| ≤ tol·max|b|, with tol from sum_tol(K) (cuda_table_check.h).
// The last test case shows that each kind of check fails on a slightly wrong result.
#include "kernels/cuda/ops_table.h"
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#include "tests/unit/cuda_table_check.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

using namespace dscpp;
using ops_check::kNaN;
using ops_check::rnd;
using ops_check::Vec;
using namespace cuda_table_check;

namespace {

// ---- cuBLAS semantics of the stub ----------------------------------------------------------

struct ColGemm {
  cuda::cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  long long sa, sb, sc;
  int batch;
  float alpha, beta;
};

// fp64 column-major reference and the error bound of each element; returns whether every
// element of C is within its bound.
bool within_reference(const ColGemm& g, const Vec& A, const Vec& B, const Vec& C0, const Vec& C, double alpha_ref) {
  bool ok = true;
  for (int b = 0; b < g.batch; ++b)
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        double sum = 0, mag = 0;
        for (int p = 0; p < g.k; ++p) {
          const double a = g.ta == cuda::CUBLAS_OP_N ? A[size_t(b * g.sa + i + p * g.lda)]
                                                     : A[size_t(b * g.sa + p + i * g.lda)];
          const double x = g.tb == cuda::CUBLAS_OP_N ? B[size_t(b * g.sb + p + j * g.ldb)]
                                                     : B[size_t(b * g.sb + j + p * g.ldb)];
          sum += a * x, mag += std::fabs(a * x);
        }
        const size_t c = size_t(b * g.sc + i + j * g.ldc);
        const double beta_c = g.beta == 0.0f ? 0.0 : double(g.beta) * C0[c];
        const double want = alpha_ref * sum + beta_c;
        const double bound = (g.k + 4) * kU * (std::fabs(alpha_ref) * mag + std::fabs(beta_c));
        if (!(std::fabs(C[c] - want) <= bound)) ok = false;
      }
  return ok;
}

// Runs g on fresh inputs (C holds NaN when beta = 0, which must not be read); checks the
// result, and that the elements between the matrices (padding rows, gaps between batches)
// are untouched.
void check_stub_gemm(cuda::cublasHandle_t h, const ColGemm& g, uint32_t seed) {
  const auto cols_a = g.ta == cuda::CUBLAS_OP_N ? g.k : g.m, cols_b = g.tb == cuda::CUBLAS_OP_N ? g.n : g.k;
  const Vec A = rnd(size_t(g.sa * (g.batch - 1) + g.lda * cols_a), seed);
  const Vec B = rnd(size_t(g.sb * (g.batch - 1) + g.ldb * cols_b), seed + 1);
  Vec C0 = rnd(size_t(g.sc * (g.batch - 1) + g.ldc * g.n), seed + 2);
  if (g.beta == 0.0f) std::fill(C0.begin(), C0.end(), kNaN);
  Vec C = C0;
  REQUIRE(cuda::cublasSgemmStridedBatched(h, g.ta, g.tb, g.m, g.n, g.k, &g.alpha, A.data(), g.lda, g.sa, B.data(),
                                          g.ldb, g.sb, &g.beta, C.data(), g.ldc, g.sc, g.batch) ==
          cuda::CUBLAS_STATUS_SUCCESS);
  CHECK(within_reference(g, A, B, C0, C, g.alpha));
  for (size_t e = 0; e < C.size(); ++e) {
    const int64_t in_batch = int64_t(e) % g.sc, row = in_batch % g.ldc, col = in_batch / g.ldc;
    const bool inside = int64_t(e) / g.sc < g.batch && row < g.m && col < g.n;
    if (!inside) REQUIRE(ulp_distance(C[e], C0[e]) == 0);
  }
}

}  // namespace

TEST_CASE("cublasSgemmStridedBatched stub: column-major cuBLAS semantics on every CPU GEMM backend",
          "[cuda_ops_table]") {
  ops_check::Restore restore;
  cuda::cublasHandle_t h = nullptr;
  REQUIRE(cuda::cublasCreate(&h) == cuda::CUBLAS_STATUS_SUCCESS);
  const cuda::cublasOperation_t ops[] = {cuda::CUBLAS_OP_N, cuda::CUBLAS_OP_T};
  const int shapes[][3] = {{7, 13, 29}, {1, 5, 300}, {33, 1, 3}};  // m, n, k
  uint32_t seed = 100;
  for (auto backend : ops_check::backends()) {
    kernels::set_gemm_backend(backend);
    for (auto ta : ops)
      for (auto tb : ops)
        for (const auto& mnk : shapes)
          for (float beta : {0.0f, 1.0f, -0.5f}) {
            ColGemm g{ta, tb, mnk[0], mnk[1], mnk[2], 0, 0, 0, 0, 0, 0, 3, 0.75f, beta};
            // Leading dimensions and strides with slack, so a mix-up reads other numbers.
            g.lda = (ta == cuda::CUBLAS_OP_N ? g.m : g.k) + 3;
            g.ldb = (tb == cuda::CUBLAS_OP_N ? g.k : g.n) + 2;
            g.ldc = g.m + 1;
            g.sa = g.lda * (ta == cuda::CUBLAS_OP_N ? g.k : g.m) + 5;
            g.sb = g.ldb * (tb == cuda::CUBLAS_OP_N ? g.n : g.k) + 1;
            g.sc = g.ldc * g.n + 7;
            CAPTURE(int(backend), int(ta), int(tb), g.m, g.n, g.k, beta);
            check_stub_gemm(h, g, seed += 3);
          }
  }
  // k = 0 (and alpha = 0) leave C = beta·C; beta = 0 writes zeros over NaN.
  Vec C = {kNaN, kNaN, 2.0f, 4.0f};
  const float one = 1.0f, zero = 0.0f, half = 0.5f;
  REQUIRE(cuda::cublasSgemmStridedBatched(h, cuda::CUBLAS_OP_N, cuda::CUBLAS_OP_N, 2, 1, 0, &one, nullptr, 2, 0,
                                          nullptr, 1, 0, &zero, C.data(), 2, 2, 1) == cuda::CUBLAS_STATUS_SUCCESS);
  REQUIRE(cuda::cublasSgemmStridedBatched(h, cuda::CUBLAS_OP_N, cuda::CUBLAS_OP_N, 2, 1, 0, &one, nullptr, 2, 0,
                                          nullptr, 1, 0, &half, C.data() + 2, 2, 2, 1) == cuda::CUBLAS_STATUS_SUCCESS);
  CHECK(bitwise(C, Vec{0.0f, 0.0f, 1.0f, 2.0f}));
  // cuBLAS's argument errors.
  const Vec A(64, 1.0f);
  Vec D(64);
  auto call = [&](cuda::cublasHandle_t hh, int m, int lda, int ldc, const float* alpha) {
    return cuda::cublasSgemmStridedBatched(hh, cuda::CUBLAS_OP_N, cuda::CUBLAS_OP_N, m, 2, 2, alpha, A.data(), lda, 0,
                                           A.data(), 2, 0, &zero, D.data(), ldc, 0, 1);
  };
  CHECK(call(h, 3, 3, 3, &one) == cuda::CUBLAS_STATUS_SUCCESS);
  CHECK(call(nullptr, 3, 3, 3, &one) == cuda::CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(call(h, -1, 3, 3, &one) == cuda::CUBLAS_STATUS_INVALID_VALUE);
  CHECK(call(h, 3, 2, 3, &one) == cuda::CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(call(h, 3, 3, 2, &one) == cuda::CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  CHECK(call(h, 3, 3, 3, nullptr) == cuda::CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cuda::cublasDestroy(h) == cuda::CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("CUDA table (host stub) GEMMs equal the CPU table's bit for bit", "[cuda_ops_table]") {
  Tables t;
  const dscpp_transpose tr[] = {DSCPP_NO_TRANS, DSCPP_TRANS};
  uint32_t seed = 200;
  for (auto ta : tr)
    for (auto tb : tr)
      for (float beta : {0.0f, 1.0f}) {
        const int64_t M = 7, N = 13, K = 29, batch = 3;
        const int64_t lda = (ta == DSCPP_NO_TRANS ? K : M) + 2, ldb = (tb == DSCPP_NO_TRANS ? N : K) + 1, ldc = N + 3;
        const int64_t sa = lda * (ta == DSCPP_NO_TRANS ? M : K) + 1, sb = ldb * (tb == DSCPP_NO_TRANS ? K : N) + 4,
                      sc = ldc * M + 2;
        CAPTURE(int(ta), int(tb), beta);
        const Vec A = rnd(size_t(sa * batch), seed++), B = rnd(size_t(sb * batch), seed++);
        Vec Cg = rnd(size_t(sc * batch), seed++);
        if (beta == 0.0f) std::fill(Cg.begin(), Cg.end(), kNaN);  // must not be read
        Vec Cc = Cg;
        REQUIRE(t.gpu.gemm(t.G(), ta, tb, M, N, K, 1.5f, A.data(), lda, B.data(), ldb, beta, Cg.data(), ldc) ==
                DSCPP_OK);
        REQUIRE(t.C()->gemm(t.C(), ta, tb, M, N, K, 1.5f, A.data(), lda, B.data(), ldb, beta, Cc.data(), ldc) ==
                DSCPP_OK);
        CHECK(bitwise(Cg, Cc));
        REQUIRE(t.gpu.gemm_strided_batched(t.G(), ta, tb, M, N, K, -0.5f, A.data(), lda, sa, B.data(), ldb, sb, beta,
                                           Cg.data(), ldc, sc, batch) == DSCPP_OK);
        REQUIRE(t.C()->gemm_strided_batched(t.C(), ta, tb, M, N, K, -0.5f, A.data(), lda, sa, B.data(), ldb, sb, beta,
                                            Cc.data(), ldc, sc, batch) == DSCPP_OK);
        CHECK(bitwise(Cg, Cc));
        for (int64_t b = 0; b < batch; ++b)  // beta = 0 wrote over every NaN of the matrices
          for (int64_t i = 0; i < M * ldc; ++i)
            if (i % ldc < N) REQUIRE(std::isfinite(Cg[size_t(b * sc + i)]));
      }
  // Shapes past the 32-bit range are refused before cuBLAS sees them; empty ones do nothing.
  float c = 3.0f;
  CHECK(t.gpu.gemm(t.G(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, int64_t{1} << 31, 1, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1) ==
        DSCPP_E_INVALID_ARGUMENT);
  CHECK(t.gpu.gemm(t.G(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, 0, 1, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1) == DSCPP_OK);
  CHECK(c == 3.0f);
}

// ---- elementwise and row ops -------------------------------------------------------------------

TEST_CASE("CUDA table (host stub) elementwise ops equal the CPU table's", "[cuda_ops_table]") {
  Tables t;
  const dscpp_ops &g = t.gpu, &c = *t.C();
  for (int64_t n : {1, 7, 1029}) {
    CAPTURE(n);
    const Vec a = rnd(size_t(n), 1, -6.0f, 6.0f), b = rnd(size_t(n), 2, -2.0f, 2.0f);
    Vec x(a.size()), y(a.size()), x2(a.size()), y2(a.size());
    REQUIRE(g.fill(&g, x.data(), -0.3f, n) == DSCPP_OK);
    REQUIRE(c.fill(&c, y.data(), -0.3f, n) == DSCPP_OK);
    CHECK(bitwise(x, y));
    REQUIRE(g.copy(&g, a.data(), x.data(), n) == DSCPP_OK);
    CHECK(bitwise(x, a));
    REQUIRE(g.add(&g, a.data(), b.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.add(&c, a.data(), b.data(), y.data(), n) == DSCPP_OK);
    CHECK(bitwise(x, y));
    Vec terms = y;  // |0.3·a| + |y|: what a·x + y rounds against
    for (size_t i = 0; i < terms.size(); ++i) terms[i] = std::fabs(0.3f * a[i]) + std::fabs(y[i]);
    REQUIRE(g.axpy(&g, 0.3f, a.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.axpy(&c, 0.3f, a.data(), y.data(), n) == DSCPP_OK);
    // The CPU's FMA skips the product's rounding; where the sum cancels that is many ulps of
    // the result, but never more than a rounding or two of the terms.
    CHECK_RELATIVE_TO(x, y, terms, 2 * kU);
    x = y;
    REQUIRE(g.scale(&g, -1.7f, x.data(), n) == DSCPP_OK);
    REQUIRE(c.scale(&c, -1.7f, y.data(), n) == DSCPP_OK);
    CHECK(bitwise(x, y));
    REQUIRE(g.gelu_forward(&g, a.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.gelu_forward(&c, a.data(), y.data(), n) == DSCPP_OK);
    // gelu(x) = x·Φ̃(x); Φ̃ → 0 for x ≪ 0 by cancellation (1 + tanh), so the error is
    // relative to x, not to the result. gelu' ∈ [−0.13, 1.13]: relative to dy.
    CHECK_RELATIVE_TO(x, y, abs_of(a), 4 * kU);
    REQUIRE(g.gelu_backward(&g, a.data(), b.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.gelu_backward(&c, a.data(), b.data(), y.data(), n) == DSCPP_OK);
    // gelu' = s + 2x·s(1 − s)·du with s the logistic of a cubic: its argument's rounding is
    // amplified by up to |2u(x)| (≈ 10 at |x| = 3) before s(1 − s) damps it. Measured: 12u.
    CHECK_RELATIVE_TO(x, y, abs_of(b), 16 * kU);
    REQUIRE(g.relu_forward(&g, a.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.relu_forward(&c, a.data(), y.data(), n) == DSCPP_OK);
    CHECK(bitwise(x, y));
    REQUIRE(g.relu_backward(&g, a.data(), b.data(), x.data(), n) == DSCPP_OK);
    REQUIRE(c.relu_backward(&c, a.data(), b.data(), y.data(), n) == DSCPP_OK);
    CHECK(bitwise(x, y));
    // Dropout: one mask on every table (the shared hash of (seed, index)), the documented one.
    REQUIRE(g.dropout(&g, a.data(), x.data(), n, 0.3f, 99) == DSCPP_OK);
    REQUIRE(c.dropout(&c, a.data(), y.data(), n, 0.3f, 99) == DSCPP_OK);
    CHECK(bitwise(x, y));
    CHECK(bitwise(x, ops_check::dropout_ref(a, 0.3f, 99)));
    x = a;
    REQUIRE(g.dropout(&g, x.data(), x.data(), n, 0.3f, 99) == DSCPP_OK);  // in place
    CHECK(bitwise(x, y));
    REQUIRE(g.dropout(&g, a.data(), x.data(), n, 0.0f, 99) == DSCPP_OK);  // p = 0 copies
    CHECK(bitwise(x, a));
    CHECK(g.dropout(&g, a.data(), x.data(), n, 1.0f, 99) == DSCPP_E_INVALID_ARGUMENT);
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{9, 1}, {9, 5}, {9, 300}, {200, 5}, {200, 300}}) {
    CAPTURE(rows, cols);  // 200 rows: chunked sums through the table's scratch
    const Vec dy = rnd(size_t(rows * cols), 3, -2.0f, 2.0f), bias = rnd(size_t(cols), 4);
    Vec x = dy, y = dy, dbx = rnd(size_t(cols), 5), dby = dbx;
    REQUIRE(g.bias_add(&g, x.data(), bias.data(), rows, cols) == DSCPP_OK);
    REQUIRE(c.bias_add(&c, y.data(), bias.data(), rows, cols) == DSCPP_OK);
    CHECK(bitwise(x, y));
    REQUIRE(g.bias_grad(&g, dy.data(), dbx.data(), rows, cols) == DSCPP_OK);
    REQUIRE(c.bias_grad(&c, dy.data(), dby.data(), rows, cols) == DSCPP_OK);
    CHECK_NORMWISE(dbx, dby, sum_tol(rows));
  }
}

TEST_CASE("CUDA table (host stub) layernorm and softmaxes match the CPU table", "[cuda_ops_table]") {
  Tables t;
  const dscpp_ops &g = t.gpu, &c = *t.C();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 1}, {6, 5}, {6, 300}, {200, 5}}) {
    CAPTURE(rows, cols);
    const int64_t n = rows * cols;
    const Vec x = rnd(size_t(n), 6, -5.0f, 5.0f), dy = rnd(size_t(n), 7, -2.0f, 2.0f);
    const Vec gamma = rnd(size_t(cols), 8, -2.0f, 2.0f), beta = rnd(size_t(cols), 9);
    Vec ya(x.size()), yb(x.size()), ma(static_cast<size_t>(rows)), mb(ma.size()), ra(ma.size()), rb(ma.size());
    REQUIRE(g.layernorm_forward(&g, x.data(), gamma.data(), beta.data(), ya.data(), ma.data(), ra.data(), rows, cols,
                                1e-5f) == DSCPP_OK);
    REQUIRE(c.layernorm_forward(&c, x.data(), gamma.data(), beta.data(), yb.data(), mb.data(), rb.data(), rows, cols,
                                1e-5f) == DSCPP_OK);
    CHECK_NORMWISE(ma, mb, sum_tol(cols));
    CHECK_NORMWISE(ra, rb, sum_tol(cols));
    CHECK_NORMWISE(ya, yb, sum_tol(cols));
    Vec dxa(x.size()), dxb(x.size()), dga = rnd(size_t(cols), 10), dgb = dga, dba = rnd(size_t(cols), 11), dbb = dba;
    REQUIRE(g.layernorm_backward(&g, dy.data(), x.data(), gamma.data(), mb.data(), rb.data(), dxa.data(), dga.data(),
                                 dba.data(), rows, cols) == DSCPP_OK);
    REQUIRE(c.layernorm_backward(&c, dy.data(), x.data(), gamma.data(), mb.data(), rb.data(), dxb.data(), dgb.data(),
                                 dbb.data(), rows, cols) == DSCPP_OK);
    // dx = rstd·(γ·dy − mean(γ·dy) − x̂·mean(γ·dy·x̂)) cancels to 0 for one column.
    double dx_terms = 0;
    for (int64_t i = 0; i < n; ++i)
      dx_terms = std::max(dx_terms, std::fabs(double(rb[size_t(i / cols)] * gamma[size_t(i % cols)] * dy[size_t(i)])));
    CHECK_NORMWISE(dxa, dxb, sum_tol(cols), dx_terms);
    CHECK_NORMWISE(dga, dgb, sum_tol(rows));
    CHECK_NORMWISE(dba, dbb, sum_tol(rows));

    REQUIRE(g.softmax_forward(&g, x.data(), ya.data(), rows, cols) == DSCPP_OK);
    REQUIRE(c.softmax_forward(&c, x.data(), yb.data(), rows, cols) == DSCPP_OK);
    CHECK_NORMWISE(ya, yb, sum_tol(cols));
    REQUIRE(g.softmax_backward(&g, yb.data(), dy.data(), dxa.data(), rows, cols) == DSCPP_OK);
    REQUIRE(c.softmax_backward(&c, yb.data(), dy.data(), dxb.data(), rows, cols) == DSCPP_OK);
    CHECK_NORMWISE(dxa, dxb, sum_tol(cols));
  }
  for (int64_t T : {1, 7, 40}) {
    CAPTURE(T);
    const int64_t groups = 3, n = groups * T * T;
    const Vec s = rnd(size_t(n), 12, -4.0f, 4.0f), dp = rnd(size_t(n), 13, -2.0f, 2.0f);
    Vec pa(s.size()), pb(s.size()), da(s.size()), db(s.size());
    REQUIRE(g.causal_softmax_forward(&g, s.data(), pa.data(), groups, T, 0.37f) == DSCPP_OK);
    REQUIRE(c.causal_softmax_forward(&c, s.data(), pb.data(), groups, T, 0.37f) == DSCPP_OK);
    CHECK_NORMWISE(pa, pb, sum_tol(T));
    for (int64_t r = 0; r < groups * T; ++r)
      for (int64_t col = r % T + 1; col < T; ++col) REQUIRE(ulp_distance(pa[size_t(r * T + col)], 0.0f) == 0);
    REQUIRE(g.causal_softmax_backward(&g, pb.data(), dp.data(), da.data(), groups, T, 0.37f) == DSCPP_OK);
    REQUIRE(c.causal_softmax_backward(&c, pb.data(), dp.data(), db.data(), groups, T, 0.37f) == DSCPP_OK);
    CHECK_NORMWISE(da, db, sum_tol(T));
  }
}

TEST_CASE("CUDA table (host stub) embedding, cross-entropy and copies match the CPU table, bad ids included",
          "[cuda_ops_table]") {
  Tables t;
  const dscpp_ops &g = t.gpu, &c = *t.C();
  for (int64_t dim : {1, 5, 300}) {
    CAPTURE(dim);
    const int64_t vocab = 11, n = 9;
    const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 0, 1, 10};
    const Vec table = rnd(size_t(vocab * dim), 14), dout = rnd(size_t(n * dim), 15);
    Vec oa(size_t(n * dim)), ob(oa.size());
    REQUIRE(g.embedding_forward(&g, ids.data(), table.data(), oa.data(), n, vocab, dim) == DSCPP_OK);
    REQUIRE(c.embedding_forward(&c, ids.data(), table.data(), ob.data(), n, vocab, dim) == DSCPP_OK);
    CHECK(bitwise(oa, ob));
    Vec ta = table, tb = table;
    REQUIRE(g.embedding_backward(&g, ids.data(), dout.data(), ta.data(), n, vocab, dim) == DSCPP_OK);
    REQUIRE(c.embedding_backward(&c, ids.data(), dout.data(), tb.data(), n, vocab, dim) == DSCPP_OK);
    CHECK(bitwise(ta, tb));  // repeated ids add in id order on both
    for (int32_t bad : {-1, int32_t(vocab)}) {
      std::vector<int32_t> wrong = ids;
      wrong[5] = bad;
      const Vec before = oa;
      CHECK(g.embedding_forward(&g, wrong.data(), table.data(), oa.data(), n, vocab, dim) == DSCPP_E_INVALID_ARGUMENT);
      CHECK(c.embedding_forward(&c, wrong.data(), table.data(), ob.data(), n, vocab, dim) == DSCPP_E_INVALID_ARGUMENT);
      CHECK(bitwise(oa, before));  // refused before anything is written
      CHECK(g.embedding_backward(&g, wrong.data(), dout.data(), ta.data(), n, vocab, dim) == DSCPP_E_INVALID_ARGUMENT);
      CHECK(c.embedding_backward(&c, wrong.data(), dout.data(), tb.data(), n, vocab, dim) == DSCPP_E_INVALID_ARGUMENT);
      CHECK(bitwise(ta, tb));
    }

    const int64_t rows = n, cols = dim;
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = r == 2 ? -1 : int32_t((r * 7) % cols);
    const Vec logits = rnd(size_t(rows * cols), 16, -4.0f, 4.0f);
    Vec pa(logits.size()), pb(logits.size());
    double la = 0, lb = 0;
    int64_t ca = 0, cb = 0, ha = 0, hb = 0;
    REQUIRE(g.cross_entropy_forward(&g, logits.data(), targets.data(), pa.data(), rows, cols, &la, &ca, &ha) ==
            DSCPP_OK);
    REQUIRE(c.cross_entropy_forward(&c, logits.data(), targets.data(), pb.data(), rows, cols, &lb, &cb, &hb) ==
            DSCPP_OK);
    CHECK_NORMWISE(pa, pb, sum_tol(cols));
    CHECK(std::fabs(la - lb) <= sum_tol(cols) * std::max(1.0, std::fabs(lb)));
    CHECK(ca == rows - 1);
    CHECK(cb == ca);
    CHECK(ha == hb);
    Vec da(pb.size()), db(pb.size());
    REQUIRE(g.cross_entropy_backward(&g, pb.data(), targets.data(), da.data(), rows, cols, 0.25f) == DSCPP_OK);
    REQUIRE(c.cross_entropy_backward(&c, pb.data(), targets.data(), db.data(), rows, cols, 0.25f) == DSCPP_OK);
    CHECK(bitwise(da, db));
    // A target ≥ cols is an error (< 0 means "ignore"): the same code from both tables.
    targets[4] = int32_t(cols);
    CHECK(g.cross_entropy_forward(&g, logits.data(), targets.data(), pa.data(), rows, cols, &la, &ca, &ha) ==
          DSCPP_E_INVALID_ARGUMENT);
    CHECK(c.cross_entropy_forward(&c, logits.data(), targets.data(), pb.data(), rows, cols, &lb, &cb, &hb) ==
          DSCPP_E_INVALID_ARGUMENT);
    CHECK(g.cross_entropy_backward(&g, pb.data(), targets.data(), da.data(), rows, cols, 1.0f) ==
          DSCPP_E_INVALID_ARGUMENT);
    CHECK(c.cross_entropy_backward(&c, pb.data(), targets.data(), db.data(), rows, cols, 1.0f) ==
          DSCPP_E_INVALID_ARGUMENT);
  }
  const Vec src = rnd(37, 17);
  Vec dst(src.size());
  REQUIRE(g.to_host(&g, src.data(), dst.data(), src.size() * sizeof(float)) == DSCPP_OK);
  CHECK(bitwise(dst, src));
  std::fill(dst.begin(), dst.end(), 0.0f);
  REQUIRE(g.from_host(&g, src.data(), dst.data(), src.size() * sizeof(float)) == DSCPP_OK);
  CHECK(bitwise(dst, src));
  CHECK(g.to_host(&g, nullptr, dst.data(), 4) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(g.from_host(&g, src.data(), dst.data(), 0) == DSCPP_OK);
}

// ---- attention and linear layers ---------------------------------------------------------------

namespace {

struct Attention {
  int64_t batch, T, heads, head_dim;
  float scale;
  Vec probs, out, dqkv;
};
// Forward and backward of one table on the given qkv and dout.
Attention run_attention(const dscpp_ops& o, int64_t batch, int64_t T, int64_t heads, int64_t head_dim, float scale,
                        const Vec& qkv, const Vec& dout) {
  Attention a{batch, T, heads, head_dim, scale, Vec(size_t(batch * heads * T * T), kNaN),
              Vec(size_t(batch * T * heads * head_dim), kNaN), Vec(qkv.size(), kNaN)};
  Vec ws(a.probs.size(), kNaN);  // scratch: must be written before it is read
  REQUIRE(o.causal_attention_forward(&o, qkv.data(), a.probs.data(), a.out.data(), batch, T, heads, head_dim, scale) ==
          DSCPP_OK);
  REQUIRE(o.causal_attention_backward(&o, qkv.data(), a.probs.data(), dout.data(), a.dqkv.data(), ws.data(), batch, T,
                                      heads, head_dim, scale) == DSCPP_OK);
  return a;
}

}  // namespace

// The CPU table fuses attention and skips the masked half; the CUDA one runs full batched GEMMs
// around the causal softmax. The longest sums have T or head_dim terms.
TEST_CASE("CUDA table (host stub) causal attention matches the CPU table's fused kernel", "[cuda_ops_table]") {
  Tables t;
  for (int64_t T : {1, 6, 17})
    for (int64_t head_dim : {4, 7}) {
      const int64_t batch = 2, heads = 3, C = heads * head_dim;
      const float scale = 1.0f / std::sqrt(float(head_dim));
      CAPTURE(T, head_dim);
      const Vec qkv = rnd(size_t(batch * T * 3 * C), 20, -2.0f, 2.0f), dout = rnd(size_t(batch * T * C), 21);
      const Attention a = run_attention(t.gpu, batch, T, heads, head_dim, scale, qkv, dout);
      const Attention b = run_attention(*t.C(), batch, T, heads, head_dim, scale, qkv, dout);
      const double tol = sum_tol(std::max(T, head_dim));
      CHECK_NORMWISE(a.probs, b.probs, tol);
      CHECK_NORMWISE(a.out, b.out, tol);
      CHECK_NORMWISE(a.dqkv, b.dqkv, 2 * tol);  // two sums in a row: dprobs, then the GEMMs over it
    }
}

namespace {

struct Linear {
  Vec y, gelu_out, dW, dbias, dx;
};
// Forward, then backward through the GELU when the forward had one.
Linear run_linear(const dscpp_ops& o, int64_t rows, int64_t in, int64_t out, bool bias, int residual, bool gelu,
                  bool want_dbias, bool want_dx) {
  const Vec x = rnd(size_t(rows * in), 30), W = rnd(size_t(out * in), 31), b = rnd(size_t(out), 32);
  const Vec res = rnd(size_t(rows * out), 33), dy = rnd(size_t(rows * out), 34), pre = rnd(x.size(), 37);
  Linear l{residual == 2 ? res : Vec(size_t(rows * out), kNaN), Vec(size_t(rows * out), kNaN), rnd(W.size(), 35),
           rnd(size_t(out), 36), Vec(x.size(), kNaN)};
  const float* r = residual == 1 ? res.data() : residual == 2 ? l.y.data() : nullptr;  // 2: residual is y itself
  REQUIRE(o.linear_forward(&o, x.data(), W.data(), bias ? b.data() : nullptr, r, l.y.data(),
                           gelu ? l.gelu_out.data() : nullptr, rows, in, out) == DSCPP_OK);
  // With `gelu`, also as the layer above a GELU (its input x was gelu(pre)): the op's
  // arithmetic does not depend on x being gelu(pre), so both stay independent inputs.
  REQUIRE(o.linear_backward(&o, dy.data(), x.data(), W.data(), l.dW.data(), want_dbias ? l.dbias.data() : nullptr,
                            want_dx ? l.dx.data() : nullptr, gelu ? pre.data() : nullptr, rows, in, out) == DSCPP_OK);
  return l;
}

}  // namespace

// The CPU table adds bias and residual inside its GEMM's epilogue, the CUDA one after it: the
// sums agree to a few roundings of the K = in (or rows) term dot products.
TEST_CASE("CUDA table (host stub) linear layers match the CPU table's fused epilogues", "[cuda_ops_table]") {
  Tables t;
  const int64_t rows = 5, in = 29, out = 13;
  for (bool bias : {false, true})
    for (int residual : {0, 1, 2})
      for (bool gelu : {false, true})
        for (bool want_dbias : {false, true})
          for (bool want_dx : {false, true}) {
            CAPTURE(bias, residual, gelu, want_dbias, want_dx);
            const Linear a = run_linear(t.gpu, rows, in, out, bias, residual, gelu, want_dbias, want_dx);
            const Linear b = run_linear(*t.C(), rows, in, out, bias, residual, gelu, want_dbias, want_dx);
            CHECK_NORMWISE(a.y, b.y, sum_tol(in));
            if (gelu) CHECK_NORMWISE(a.gelu_out, b.gelu_out, sum_tol(in));
            CHECK_NORMWISE(a.dW, b.dW, sum_tol(rows));
            CHECK_NORMWISE(a.dbias, b.dbias, sum_tol(rows));
            if (want_dx) CHECK_NORMWISE(a.dx, b.dx, sum_tol(out));
            else CHECK(std::isnan(a.dx[0]));  // NULL dx: nothing written
          }
}

TEST_CASE("CUDA table (host stub) for a dtype that is not floating answers UNSUPPORTED", "[cuda_ops_table]") {
  cuda::OpsContext ctx(nullptr);
  const dscpp_ops o = cuda::cuda_ops(DSCPP_I32, &ctx);
  float x = 1.0f;
  CHECK(o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, 1, 1, 1, 1.0f, &x, 1, &x, 1, 0.0f, &x, 1) == DSCPP_E_UNSUPPORTED);
  CHECK(o.fill(&o, &x, 0.0f, 1) == DSCPP_E_UNSUPPORTED);
  CHECK(o.causal_attention_forward(&o, &x, &x, &x, 1, 1, 1, 1, 1.0f) == DSCPP_E_UNSUPPORTED);
  CHECK(o.linear_forward(&o, &x, &x, nullptr, nullptr, &x, nullptr, 1, 1, 1) == DSCPP_E_UNSUPPORTED);
  CHECK(x == 1.0f);
}

// Each kind of comparison above must reject a slightly wrong result, or it proves nothing.
TEST_CASE("The comparisons of this file catch slightly wrong results", "[cuda_ops_table]") {
  Tables t;
  // The stub GEMM's bound against a reference whose alpha is off by 1e-4.
  cuda::cublasHandle_t h = t.ctx.blas;
  ColGemm gm{cuda::CUBLAS_OP_T, cuda::CUBLAS_OP_N, 7, 13, 29, 29, 29, 7, 0, 0, 0, 1, 1.0f, 0.0f};
  const Vec A = rnd(29 * 7, 40), B = rnd(29 * 13, 41), C0(7 * 13, 0.0f);
  Vec C = C0;
  REQUIRE(cuda::cublasSgemmStridedBatched(h, gm.ta, gm.tb, gm.m, gm.n, gm.k, &gm.alpha, A.data(), gm.lda, 0,
                                          B.data(), gm.ldb, 0, &gm.beta, C.data(), gm.ldc, 0, 1) ==
          cuda::CUBLAS_STATUS_SUCCESS);
  CHECK(within_reference(gm, A, B, C0, C, 1.0));
  CHECK_FALSE(within_reference(gm, A, B, C0, C, 1.0 + 1e-4));
  // Relative to the terms, axpy: alpha off by 1e-5.
  const Vec x = rnd(1029, 42, -6.0f, 6.0f);
  Vec ya(x.size(), 1.0f), yb = ya;
  REQUIRE(t.gpu.axpy(t.G(), 0.3f * (1 + 1e-5f), x.data(), ya.data(), 1029) == DSCPP_OK);
  REQUIRE(t.C()->axpy(t.C(), 0.3f, x.data(), yb.data(), 1029) == DSCPP_OK);
  Vec terms(x.size());
  for (size_t i = 0; i < x.size(); ++i) terms[i] = std::fabs(0.3f * x[i]) + 1.0f;
  CHECK(relative_to(ya, yb, terms) > 2 * kU);
  // Normwise, attention: a softmax scale off by 1e-3.
  const int64_t T = 17, heads = 3, head_dim = 7, C3 = 3 * heads * head_dim;
  const Vec qkv = rnd(size_t(2 * T * C3), 20, -2.0f, 2.0f), dout = rnd(size_t(2 * T * heads * head_dim), 21);
  const Attention a = run_attention(t.gpu, 2, T, heads, head_dim, 0.378f, qkv, dout);
  const Attention b = run_attention(*t.C(), 2, T, heads, head_dim, 0.378f * 1.001f, qkv, dout);
  CHECK(normwise(a.probs, b.probs) > sum_tol(T));
  CHECK(normwise(a.out, b.out) > sum_tol(T));
  // Normwise, layernorm: one input element of 300 off by 1e-3.
  const int64_t cols = 300;
  Vec xl = rnd(size_t(2 * cols), 6, -5.0f, 5.0f), xw = xl;
  xw[17] *= 1.001f;
  const Vec gamma(size_t(cols), 1.0f), beta(size_t(cols), 0.0f);
  Vec la(xl.size()), lb(xl.size()), m(4), r(4);
  REQUIRE(t.gpu.layernorm_forward(t.G(), xw.data(), gamma.data(), beta.data(), la.data(), m.data(), r.data(), 2, cols,
                                  1e-5f) == DSCPP_OK);
  REQUIRE(t.C()->layernorm_forward(t.C(), xl.data(), gamma.data(), beta.data(), lb.data(), m.data() + 2, r.data() + 2,
                                   2, cols, 1e-5f) == DSCPP_OK);
  CHECK(normwise(la, lb) > sum_tol(cols));
}
