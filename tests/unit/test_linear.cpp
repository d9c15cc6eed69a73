// The linear-layer ops (model.h ABI 2) against fp64 references written here from the contract:
// y = x·Wᵀ + bias + residual, gelu_out = gelu(y); backward dW += dyᵀ·x, dbias += Σ dy,
// dx = dy·W (⊙ gelu'(gelu_pre)). Small shapes also check the backward against central finite
// differences of L = Σ w·y; larger ones cross the GEMM's blocking and thread splits (including
// the column split, where the fused bias gradient must be counted once). Tolerances as in
// test_ops.cpp: 1e-4 of the largest magnitude plus 1e-4 relative.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <vector>

namespace {

using namespace ops_check;
using dscpp::kernels::GemmBackend;

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {  // derivative of gelu_ref, by hand
  const double c = std::sqrt(2 / std::numbers::pi), u = c * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

struct Dims {
  int64_t rows, in, out;
};

// y = x·Wᵀ + bias + residual (bias, residual may be empty).
DVec linear_ref(const Dims& d, const DVec& x, const DVec& W, const DVec& bias, const DVec& residual) {
  DVec y(d.rows * d.out);
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t o = 0; o < d.out; ++o) {
      double acc = bias.empty() ? 0.0 : bias[o];
      if (!residual.empty()) acc += residual[r * d.out + o];
      for (int64_t i = 0; i < d.in; ++i) acc += x[r * d.in + i] * W[o * d.in + i];
      y[r * d.out + o] = acc;
    }
  return y;
}



// Every backend × thread count, with the description in the failure message.
template <class Body>
void for_configs(Body&& body) {
  Restore restore;
  for (GemmBackend be : backends())
    for (int threads : {1, 2}) {
      dscpp::kernels::set_gemm_backend(be);
      dscpp::kernels::set_cpu_threads(threads);
      INFO(dscpp::kernels::gemm_description() << ", " << threads << " threads");
      body();
    }
}

double max_abs(const DVec& v) {
  double m = 1.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

const Dims kDims[] = {{1, 1, 1}, {7, 17, 33}, {130, 300, 600}, {300, 700, 40}};

}  // namespace

TEST_CASE("linear_forward: bias, residual (separate or in place), gelu_out against fp64", "[ops][linear]") {
  for (const Dims& d : kDims)
    for (int variant = 0; variant < 4; ++variant)
      for_configs([&] {
        // 0: plain; 1: bias; 2: bias + separate residual + gelu; 3: residual in place (y += …)
        const bool with_bias = variant >= 1, with_gelu = variant == 2;
        const Vec x = rnd(d.rows * d.in, 71), W = rnd(d.out * d.in, 72), b = rnd(d.out, 73),
                  res = rnd(d.rows * d.out, 74);
        Vec y = variant == 3 ? res : Vec(d.rows * d.out, kNaN), g(d.rows * d.out, kNaN);
        const void* residual = variant == 2 ? res.data() : variant == 3 ? y.data() : nullptr;
        INFO("rows " << d.rows << " in " << d.in << " out " << d.out << " variant " << variant);
        REQUIRE(ops().linear_forward(O(), x.data(), W.data(), with_bias ? b.data() : nullptr, residual, y.data(),
                                     with_gelu ? g.data() : nullptr, d.rows, d.in, d.out) == DSCPP_OK);
        const DVec ref = linear_ref(d, to_d(x), to_d(W), with_bias ? to_d(b) : DVec{},
                                    variant >= 2 ? to_d(res) : DVec{});
        check_close(y, ref, 1e-4 * max_abs(ref), 1e-4);
        if (with_gelu) {
          DVec gref(ref.size());
          for (size_t i = 0; i < ref.size(); ++i) gref[i] = gelu_ref(ref[i]);
          check_close(g, gref, 1e-4 * max_abs(gref), 1e-4);
        }
      });
}

TEST_CASE("linear_backward: accumulating dW and dbias, dx with and without the GELU, against fp64",
          "[ops][linear]") {
  for (const Dims& d : kDims)
    for (bool through_gelu : {false, true})
      for_configs([&] {
        const Vec dy = rnd(d.rows * d.out, 81), x = rnd(d.rows * d.in, 82), W = rnd(d.out * d.in, 83);
        const Vec dW0 = rnd(d.out * d.in, 84), db0 = rnd(d.out, 85), pre = rnd(d.rows * d.in, 86, -3, 3);
        Vec dW = dW0, db = db0, dx(d.rows * d.in, kNaN);
        INFO("rows " << d.rows << " in " << d.in << " out " << d.out << " through_gelu " << through_gelu);
        REQUIRE(ops().linear_backward(O(), dy.data(), x.data(), W.data(), dW.data(), db.data(), dx.data(),
                                      through_gelu ? pre.data() : nullptr, d.rows, d.in, d.out) == DSCPP_OK);
        DVec dW_ref(dW0.begin(), dW0.end()), db_ref(db0.begin(), db0.end()), dx_ref(d.rows * d.in, 0.0);
        for (int64_t r = 0; r < d.rows; ++r)
          for (int64_t o = 0; o < d.out; ++o) {
            db_ref[o] += dy[r * d.out + o];
            for (int64_t i = 0; i < d.in; ++i) {
              dW_ref[o * d.in + i] += double(dy[r * d.out + o]) * x[r * d.in + i];
              dx_ref[r * d.in + i] += double(dy[r * d.out + o]) * W[o * d.in + i];
            }
          }
        if (through_gelu)
          for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] *= gelu_grad_ref(pre[i]);
        check_close(dW, dW_ref, 1e-4 * max_abs(dW_ref), 1e-4);
        check_close(db, db_ref, 1e-4 * max_abs(db_ref), 1e-4);
        check_close(dx, dx_ref, 1e-4 * max_abs(dx_ref), 1e-4);
      });
}

TEST_CASE("linear: backward against finite differences of the forward", "[ops][linear]") {
  // L = Σ w·y with y = linear(h), h = gelu(pre) (so dx through the GELU is d L / d pre).
  const Dims d{5, 9, 6};
  const Vec pre = rnd(d.rows * d.in, 91, -2, 2), W = rnd(d.out * d.in, 92), b = rnd(d.out, 93),
            w = rnd(d.rows * d.out, 94);
  auto loss = [&](const DVec& p, const DVec& Wd, const DVec& bd) {
    DVec h(p.size());
    for (size_t i = 0; i < p.size(); ++i) h[i] = gelu_ref(p[i]);
    return dot(to_d(w), linear_ref(d, h, Wd, bd, {}));
  };
  const DVec fd_pre = fd_grad([&](const DVec& v) { return loss(v, to_d(W), to_d(b)); }, to_d(pre));
  const DVec fd_W = fd_grad([&](const DVec& v) { return loss(to_d(pre), v, to_d(b)); }, to_d(W));
  const DVec fd_b = fd_grad([&](const DVec& v) { return loss(to_d(pre), to_d(W), v); }, to_d(b));
  for_configs([&] {
    Vec y(d.rows * d.out), h(d.rows * d.in), hpre(d.rows * d.in);
    // h = gelu(pre) through the op itself: an identity layer with gelu_out.
    Vec eye(d.in * d.in, 0.0f);
    for (int64_t i = 0; i < d.in; ++i) eye[i * d.in + i] = 1.0f;
    REQUIRE(ops().linear_forward(O(), pre.data(), eye.data(), nullptr, nullptr, hpre.data(), h.data(), d.rows, d.in,
                                 d.in) == DSCPP_OK);
    Vec dW(d.out * d.in, 0.0f), db(d.out, 0.0f), dpre(d.rows * d.in);
    REQUIRE(ops().linear_backward(O(), w.data(), h.data(), W.data(), dW.data(), db.data(), dpre.data(), hpre.data(),
                                  d.rows, d.in, d.out) == DSCPP_OK);
    check_grad(dpre, fd_pre);
    check_grad(dW, fd_W);
    check_grad(db, fd_b);
  });
}

TEST_CASE("linear: empty sizes and argument checks", "[ops][linear]") {
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(16, 1.0f), b(16, 1.0f), c(16, 0.5f), db(4, 0.25f);
  CHECK(ops().linear_forward(O(), a.data(), b.data(), nullptr, nullptr, c.data(), nullptr, -1, 2, 2) == E);
  CHECK(ops().linear_forward(O(), nullptr, b.data(), nullptr, nullptr, c.data(), nullptr, 2, 2, 2) == E);
  CHECK(ops().linear_backward(O(), a.data(), a.data(), b.data(), nullptr, nullptr, nullptr, nullptr, 2, 2, 2) == E);
  // No rows: dW and dbias keep their values; no inputs: dx = 0 and dbias still sums dy.
  Vec dW = c;
  CHECK(ops().linear_backward(O(), nullptr, nullptr, b.data(), dW.data(), db.data(), nullptr, nullptr, 0, 2, 2) ==
        DSCPP_OK);
  CHECK(dW == c);
  CHECK(db == Vec(4, 0.25f));
  Vec dx(4, kNaN);
  CHECK(ops().linear_backward(O(), a.data(), nullptr, nullptr, nullptr, db.data(), dx.data(), nullptr, 2, 0, 2) ==
        DSCPP_OK);
  CHECK(db[0] == 2.25f);
  CHECK(db[1] == 2.25f);
}

TEST_CASE("linear and attention on the AVX-512 kernel give the same bits for any thread count",
          "[ops][linear][attention][threads]") {
  if (backends().size() < 2) return;  // no AVX-512 on this CPU
  Restore restore;
  dscpp::kernels::set_gemm_backend(GemmBackend::avx512);
  // Row split (out ≥ in) and column split (in > out, where one thread owns the bias gradient).
  for (const Dims& d : {Dims{300, 200, 600}, Dims{300, 700, 40}}) {
    const Vec dy = rnd(d.rows * d.out, 101), x = rnd(d.rows * d.in, 102), W = rnd(d.out * d.in, 103);
    const Vec pre = rnd(d.rows * d.in, 104), b = rnd(d.out, 105);
    auto run = [&](int threads) {
      dscpp::kernels::set_cpu_threads(threads);
      Vec y(d.rows * d.out), g(d.rows * d.out), dW(d.out * d.in, 0.5f), db(d.out, 0.25f), dx(d.rows * d.in);
      REQUIRE(ops().linear_forward(O(), x.data(), W.data(), b.data(), nullptr, y.data(), g.data(), d.rows, d.in,
                                   d.out) == DSCPP_OK);
      REQUIRE(ops().linear_backward(O(), dy.data(), x.data(), W.data(), dW.data(), db.data(), dx.data(), pre.data(),
                                    d.rows, d.in, d.out) == DSCPP_OK);
      return std::vector<Vec>{y, g, dW, db, dx};
    };
    const auto one = run(1);
    CHECK(run(2) == one);
    CHECK(run(3) == one);
  }
  const int64_t B = 3, T = 40, H = 2, D = 24;
  const Vec qkv = rnd(B * T * 3 * H * D, 106), dout = rnd(B * T * H * D, 107);
  auto attend = [&](int threads) {
    dscpp::kernels::set_cpu_threads(threads);
    Vec probs(B * H * T * T), out(B * T * H * D), dqkv(qkv.size()), ws(B * H * T * T);
    REQUIRE(ops().causal_attention_forward(O(), qkv.data(), probs.data(), out.data(), B, T, H, D, 0.3f) == DSCPP_OK);
    REQUIRE(ops().causal_attention_backward(O(), qkv.data(), probs.data(), dout.data(), dqkv.data(), ws.data(), B, T,
                                            H, D, 0.3f) == DSCPP_OK);
    return std::vector<Vec>{probs, out, dqkv};
  };
  const auto one = attend(1);
  CHECK(attend(2) == one);
  CHECK(attend(3) == one);
}
