// The CPU ops table (kernels/cpu/ops) against independent references: every forward against a
// naive fp64 implementation written here, every backward against central finite differences
// of a scalar L = Σ w·y (w fixed and random) taken through that fp64 reference.
//
// Finite differences: step h = 1e-3 on O(1) inputs. The truncation error is h²/6·|L'''| ≈ 2e-7
// relative and the fp64 rounding error eps·|L|/h ≈ 1e-13, both far below the fp32 error of the
// op under test (~1e-6 of the magnitudes it sums), so the FD value stands in for the exact
// gradient and tolerances are set by fp32 alone: 1e-4 of the array's largest magnitude (a
// reduction's rounding error scales with what it sums, not with its possibly cancelled
// result) plus 1e-4 relative.
//
// Sizes 1, 7, 17, 33, 1000 put every op through scalar-only rows, AVX2/AVX-512 tails and full
// vectors; the larger cases also cross the thread pool's grain so chunks run in parallel.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace {

using namespace ops_check;

const int64_t kCols[] = {1, 7, 17, 33, 1000};

// ---- fp64 references -------------------------------------------------------------------------

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Row softmax of a·x over the first n entries of each row of width `cols` (rest 0).
DVec softmax_ref(const DVec& x, int64_t rows, int64_t cols, double a = 1.0, int64_t causal_T = 0) {
  DVec y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = causal_T ? r % causal_T + 1 : cols;
    const double* xr = &x[r * cols];
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < n; ++c) m = std::max(m, a * xr[c]);
    for (int64_t c = 0; c < n; ++c) s += std::exp(a * xr[c] - m);
    for (int64_t c = 0; c < n; ++c) y[r * cols + c] = std::exp(a * xr[c] - m) / s;
  }
  return y;
}

struct LnRef {
  DVec y, mean, rstd;
};
LnRef layernorm_ref(const DVec& x, const DVec& g, const DVec& b, int64_t rows, int64_t cols, double eps) {
  LnRef o{DVec(x.size()), DVec(rows), DVec(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
    m /= cols;
    for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    const double rs = 1 / std::sqrt(v / cols + eps);
    for (int64_t c = 0; c < cols; ++c) o.y[r * cols + c] = (x[r * cols + c] - m) * rs * g[c] + b[c];
    o.mean[r] = m;
    o.rstd[r] = rs;
  }
  return o;
}

// Σ over counted rows of −log softmax(x)[t].
double ce_ref(const DVec& x, const std::vector<int32_t>& t, int64_t rows, int64_t cols) {
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] < 0) continue;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    loss += std::log(s) - (x[r * cols + t[r]] - m);
  }
  return loss;
}

}  // namespace

TEST_CASE("ops table: every entry set; other dtypes answer UNSUPPORTED", "[ops]") {
  int device_tag = 0;
  dscpp_ops t = cpu_ops(DSCPP_F32, &device_tag);
  CHECK(t.struct_size == sizeof(dscpp_ops));
  CHECK(t.dtype == DSCPP_F32);
  CHECK(t.device == &device_tag);
  // Every function pointer between `device` and the end of the struct.
  const auto* first = reinterpret_cast<const unsigned char*>(&t.gemm);
  for (size_t off = 0; off + sizeof(void*) <= sizeof(dscpp_ops) - offsetof(dscpp_ops, gemm); off += sizeof(void*)) {
    void* p;
    std::memcpy(&p, first + off, sizeof p);
    CHECK(p != nullptr);
  }

  for (dscpp_dtype dt : {DSCPP_F16, DSCPP_BF16, DSCPP_I32}) {
    const dscpp_ops u = cpu_ops(dt);
    const dscpp_ops* o = &u;
    CHECK(u.dtype == dt);
    Vec a(16, 1.0f), b(16, 1.0f), c(16, 1.0f);
    float m[4], r[4];
    double ls;
    int64_t n1, n2;
    int32_t ids[2] = {0, 1};
    const int U = DSCPP_E_UNSUPPORTED;
    CHECK(u.gemm(o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2, 2, 2, 1, a.data(), 2, b.data(), 2, 0, c.data(), 2) == U);
    CHECK(u.gemm_strided_batched(o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2, 2, 2, 1, a.data(), 2, 4, b.data(), 2, 4, 0,
                                 c.data(), 2, 4, 2) == U);
    CHECK(u.fill(o, a.data(), 0, 4) == U);
    CHECK(u.copy(o, a.data(), b.data(), 4) == U);
    CHECK(u.add(o, a.data(), b.data(), c.data(), 4) == U);
    CHECK(u.axpy(o, 1, a.data(), b.data(), 4) == U);
    CHECK(u.scale(o, 2, a.data(), 4) == U);
    CHECK(u.bias_add(o, a.data(), b.data(), 2, 2) == U);
    CHECK(u.bias_grad(o, a.data(), b.data(), 2, 2) == U);
    CHECK(u.gelu_forward(o, a.data(), b.data(), 4) == U);
    CHECK(u.gelu_backward(o, a.data(), b.data(), c.data(), 4) == U);
    CHECK(u.relu_forward(o, a.data(), b.data(), 4) == U);
    CHECK(u.relu_backward(o, a.data(), b.data(), c.data(), 4) == U);
    CHECK(u.layernorm_forward(o, a.data(), b.data(), b.data(), c.data(), m, r, 2, 2, 1e-5f) == U);
    CHECK(u.layernorm_backward(o, a.data(), a.data(), b.data(), m, r, c.data(), b.data(), b.data(), 2, 2) == U);
    CHECK(u.softmax_forward(o, a.data(), b.data(), 2, 2) == U);
    CHECK(u.softmax_backward(o, a.data(), b.data(), c.data(), 2, 2) == U);
    CHECK(u.causal_softmax_forward(o, a.data(), b.data(), 1, 2, 1) == U);
    CHECK(u.causal_softmax_backward(o, a.data(), b.data(), c.data(), 1, 2, 1) == U);
    CHECK(u.embedding_forward(o, ids, a.data(), b.data(), 2, 2, 2) == U);
    CHECK(u.embedding_backward(o, ids, a.data(), b.data(), 2, 2, 2) == U);
    CHECK(u.cross_entropy_forward(o, a.data(), ids, b.data(), 2, 2, &ls, &n1, &n2) == U);
    CHECK(u.cross_entropy_backward(o, a.data(), ids, b.data(), 2, 2, 1) == U);
    CHECK(u.to_host(o, a.data(), b.data(), 8) == U);
    CHECK(u.from_host(o, a.data(), b.data(), 8) == U);
    CHECK(u.causal_attention_forward(o, a.data(), b.data(), c.data(), 1, 2, 1, 1, 1) == U);
    CHECK(u.causal_attention_backward(o, a.data(), b.data(), c.data(), a.data(), b.data(), 1, 2, 1, 1, 1) == U);
    CHECK(u.linear_forward(o, a.data(), b.data(), nullptr, nullptr, c.data(), nullptr, 2, 2, 2) == U);
    CHECK(u.linear_backward(o, a.data(), a.data(), b.data(), c.data(), nullptr, nullptr, nullptr, 2, 2, 2) == U);
    CHECK(u.flash_attention_forward(o, a.data(), m, c.data(), 1, 2, 1, 1, 1) == U);
    CHECK(u.flash_attention_backward(o, a.data(), b.data(), m, a.data(), b.data(), r, 1, 2, 1, 1, 1) == U);
    CHECK(u.dropout(o, a.data(), b.data(), 4, 0.5f, 1) == U);
  }
}

TEST_CASE("ops: cheap argument checks", "[ops]") {
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  CHECK(ops().fill(O(), a.data(), 0, -1) == E);
  CHECK(ops().fill(O(), nullptr, 0, 4) == E);
  CHECK(ops().fill(O(), nullptr, 0, 0) == DSCPP_OK);
  CHECK(ops().add(O(), a.data(), nullptr, c.data(), 4) == E);
  CHECK(ops().gelu_forward(nullptr, a.data(), b.data(), 4) == E);
  CHECK(ops().to_host(O(), nullptr, b.data(), 4) == E);
  // Leading dimensions narrower than the stored rows (A is 4×3 untransposed, 3×4 transposed).
  CHECK(ops().gemm(O(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, 4, 2, 3, 1, a.data(), 2, b.data(), 2, 0, c.data(), 2) == E);
  CHECK(ops().gemm(O(), DSCPP_TRANS, DSCPP_NO_TRANS, 4, 2, 3, 1, a.data(), 3, b.data(), 2, 0, c.data(), 2) == E);
  CHECK(ops().gemm(O(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, 4, 2, 3, 1, a.data(), 3, b.data(), 2, 0, c.data(), 1) == E);
  CHECK(ops().gemm(O(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, -1, 2, 3, 1, a.data(), 3, b.data(), 2, 0, c.data(), 2) == E);
  CHECK(ops().gemm_strided_batched(O(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2, 2, 2, 1, a.data(), 2, 4, b.data(), 2, 4, 0,
                                   c.data(), 2, 4, -1) == E);
  CHECK(ops().softmax_forward(O(), a.data(), b.data(), -2, 4) == E);
  CHECK(ops().layernorm_forward(O(), a.data(), b.data(), b.data(), c.data(), nullptr, nullptr, 2, 4, 1e-5f) == E);
}

TEST_CASE("gemm: transposes, strides, alpha/beta and batches against fp64", "[ops][gemm]") {
  struct Shape {
    int64_t M, N, K;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 17, 33}, Shape{33, 7, 17}, Shape{64, 48, 100}, Shape{5, 3, 0}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t pad : {0, 3})
          for (float beta : {0.0f, 1.3f}) {
            const auto [M, N, K] = s;
            const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
            const int64_t lda = std::max<int64_t>(1, a_cols) + pad, ldb = std::max<int64_t>(1, b_cols) + pad,
                          ldc = N + pad;
            const int64_t batch = 3;
            // Batch strides leave a gap after each matrix, which must stay untouched.
            const int64_t sa = a_rows * lda + 5, sb = b_rows * ldb + 2, sc = M * ldc + 4;
            const float alpha = 0.7f;
            Vec A = rnd(sa * batch, 1), B = rnd(sb * batch, 2), C0 = rnd(sc * batch, 3, -2, 2);
            Vec C = C0;
            if (beta == 0.0f)  // beta = 0 must not read C
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = kNaN;
            const dscpp_transpose TA = ta ? DSCPP_TRANS : DSCPP_NO_TRANS, TB = tb ? DSCPP_TRANS : DSCPP_NO_TRANS;
            INFO("M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " pad " << pad << " beta "
                      << beta);
            REQUIRE(ops().gemm(O(), TA, TB, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc) ==
                    DSCPP_OK);
            Vec Cb = C0;
            REQUIRE(ops().gemm_strided_batched(O(), TA, TB, M, N, K, alpha, A.data(), lda, sa, B.data(), ldb, sb, beta,
                                               Cb.data(), ldc, sc, batch) == DSCPP_OK);
            for (int64_t p = 0; p < batch; ++p) {
              const float *a = A.data() + p * sa, *b = B.data() + p * sb, *c0 = C0.data() + p * sc;
              DVec ref(sc), tol(sc, 0.0);
              for (int64_t i = 0; i < sc; ++i) ref[i] = c0[i];
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                  double acc = 0, mag = 0;
                  for (int64_t k = 0; k < K; ++k) {
                    const double x = ta ? a[k * lda + i] : a[i * lda + k], y = tb ? b[j * ldb + k] : b[k * ldb + j];
                    acc += x * y;
                    mag += std::fabs(x * y);
                  }
                  const double c = beta == 0.0f ? 0.0 : double(beta) * c0[i * ldc + j];
                  ref[i * ldc + j] = alpha * acc + c;
                  // Worst-case fp32 bound of a K-term dot product: (K + 2)·u·Σ|terms|, u = 2^−24.
                  tol[i * ldc + j] = (K + 2) * 6e-8 * (alpha * mag + std::fabs(c)) + 1e-30;
                }
              const Vec& out = p == 0 ? C : Cb;
              const Vec got(out.begin() + p * sc, out.begin() + (p + 1) * sc);
              if (p == 0) {
                bool ok = true;
                for (int64_t i = 0; i < sc; ++i) ok = ok && std::fabs(got[i] - ref[i]) <= tol[i];
                CHECK(ok);
              }
              const Vec gb(Cb.begin() + p * sc, Cb.begin() + (p + 1) * sc);
              bool ok = true;
              for (int64_t i = 0; i < sc; ++i) ok = ok && std::fabs(gb[i] - ref[i]) <= tol[i];
              CHECK(ok);
            }
          }
}

TEST_CASE("elementwise ops against fp64, tails and parallel chunks", "[ops]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{17}, int64_t{33}, int64_t{1000}, int64_t{100003}}) {
    INFO("n " << n);
    const Vec a = rnd(n, 11), b = rnd(n, 12);
    Vec y(n, kNaN);
    REQUIRE(ops().fill(O(), y.data(), 2.5f, n) == DSCPP_OK);
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 2.5f; }));
    REQUIRE(ops().copy(O(), a.data(), y.data(), n) == DSCPP_OK);
    CHECK(y == a);
    DVec ref(n);
    REQUIRE(ops().add(O(), a.data(), b.data(), y.data(), n) == DSCPP_OK);
    for (int64_t i = 0; i < n; ++i) ref[i] = double(a[i]) + b[i];
    check_close(y, ref, 0, 6e-8);
    REQUIRE(ops().axpy(O(), -0.3f, a.data(), y.data(), n) == DSCPP_OK);  // y = a + b − 0.3a
    for (int64_t i = 0; i < n; ++i) ref[i] += -0.3 * a[i];
    check_close(y, ref, 1e-7, 1e-6);
    REQUIRE(ops().scale(O(), 3.0f, y.data(), n) == DSCPP_OK);
    for (auto& r : ref) r *= 3;
    check_close(y, ref, 1e-6, 1e-6);
    Vec z = a;  // y may alias an input
    REQUIRE(ops().add(O(), z.data(), b.data(), z.data(), n) == DSCPP_OK);
    for (int64_t i = 0; i < n; ++i) ref[i] = double(a[i]) + b[i];
    check_close(z, ref, 0, 6e-8);
  }
}

TEST_CASE("bias_add and bias_grad (accumulating) against fp64 and finite differences", "[ops]") {
  for (int64_t rows : {1, 5, 70})
    for (int64_t cols : kCols) {
      INFO("rows " << rows << " cols " << cols);
      const Vec x = rnd(rows * cols, 21), bias = rnd(cols, 22), w = rnd(rows * cols, 23);
      Vec y = x;
      REQUIRE(ops().bias_add(O(), y.data(), bias.data(), rows, cols) == DSCPP_OK);
      DVec ref(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) ref[i] = double(x[i]) + bias[i % cols];
      check_close(y, ref, 0, 6e-8);
      // L(bias) = Σ w·(x + bias): dL/dbias = bias_grad(dy = w).
      const DVec xd = to_d(x), wd = to_d(w);
      auto L = [&](const DVec& bd) {
        double s = 0;
        for (int64_t i = 0; i < rows * cols; ++i) s += wd[i] * (xd[i] + bd[i % cols]);
        return s;
      };
      const auto idx = sample(cols, 24);
      const Vec g0 = rnd(cols, 25);
      Vec db = g0;
      REQUIRE(ops().bias_grad(O(), w.data(), db.data(), rows, cols) == DSCPP_OK);
      Vec added(cols);
      for (int64_t c = 0; c < cols; ++c) added[c] = db[c] - g0[c];
      check_grad(only(added, idx), fd_grad(L, to_d(bias), idx));
      // Accumulates: from zero, a second call adds exactly the same sums again.
      Vec z(cols, 0.0f);
      REQUIRE(ops().bias_grad(O(), w.data(), z.data(), rows, cols) == DSCPP_OK);
      Vec z2 = z;
      REQUIRE(ops().bias_grad(O(), w.data(), z2.data(), rows, cols) == DSCPP_OK);
      bool doubled = true;
      for (int64_t c = 0; c < cols; ++c) doubled = doubled && z2[c] == 2 * z[c];
      CHECK(doubled);
    }
}

TEST_CASE("gelu and relu against fp64 and finite differences", "[ops]") {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{17}, int64_t{33}, int64_t{1000}, int64_t{40000}}) {
    INFO("n " << n);
    Vec x = rnd(n, 31, -4, 4);
    const float extremes[] = {-30.0f, -10.0f, 0.0f, 10.0f, 30.0f, 1e-4f};
    for (size_t i = 0; i < std::size(extremes) && i < x.size(); ++i) x[i * 3 % n] = extremes[i];
    const Vec dy = rnd(n, 32);
    Vec y(n, kNaN), dx(n, kNaN);
    REQUIRE(ops().gelu_forward(O(), x.data(), y.data(), n) == DSCPP_OK);
    DVec ref(n), g(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = gelu_ref(x[i]);
    // exp_f is within a few ulp; the error of e^(−2u) grows with |u|, hence 1e-5 relative.
    check_close(y, ref, 1e-6, 1e-5);
    REQUIRE(ops().gelu_backward(O(), x.data(), dy.data(), dx.data(), n) == DSCPP_OK);
    const double h = 1e-3;  // elementwise: L = Σ dy·gelu(x) separates per element
    for (int64_t i = 0; i < n; ++i) g[i] = dy[i] * (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
    check_grad(dx, g);

    Vec xr = rnd(n, 33, -1, 1);  // kept ≥ 2h away from the kink
    for (auto& v : xr) v = v < 0 ? std::min(v, -0.01f) : std::max(v, 0.01f);
    REQUIRE(ops().relu_forward(O(), xr.data(), y.data(), n) == DSCPP_OK);
    for (int64_t i = 0; i < n; ++i) ref[i] = std::max(0.0, double(xr[i]));
    check_close(y, ref, 0, 0);
    REQUIRE(ops().relu_backward(O(), xr.data(), dy.data(), dx.data(), n) == DSCPP_OK);
    auto relu = [](double v) { return std::max(0.0, v); };
    for (int64_t i = 0; i < n; ++i) g[i] = dy[i] * (relu(xr[i] + h) - relu(xr[i] - h)) / (2 * h);
    check_grad(dx, g);
  }
}

TEST_CASE("layernorm forward against fp64, backward against finite differences", "[ops][layernorm]") {
  const float eps = 1e-5f;
  for (int64_t rows : {3, 70})
    for (int64_t cols : kCols) {
      if (rows == 70 && cols < 1000) continue;  // the large case only to cross the parallel grain
      INFO("rows " << rows << " cols " << cols);
      const int64_t n = rows * cols;
      Vec x = rnd(n, 41, -1.5f, 2.5f), gamma = rnd(cols, 42, 0.5f, 1.5f), beta = rnd(cols, 43);
      const Vec w = rnd(n, 44);
      Vec y(n, kNaN), mean(rows, kNaN), rstd(rows, kNaN);
      REQUIRE(ops().layernorm_forward(O(), x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                                      rows, cols, eps) == DSCPP_OK);
      const DVec xd = to_d(x), gd = to_d(gamma), bd = to_d(beta), wd = to_d(w);
      const LnRef ref = layernorm_ref(xd, gd, bd, rows, cols, eps);
      check_close(y, ref.y, 2e-5, 1e-5);
      check_close(mean, ref.mean, 1e-6, 1e-5);
      check_close(rstd, ref.rstd, 0, 2e-5);

      // dy = w, so the gradients are those of L = Σ w·LN(x; gamma, beta).
      const Vec g0 = rnd(cols, 45), b0 = rnd(cols, 46);
      Vec dx(n, kNaN), dg = g0, db = b0;
      REQUIRE(ops().layernorm_backward(O(), w.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                                       dg.data(), db.data(), rows, cols) == DSCPP_OK);
      const auto ix = sample(n, 47), ip = sample(cols, 48);
      check_grad(only(dx, ix),
                 fd_grad([&](const DVec& v) { return dot(wd, layernorm_ref(v, gd, bd, rows, cols, eps).y); }, xd, ix));
      Vec dgam(cols), dbet(cols);
      for (int64_t c = 0; c < cols; ++c) dgam[c] = dg[c] - g0[c], dbet[c] = db[c] - b0[c];
      check_grad(only(dgam, ip),
                 fd_grad([&](const DVec& v) { return dot(wd, layernorm_ref(xd, v, bd, rows, cols, eps).y); }, gd, ip));
      check_grad(only(dbet, ip),
                 fd_grad([&](const DVec& v) { return dot(wd, layernorm_ref(xd, gd, v, rows, cols, eps).y); }, bd, ip));
      // From zero, a second call adds exactly the same dgamma/dbeta again; dx is overwritten.
      Vec dx2(n, kNaN), zg(cols, 0.0f), zb(cols, 0.0f);
      REQUIRE(ops().layernorm_backward(O(), w.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx2.data(),
                                       zg.data(), zb.data(), rows, cols) == DSCPP_OK);
      const Vec zg1 = zg, zb1 = zb;
      REQUIRE(ops().layernorm_backward(O(), w.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx2.data(),
                                       zg.data(), zb.data(), rows, cols) == DSCPP_OK);
      CHECK(dx2 == dx);
      bool doubled = true;
      for (int64_t c = 0; c < cols; ++c) doubled = doubled && zg[c] == 2 * zg1[c] && zb[c] == 2 * zb1[c];
      CHECK(doubled);
    }
}

TEST_CASE("softmax forward against fp64, backward against finite differences", "[ops][softmax]") {
  for (int64_t rows : {1, 4})
    for (int64_t cols : kCols) {
      INFO("rows " << rows << " cols " << cols);
      const int64_t n = rows * cols;
      Vec x = rnd(n, 51, -5, 5);
      x[0] += 80.0f;  // a large logit: the max subtraction keeps exp finite
      const Vec w = rnd(n, 52);
      Vec y(n, kNaN), dx(n, kNaN);
      REQUIRE(ops().softmax_forward(O(), x.data(), y.data(), rows, cols) == DSCPP_OK);
      const DVec xd = to_d(x), wd = to_d(w);
      check_close(y, softmax_ref(xd, rows, cols), 1e-7, 1e-5);
      REQUIRE(ops().softmax_backward(O(), y.data(), w.data(), dx.data(), rows, cols) == DSCPP_OK);
      const auto ix = sample(n, 53);
      check_grad(only(dx, ix), fd_grad([&](const DVec& v) { return dot(wd, softmax_ref(v, rows, cols)); }, xd, ix));
    }
}

TEST_CASE("causal softmax: scale, exact-zero mask, backward against finite differences", "[ops][softmax]") {
  const float scale = 0.35f;
  for (int64_t T : {1, 7, 17, 33, 80}) {
    const int64_t groups = T == 80 ? 4 : 3, n = groups * T * T;
    INFO("groups " << groups << " T " << T);
    const Vec x = rnd(n, 61, -6, 6), w = rnd(n, 62);
    Vec p(n, kNaN), dx(n, kNaN);
    REQUIRE(ops().causal_softmax_forward(O(), x.data(), p.data(), groups, T, scale) == DSCPP_OK);
    const DVec xd = to_d(x), wd = to_d(w);
    auto P = [&](const DVec& v) { return softmax_ref(v, groups * T, T, scale, T); };
    check_close(p, P(xd), 1e-7, 1e-5);
    bool masked_zero = true, dmasked_zero = true;
    for (int64_t r = 0; r < groups * T; ++r)
      for (int64_t s = r % T + 1; s < T; ++s) masked_zero = masked_zero && p[r * T + s] == 0.0f;
    CHECK(masked_zero);
    // dprobs = w is nonzero on masked entries too; their scores still get exactly 0.
    REQUIRE(ops().causal_softmax_backward(O(), p.data(), w.data(), dx.data(), groups, T, scale) == DSCPP_OK);
    for (int64_t r = 0; r < groups * T; ++r)
      for (int64_t s = r % T + 1; s < T; ++s) dmasked_zero = dmasked_zero && dx[r * T + s] == 0.0f;
    CHECK(dmasked_zero);
    const auto ix = sample(n, 63, 64);
    check_grad(only(dx, ix), fd_grad([&](const DVec& v) { return dot(wd, P(v)); }, xd, ix));
  }
}

TEST_CASE("embedding: gather, accumulating scatter, bad ids", "[ops][embedding]") {
  const int64_t vocab = 11, n = 9;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 1, 10, 5};  // repeats add up
  for (int64_t dim : kCols) {
    INFO("dim " << dim);
    const Vec table = rnd(vocab * dim, 71), w = rnd(n * dim, 72), t0 = rnd(vocab * dim, 73);
    Vec out(n * dim, kNaN);
    REQUIRE(ops().embedding_forward(O(), ids.data(), table.data(), out.data(), n, vocab, dim) == DSCPP_OK);
    bool same = true;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) same = same && out[i * dim + c] == table[ids[i] * dim + c];
    CHECK(same);
    // L(table) = Σ w·out.
    const DVec wd = to_d(w);
    auto L = [&](const DVec& tv) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < dim; ++c) s += wd[i * dim + c] * tv[ids[i] * dim + c];
      return s;
    };
    const auto it = sample(vocab * dim, 74, 96);
    const DVec g = fd_grad(L, to_d(table), it);
    Vec dt = t0;
    REQUIRE(ops().embedding_backward(O(), ids.data(), w.data(), dt.data(), n, vocab, dim) == DSCPP_OK);
    Vec got(vocab * dim);
    for (int64_t i = 0; i < vocab * dim; ++i) got[i] = dt[i] - t0[i];
    check_grad(only(got, it), g);
    REQUIRE(ops().embedding_backward(O(), ids.data(), w.data(), dt.data(), n, vocab, dim) == DSCPP_OK);
    DVec want(vocab * dim);
    for (int64_t i = 0; i < vocab * dim; ++i) want[i] = t0[i] + 2.0 * got[i];
    check_close(dt, want, 1e-6, 1e-6);
  }
  const Vec table(vocab * 4, 1.0f);
  Vec out(n * 4, -7.0f), dt(vocab * 4, 0.0f);
  for (int32_t bad : {int32_t(vocab), -1}) {
    std::vector<int32_t> b = ids;
    b[5] = bad;
    CHECK(ops().embedding_forward(O(), b.data(), table.data(), out.data(), n, vocab, 4) == DSCPP_E_INVALID_ARGUMENT);
    CHECK(ops().embedding_backward(O(), b.data(), out.data(), dt.data(), n, vocab, 4) == DSCPP_E_INVALID_ARGUMENT);
  }
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.0f; }));  // nothing written
  CHECK(std::all_of(dt.begin(), dt.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("cross-entropy: loss, counts, ignored rows, backward against finite differences", "[ops][xent]") {
  const int64_t rows = 7;
  for (int64_t cols : kCols) {
    INFO("cols " << cols);
    const int64_t n = rows * cols;
    Vec x = rnd(n, 81, -4, 4);
    x[cols - 1] += 200.0f;  // a huge logit in row 0 must not overflow
    std::vector<int32_t> t(rows);
    std::mt19937 g(82);
    for (auto& v : t) v = int32_t(g() % cols);
    t[1] = -1;
    t[4] = -100;  // ignored
    // Make rows 2 and 5 right (target = argmax; the first one on ties); row 0 right iff cols = 1.
    for (int64_t r : {2, 5}) t[r] = int32_t(std::max_element(&x[r * cols], &x[r * cols] + cols) - &x[r * cols]);
    int64_t want_correct = 0, want_counted = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (t[r] < 0) continue;
      ++want_counted;
      want_correct += std::max_element(&x[r * cols], &x[r * cols] + cols) - &x[r * cols] == t[r];
    }
    Vec p(n, kNaN);
    double loss = -1;
    int64_t counted = -1, correct = -1;
    REQUIRE(ops().cross_entropy_forward(O(), x.data(), t.data(), p.data(), rows, cols, &loss, &counted, &correct) ==
            DSCPP_OK);
    const DVec xd = to_d(x);
    check_close(p, softmax_ref(xd, rows, cols), 1e-7, 1e-5);
    CHECK(counted == want_counted);
    CHECK(correct == want_correct);
    CHECK(correct >= 2);
    const double ref = ce_ref(xd, t, rows, cols);
    CHECK(std::fabs(loss - ref) <= 1e-5 * (1 + std::fabs(ref)));

    const float scale = 0.25f;
    Vec d(n, kNaN);
    REQUIRE(ops().cross_entropy_backward(O(), p.data(), t.data(), d.data(), rows, cols, scale) == DSCPP_OK);
    const auto ix = sample(n, 83, 64);
    check_grad(only(d, ix), fd_grad([&](const DVec& v) { return scale * ce_ref(v, t, rows, cols); }, xd, ix));
    bool ignored_zero = true;
    for (int64_t r : {1, 4})
      for (int64_t c = 0; c < cols; ++c) ignored_zero = ignored_zero && d[r * cols + c] == 0.0f;
    CHECK(ignored_zero);

    std::vector<int32_t> bad = t;
    bad[3] = int32_t(cols);
    CHECK(ops().cross_entropy_forward(O(), x.data(), bad.data(), p.data(), rows, cols, &loss, &counted, &correct) ==
          DSCPP_E_INVALID_ARGUMENT);
    CHECK(ops().cross_entropy_backward(O(), p.data(), bad.data(), d.data(), rows, cols, 1) == DSCPP_E_INVALID_ARGUMENT);
  }
}

// Dropout's mask is a function of (seed, index) only: the CPU table must draw exactly the documented
// one (ops_check::dropout_ref), whatever the chunking across threads, in place or not.
TEST_CASE("dropout: the documented counter-based mask, in place, p = 0, any thread count", "[ops][dropout]") {
  Restore restore;
  for (int64_t n : {1, 7, 33, 1000, 100003})
    for (float p : {0.1f, 0.3f, 0.9f}) {
      CAPTURE(n, p);
      const uint64_t seed = 0xDEADBEEF12345ull + uint64_t(n);
      Vec x = rnd(size_t(n), 95);
      const Vec want = dropout_ref(x, p, seed);
      for (int threads : {1, 3}) {
        dscpp::kernels::set_cpu_threads(threads);
        Vec y(size_t(n), kNaN);
        REQUIRE(ops().dropout(O(), x.data(), y.data(), n, p, seed) == DSCPP_OK);
        CHECK(bitwise(y, want));
      }
      Vec z = x;
      REQUIRE(ops().dropout(O(), z.data(), z.data(), n, p, seed) == DSCPP_OK);  // y aliasing x
      CHECK(bitwise(z, want));
      // The backward is the same call on the gradient: dropping the result again with the same seed
      // zeroes nothing new (the same mask) and scales the kept elements once more.
      REQUIRE(ops().dropout(O(), z.data(), z.data(), n, p, seed) == DSCPP_OK);
      CHECK(bitwise(z, dropout_ref(want, p, seed)));
    }
  const Vec x = rnd(64, 96);
  Vec y(64, kNaN);
  REQUIRE(ops().dropout(O(), x.data(), y.data(), 64, 0.0f, 7) == DSCPP_OK);  // p = 0: a copy
  CHECK(bitwise(y, x));
  Vec nan(64, kNaN), yn(64, 0.0f);
  REQUIRE(ops().dropout(O(), nan.data(), yn.data(), 64, 0.5f, 7) == DSCPP_OK);  // x·0, as torch: NaN stays NaN
  CHECK(bitwise(yn, nan));
  const int E = DSCPP_E_INVALID_ARGUMENT;
  for (float p : {1.0f, -0.1f, 1.5f, kNaN}) CHECK(ops().dropout(O(), x.data(), y.data(), 64, p, 7) == E);
  CHECK(ops().dropout(O(), x.data(), nullptr, 4, 0.5f, 7) == E);
  CHECK(ops().dropout(O(), x.data(), y.data(), -1, 0.5f, 7) == E);
  CHECK(ops().dropout(O(), nullptr, nullptr, 0, 0.5f, 7) == DSCPP_OK);
  // Seeds one apart (as layers' are) give unrelated masks: they agree on p² + (1 − p)² of the elements.
  const int64_t n = 1 << 20;
  const Vec ones(size_t(n), 1.0f);
  Vec a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  REQUIRE(ops().dropout(O(), ones.data(), a.data(), n, 0.5f, 41) == DSCPP_OK);
  REQUIRE(ops().dropout(O(), ones.data(), b.data(), n, 0.5f, 42) == DSCPP_OK);
  int64_t agree = 0;
  for (int64_t i = 0; i < n; ++i) agree += a[size_t(i)] == b[size_t(i)];
  CHECK(std::fabs(double(agree) / double(n) - 0.5) < 0.005);
}

TEST_CASE("results do not depend on the thread count", "[ops][threads]") {
  const int64_t rows = 96, cols = 1000, n = rows * cols;
  const Vec x = rnd(n, 91), dy = rnd(n, 92), gamma = rnd(cols, 93);
  std::vector<int32_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = int32_t(r * 7 % cols);
  struct Out {
    Vec y, dx, dg, db, p;
    double loss;
  };
  auto run = [&](int threads) {
    dscpp::kernels::set_cpu_threads(threads);
    Out o{Vec(n), Vec(n), Vec(cols, 0.0f), Vec(cols, 0.0f), Vec(n), 0};
    Vec mean(rows), rstd(rows);
    int64_t c, k;
    REQUIRE(ops().layernorm_forward(O(), x.data(), gamma.data(), gamma.data(), o.y.data(), mean.data(), rstd.data(),
                                    rows, cols, 1e-5f) == DSCPP_OK);
    REQUIRE(ops().layernorm_backward(O(), dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), o.dx.data(),
                                     o.dg.data(), o.db.data(), rows, cols) == DSCPP_OK);
    REQUIRE(ops().cross_entropy_forward(O(), x.data(), t.data(), o.p.data(), rows, cols, &o.loss, &c, &k) == DSCPP_OK);
    return o;
  };
  const int before = dscpp::num_threads();
  const Out one = run(1), two = run(2), three = run(3);
  dscpp::kernels::set_cpu_threads(before);
  for (const Out* o : {&two, &three}) {
    CHECK(o->y == one.y);
    CHECK(o->dx == one.dx);
    CHECK(o->dg == one.dg);
    CHECK(o->db == one.db);
    CHECK(o->p == one.p);
    CHECK(o->loss == one.loss);
  }
  CHECK(dscpp::kernels::blas_description().find("OpenBLAS") == 0);
}
