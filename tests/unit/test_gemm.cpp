// The GEMM entries of the CPU ops table on shapes that cross every blocking boundary of the
// AVX-512 kernel (12-row panels, 32-column slivers, depth blocks of 256, column blocks of 512),
// for each backend and thread count, against fp64. test_ops.cpp covers the small shapes, the
// transposes/strides/alpha/beta matrix and the argument checks.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using namespace ops_check;
using dscpp::kernels::GemmBackend;



struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;
  float alpha, beta;
};

// C (row stride ldc) after the GEMM, and its fp64 value with the worst-case fp32 bound of a
// K-term dot product, (K + 2)·u·Σ|terms| with u = 2^−24 (rounded up to 6e-8).
struct Reference {
  DVec value, tol;
};
Reference reference(const Case& c, const Vec& A, int64_t lda, const Vec& B, int64_t ldb, const Vec& C0, int64_t ldc) {
  Reference r{DVec(C0.begin(), C0.end()), DVec(C0.size(), 0.0)};
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double x = c.ta ? A[k * lda + i] : A[i * lda + k], y = c.tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += x * y;
        mag += std::fabs(x * y);
      }
      const double old = c.beta == 0.0f ? 0.0 : double(c.beta) * C0[i * ldc + j];
      r.value[i * ldc + j] = c.alpha * acc + old;
      r.tol[i * ldc + j] = (c.K + 2) * 6e-8 * (std::fabs(c.alpha) * mag + std::fabs(old)) + 1e-30;
    }
  return r;
}

bool within(const Vec& got, const Reference& r) {
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - r.value[i]) <= r.tol[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("gemm: blocking edges, every backend and thread count, against fp64", "[ops][gemm]") {
  Restore restore;
  const Case cases[] = {
      {false, true, 130, 600, 300, 5, 0.7f, 0.0f},   // forward linear: x·Wᵀ
      {false, false, 130, 600, 300, 0, 1.0f, 1.3f},  // dx = dy·W
      {true, false, 37, 70, 520, 3, 1.0f, 1.0f},     // dW += dyᵀ·x, three depth blocks
      {true, true, 25, 33, 257, 1, -0.5f, 0.0f},
      {false, true, 1, 1030, 17, 0, 1.0f, 0.0f},     // one row, three column blocks
      // Row strides of A of 1024 floats (4 KiB): the AVX-512 driver copies each panel to a padded
      // stride. One deep block with a part panel; then four depth blocks, two column blocks.
      {false, true, 29, 100, 1000, 24, 1.0f, 0.0f},
      {false, false, 13, 530, 1024, 0, 1.0f, 0.5f},
  };
  for (const Case& c : cases)
    for (GemmBackend be : backends())
      for (int threads : {1, 2, 3}) {
        dscpp::kernels::set_gemm_backend(be);
        dscpp::kernels::set_cpu_threads(threads);
        const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
        const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
        const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
        const Vec A = rnd(a_rows * lda, 11), B = rnd(b_rows * ldb, 12), C0 = rnd(c.M * ldc, 13, -2, 2);
        Vec C = C0;
        if (c.beta == 0.0f)  // beta = 0 must not read C
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < c.N; ++j) C[i * ldc + j] = kNaN;
        INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << c.ta << " tb " << c.tb << " backend "
                  << dscpp::kernels::gemm_description() << " threads " << threads);
        REQUIRE(ops().gemm(O(), c.ta ? DSCPP_TRANS : DSCPP_NO_TRANS, c.tb ? DSCPP_TRANS : DSCPP_NO_TRANS, c.M, c.N,
                           c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc) == DSCPP_OK);
        // The padding columns of C keep their old values: the reference starts from C0 there.
        CHECK(within(C, reference(c, A, lda, B, ldb, C0, ldc)));
      }
}

TEST_CASE("gemm: the AVX-512 kernel gives the same bits for any thread count", "[ops][gemm][threads]") {
  if (backends().size() < 2) return;  // no AVX-512 on this CPU
  Restore restore;
  dscpp::kernels::set_gemm_backend(GemmBackend::avx512);
  // Each element is one dot product in a fixed order whichever thread owns its tile.
  const int64_t M = 200, N = 700, K = 300;
  const Vec A = rnd(M * K, 21), B = rnd(N * K, 22);
  auto run = [&](int threads) {
    dscpp::kernels::set_cpu_threads(threads);
    Vec C(M * N, 0.0f);
    REQUIRE(ops().gemm(O(), DSCPP_NO_TRANS, DSCPP_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N) ==
            DSCPP_OK);
    return C;
  };
  const Vec one = run(1);
  CHECK(run(2) == one);
  CHECK(run(3) == one);
}

TEST_CASE("gemm: A rows copied off a 4 KiB stride give the bits of A read in place", "[ops][gemm]") {
  if (backends().size() < 2) return;  // no AVX-512 on this CPU
  Restore restore;
  dscpp::kernels::set_gemm_backend(GemmBackend::avx512);
  dscpp::kernels::set_cpu_threads(1);
  // The same A at row stride 1024 (copied per panel) and 1025 (read in place): the kernel runs the
  // same FMAs in the same order on either, so C must match bit for bit.
  const int64_t M = 30, N = 200, K = 700;
  const Vec B = rnd(N * K, 31), A_src = rnd(M * K, 32);
  auto run = [&](int64_t lda) {
    Vec A(M * lda, kNaN);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) A[i * lda + k] = A_src[i * K + k];
    Vec C(M * N, 0.0f);
    REQUIRE(ops().gemm(O(), DSCPP_NO_TRANS, DSCPP_TRANS, M, N, K, 1.0f, A.data(), lda, B.data(), K, 0.0f, C.data(),
                       N) == DSCPP_OK);
    return C;
  };
  const Vec copied = run(1024), in_place = run(1025);
  CHECK(std::memcmp(copied.data(), in_place.data(), sizeof(float) * copied.size()) == 0);
}

TEST_CASE("gemm_strided_batched: fewer and more GEMMs than threads", "[ops][gemm]") {
  Restore restore;
  const Case c{true, false, 40, 24, 64, 0, 1.0f, 0.5f};
  const int64_t sa = c.K * c.M + 7, sb = c.K * c.N + 3, sc = c.M * c.N + 5;
  for (GemmBackend be : backends())
    for (int64_t batch : {1, 5}) {
      dscpp::kernels::set_gemm_backend(be);
      dscpp::kernels::set_cpu_threads(2);
      const Vec A = rnd(sa * batch, 31), B = rnd(sb * batch, 32), C0 = rnd(sc * batch, 33);
      Vec C = C0;
      REQUIRE(ops().gemm_strided_batched(O(), DSCPP_TRANS, DSCPP_NO_TRANS, c.M, c.N, c.K, c.alpha, A.data(), c.M, sa,
                                         B.data(), c.N, sb, c.beta, C.data(), c.N, sc, batch) == DSCPP_OK);
      for (int64_t p = 0; p < batch; ++p) {
        INFO("batch " << batch << " matrix " << p << " backend " << dscpp::kernels::gemm_description());
        const Vec a(A.begin() + p * sa, A.begin() + (p + 1) * sa), b(B.begin() + p * sb, B.begin() + (p + 1) * sb);
        const Vec c0(C0.begin() + p * sc, C0.begin() + (p + 1) * sc), got(C.begin() + p * sc, C.begin() + (p + 1) * sc);
        CHECK(within(got, reference(c, a, c.M, b, c.N, c0, c.N)));  // the gap after each matrix is untouched too
      }
    }
}

TEST_CASE("gemm backend: chosen, described, and refused where the CPU lacks it", "[ops][gemm]") {
  Restore restore;
  dscpp::kernels::set_gemm_backend(GemmBackend::openblas);
  CHECK(dscpp::kernels::gemm_description() == "OpenBLAS sgemm");
  CHECK(dscpp::kernels::blas_description().find("fp32 GEMM: OpenBLAS sgemm") != std::string::npos);
  if (backends().size() == 2) {
    dscpp::kernels::set_gemm_backend(GemmBackend::avx512);
    CHECK(dscpp::kernels::gemm_description() == "dscpp AVX-512 (12x32 tiles)");
  } else {
    CHECK_THROWS_WITH(dscpp::kernels::set_gemm_backend(GemmBackend::avx512), Catch::Contains("lacks AVX-512"));
  }
}
