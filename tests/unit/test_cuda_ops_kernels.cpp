// The CUDA ops kernels (kernels/cuda/ops_elementwise.cu, ops_rows.cu) compiled as C++ against
// the recording host stub, against the CPU ops table (kernels/cpu/ops). Both evaluate the
// shared element functions of kernels/ops_math.h; elementwise ops agree bit for bit, row ops
// (whose sums run in another order: a tree of doubles here, SIMD lanes there) to fp32 rounding.
// Row widths 1, 5, 300 put rows through partial blocks (fewer columns than threads) and
// strided ones; kernels run for real on the host, so sizes stay small.
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cuda/ops_kernels.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace dscpp;
namespace cops = dscpp::cuda::ops;

namespace {

void require_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

const dscpp_ops cpu = kernels::cpu_ops(DSCPP_F32);
const int64_t kCols[] = {1, 5, 300};

}  // namespace

TEST_CASE("CUDA elementwise kernels (host stub) equal the CPU table bit for bit", "[cuda_ops]") {
  for (int64_t n : {1, 7, 1029, 70001}) {  // 70001: four quads per thread, then single quads, then a tail
    const auto x = ops_check::rnd(n, 1, -8.0f, 8.0f), dy = ops_check::rnd(n, 2, -2.0f, 2.0f);
    std::vector<float> a(x.size()), b(x.size());
    REQUIRE(cops::gelu_forward(x.data(), a.data(), n, nullptr) == cuda::kOk);
    REQUIRE(cpu.gelu_forward(&cpu, x.data(), b.data(), n) == DSCPP_OK);
    // The CPU clones are built with FMA contraction allowed; one rounding apart at most.
    require_close(a, b, 1e-6f);
    REQUIRE(cops::gelu_backward(x.data(), dy.data(), a.data(), n, nullptr) == cuda::kOk);
    REQUIRE(cpu.gelu_backward(&cpu, x.data(), dy.data(), b.data(), n) == DSCPP_OK);
    require_close(a, b, 1e-6f);
    REQUIRE(cops::relu_backward(x.data(), dy.data(), a.data(), n, nullptr) == cuda::kOk);
    REQUIRE(cpu.relu_backward(&cpu, x.data(), dy.data(), b.data(), n) == DSCPP_OK);
    REQUIRE(a == b);
  }
}

TEST_CASE("CUDA bias, embedding and cross-entropy backward kernels (host stub) equal the CPU table", "[cuda_ops]") {
  for (int64_t cols : kCols) {
    CAPTURE(cols);
    const int64_t rows = 9;
    const auto dy = ops_check::rnd(rows * cols, 3, -2.0f, 2.0f);
    std::vector<float> ga(static_cast<size_t>(cols), 1.0f), gb = ga;
    REQUIRE(cops::column_scratch_floats(rows, cols, 1) == 0);  // one chunk: no second pass
    REQUIRE(cops::bias_grad(dy.data(), ga.data(), rows, cols, nullptr, nullptr) == cuda::kOk);
    REQUIRE(cpu.bias_grad(&cpu, dy.data(), gb.data(), rows, cols) == DSCPP_OK);
    require_close(ga, gb, 1e-6f);  // the same row order; the CPU may contract differently

    const int64_t vocab = 4;
    const std::vector<int32_t> ids = {3, 0, 3, 1, 3, 2, 0, 0, 1};
    const auto table = ops_check::rnd(vocab * cols, 4, -2.0f, 2.0f);
    std::vector<float> ea(static_cast<size_t>(rows * cols)), eb = ea;
    REQUIRE(cops::embedding_forward(ids.data(), table.data(), ea.data(), rows, cols, nullptr) == cuda::kOk);
    REQUIRE(cpu.embedding_forward(&cpu, ids.data(), table.data(), eb.data(), rows, vocab, cols) == DSCPP_OK);
    REQUIRE(ea == eb);
    const std::vector<int32_t> segments = cops::embedding_segments(ids.data(), rows);
    // Positions by id, stable; runs start at 0, 3, 4, 6 (ids 0, 1, 2, 3); the end; the ids.
    REQUIRE(segments == std::vector<int32_t>{1, 6, 7, 3, 8, 5, 0, 2, 4, 0, 3, 5, 6, 9, 0, 1, 2, 3});
    std::vector<float> ta = table, tb = table;
    REQUIRE(cops::embedding_backward(segments.data(), rows, 4, dy.data(), ta.data(), cols, nullptr) == cuda::kOk);
    REQUIRE(cpu.embedding_backward(&cpu, ids.data(), dy.data(), tb.data(), rows, vocab, cols) == DSCPP_OK);
    REQUIRE(ta == tb);  // each table row gets its positions' rows added in position order on both
    int32_t bad = 0;
    const std::vector<int32_t> wrong = {0, 4};
    REQUIRE(cops::check_ids(wrong.data(), 2, vocab, &bad, nullptr) == cuda::kOk);
    CHECK(bad == 1);

    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = r == 2 ? -1 : int32_t(r % cols);
    const auto probs = ops_check::rnd(rows * cols, 5, 0.0f, 1.0f);
    std::vector<float> da(probs.size()), db(probs.size());
    REQUIRE(cops::cross_entropy_backward(probs.data(), targets.data(), da.data(), rows, cols, 0.5f, nullptr) ==
            cuda::kOk);
    REQUIRE(cpu.cross_entropy_backward(&cpu, probs.data(), targets.data(), db.data(), rows, cols, 0.5f) == DSCPP_OK);
    REQUIRE(da == db);
  }
}

TEST_CASE("CUDA column sums over many rows: chunks, then the chunk partials in a fixed tree", "[cuda_ops]") {
  for (int64_t cols : kCols) {
    CAPTURE(cols);
    const int64_t rows = 1000;
    const cops::ColumnPlan plan = cops::column_plan(rows, cols);
    CHECK(plan.rows_per_chunk >= 32);
    CHECK(plan.chunks * plan.rows_per_chunk >= rows);
    CHECK((plan.chunks - 1) * plan.rows_per_chunk < rows);  // no empty chunk
    CHECK(plan.chunks > 1);
    const auto dy = ops_check::rnd(rows * cols, 21, -2.0f, 2.0f), x = ops_check::rnd(rows * cols, 22, -3.0f, 3.0f);
    std::vector<float> scratch(static_cast<size_t>(cops::column_scratch_floats(rows, cols, 2)));
    REQUIRE(scratch.size() == size_t(2 * plan.chunks * cols));
    // The reference: the same chunks in fp64, whose rounding is far below fp32's.
    std::vector<double> sum(static_cast<size_t>(cols)), sum_xhat(sum.size());
    std::vector<float> mean(static_cast<size_t>(rows)), rstd(mean.size());
    for (int64_t r = 0; r < rows; ++r)
      mean[size_t(r)] = 0.1f * float(r % 7), rstd[size_t(r)] = 1.0f + 0.01f * float(r % 5);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        sum[size_t(c)] += dy[i];
        sum_xhat[size_t(c)] += double(dy[i]) * double((x[i] - mean[size_t(r)]) * rstd[size_t(r)]);
      }
    std::vector<float> db(static_cast<size_t>(cols), 0.5f), dg = db, dbeta = db;
    REQUIRE(cops::bias_grad(dy.data(), db.data(), rows, cols, scratch.data(), nullptr) == cuda::kOk);
    REQUIRE(cops::layernorm_param_grads(dy.data(), x.data(), mean.data(), rstd.data(), dg.data(), dbeta.data(), rows,
                                        cols, scratch.data(), nullptr) == cuda::kOk);
    // Each output is a 1000-term fp32 sum of terms ≤ 6 in size: chunked sums err by at most
    // (32 + 32)·u per term, ~4e-3 in all; measured ≤ 1e-4.
    for (int64_t c = 0; c < cols; ++c) {
      CAPTURE(c);
      CHECK(db[size_t(c)] == Approx(0.5 + sum[size_t(c)]).margin(4e-3));
      CHECK(dbeta[size_t(c)] == Approx(0.5 + sum[size_t(c)]).margin(4e-3));
      CHECK(dg[size_t(c)] == Approx(0.5 + sum_xhat[size_t(c)]).margin(4e-3));
    }
    // A wrong chunk order or a lost chunk is far outside that.
    std::vector<float> short_rows(static_cast<size_t>(cols), 0.5f);
    REQUIRE(cops::bias_grad(dy.data(), short_rows.data(), rows - 1, cols, scratch.data(), nullptr) == cuda::kOk);
    double off = 0;
    for (int64_t c = 0; c < cols; ++c) off = std::max(off, std::fabs(short_rows[size_t(c)] - (0.5 + sum[size_t(c)])));
    CHECK(off > 4e-3);
  }
}

TEST_CASE("CUDA row kernels (host stub) match the CPU table", "[cuda_ops]") {
  for (int64_t cols : kCols) {
    CAPTURE(cols);
    const int64_t rows = 6;
    const auto x = ops_check::rnd(rows * cols, 6, -5.0f, 5.0f), dy = ops_check::rnd(rows * cols, 7, -2.0f, 2.0f),
               g = ops_check::rnd(cols, 8, -2.0f, 2.0f), b = ops_check::rnd(cols, 9, -2.0f, 2.0f);
    std::vector<float> ya(x.size()), yb(x.size()), ma(static_cast<size_t>(rows)), mb(ma.size()), ra(ma.size()),
        rb(ma.size());
    REQUIRE(cops::layernorm_forward(x.data(), g.data(), b.data(), ya.data(), ma.data(), ra.data(), rows, cols, 1e-5f,
                                    nullptr) == cuda::kOk);
    REQUIRE(cpu.layernorm_forward(&cpu, x.data(), g.data(), b.data(), yb.data(), mb.data(), rb.data(), rows, cols,
                                  1e-5f) == DSCPP_OK);
    require_close(ya, yb, 2e-5f);
    require_close(ma, mb, 1e-5f);
    require_close(ra, rb, 1e-4f);
    std::vector<float> dxa(x.size()), dxb(x.size()), dga(static_cast<size_t>(cols)), dgb(dga.size()), dba(dga.size()),
        dbb(dga.size());
    REQUIRE(cops::layernorm_backward(dy.data(), x.data(), g.data(), mb.data(), rb.data(), dxa.data(), dga.data(),
                                     dba.data(), rows, cols, nullptr, nullptr) == cuda::kOk);
    REQUIRE(cpu.layernorm_backward(&cpu, dy.data(), x.data(), g.data(), mb.data(), rb.data(), dxb.data(), dgb.data(),
                                   dbb.data(), rows, cols) == DSCPP_OK);
    require_close(dxa, dxb, 1e-4f);
    require_close(dga, dgb, 1e-5f);
    require_close(dba, dbb, 1e-5f);

    REQUIRE(cops::softmax_forward(x.data(), ya.data(), rows, cols, 1.0f, false, nullptr) == cuda::kOk);
    REQUIRE(cpu.softmax_forward(&cpu, x.data(), yb.data(), rows, cols) == DSCPP_OK);
    require_close(ya, yb, 1e-6f);
    REQUIRE(cops::softmax_backward(yb.data(), dy.data(), dxa.data(), rows, cols, 1.0f, false, nullptr) == cuda::kOk);
    REQUIRE(cpu.softmax_backward(&cpu, yb.data(), dy.data(), dxb.data(), rows, cols) == DSCPP_OK);
    require_close(dxa, dxb, 1e-5f);

    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = r == 1 ? -1 : int32_t((r * 7) % cols);
    std::vector<double> loss(static_cast<size_t>(rows));
    std::vector<int32_t> hit(static_cast<size_t>(rows));
    REQUIRE(cops::cross_entropy_forward(x.data(), targets.data(), ya.data(), loss.data(), hit.data(), rows, cols,
                                        nullptr) == cuda::kOk);
    double cpu_loss = 0;
    int64_t counted = 0, correct = 0;
    REQUIRE(cpu.cross_entropy_forward(&cpu, x.data(), targets.data(), yb.data(), rows, cols, &cpu_loss, &counted,
                                      &correct) == DSCPP_OK);
    require_close(ya, yb, 1e-6f);
    double sum = 0;
    int64_t hits = 0;
    for (int64_t r = 0; r < rows; ++r) sum += loss[size_t(r)], hits += hit[size_t(r)];
    CHECK(sum == Approx(cpu_loss).epsilon(1e-6));
    CHECK(hits == correct);
  }
}

TEST_CASE("CUDA causal softmax (host stub) matches the CPU table, masked entries exactly 0", "[cuda_ops]") {
  const int64_t groups = 3, T = 7;
  const auto s = ops_check::rnd(groups * T * T, 10, -4.0f, 4.0f), dp = ops_check::rnd(groups * T * T, 11, -2.0f, 2.0f);
  std::vector<float> pa(s.size()), pb(s.size()), da(s.size()), db(s.size());
  REQUIRE(cops::softmax_forward(s.data(), pa.data(), groups * T, T, 0.5f, true, nullptr) == cuda::kOk);
  REQUIRE(cpu.causal_softmax_forward(&cpu, s.data(), pb.data(), groups, T, 0.5f) == DSCPP_OK);
  require_close(pa, pb, 1e-6f);
  for (int64_t r = 0; r < groups * T; ++r)
    for (int64_t c = r % T + 1; c < T; ++c) REQUIRE(pa[size_t(r * T + c)] == 0.0f);
  REQUIRE(cops::softmax_backward(pb.data(), dp.data(), da.data(), groups * T, T, 0.5f, true, nullptr) == cuda::kOk);
  REQUIRE(cpu.causal_softmax_backward(&cpu, pb.data(), dp.data(), db.data(), groups, T, 0.5f) == DSCPP_OK);
  require_close(da, db, 1e-5f);
}

TEST_CASE("CUDA fill/add/axpy/scale/relu and the linear epilogue (host stub) equal the CPU table", "[cuda_ops]") {
  const int64_t rows = 211, cols = 333, n = rows * cols;  // enough for four quads per thread
  const auto a = ops_check::rnd(n, 12, -2.0f, 2.0f), b = ops_check::rnd(n, 13, -2.0f, 2.0f),
             bias = ops_check::rnd(cols, 14, -2.0f, 2.0f);
  std::vector<float> x(a.size()), y(a.size());
  REQUIRE(cops::fill(x.data(), 0.5f, n, nullptr) == cuda::kOk);
  REQUIRE(cpu.fill(&cpu, y.data(), 0.5f, n) == DSCPP_OK);
  REQUIRE(x == y);
  REQUIRE(cops::add(a.data(), b.data(), x.data(), n, nullptr) == cuda::kOk);
  REQUIRE(cpu.add(&cpu, a.data(), b.data(), y.data(), n) == DSCPP_OK);
  REQUIRE(x == y);
  REQUIRE(cops::axpy(0.3f, a.data(), x.data(), n, nullptr) == cuda::kOk);
  REQUIRE(cpu.axpy(&cpu, 0.3f, a.data(), y.data(), n) == DSCPP_OK);
  require_close(x, y, 1e-6f);  // the CPU may contract a·x + y into one FMA
  REQUIRE(cops::scale(-2.0f, x.data(), n, nullptr) == cuda::kOk);
  REQUIRE(cpu.scale(&cpu, -2.0f, y.data(), n) == DSCPP_OK);
  require_close(x, y, 1e-6f);
  REQUIRE(cops::relu_forward(a.data(), x.data(), n, nullptr) == cuda::kOk);
  REQUIRE(cpu.relu_forward(&cpu, a.data(), y.data(), n) == DSCPP_OK);
  REQUIRE(x == y);
  // Epilogue with bias only equals bias_add; with GELU it equals gelu of the sum.
  x = a, y = a;
  std::vector<float> gx(a.size()), gy(a.size());
  REQUIRE(cops::bias_residual_gelu(x.data(), bias.data(), nullptr, gx.data(), rows, cols, nullptr) == cuda::kOk);
  REQUIRE(cpu.bias_add(&cpu, y.data(), bias.data(), rows, cols) == DSCPP_OK);
  REQUIRE(x == y);
  REQUIRE(cpu.gelu_forward(&cpu, y.data(), gy.data(), n) == DSCPP_OK);
  require_close(gx, gy, 1e-6f);
}
