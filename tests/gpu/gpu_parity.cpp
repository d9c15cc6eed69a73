// The GPU suite (`meson test --suite gpu`): every CUDA kernel against its CPU twin on a real
// device, through the CUDA device (device/cuda_device.h). tests/gpu/gpu_suite.sh runs it only when
// dscpp-cuda-check finds a usable device and otherwise exits 77 (Meson's "skipped") with the
// reason, as on the CI machines, which have none: there this suite has never run. Tolerances:
// bit-identical where the shared element math is evaluated in the same order (casts, amp,
// Adam/AdamW/SGD/Adagrad/Lion, quantization, elementwise ops), fp32 rounding of differently ordered
// sums otherwise (row ops, GEMMs, LAMB's norms).
#include "build_config.h"
#include "device/cuda_device.h"
#include "device/device_select.h"
#include "kernels/cpu/amp/amp_cpu.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "kernels/cpu/quant/quant_cpu.h"
#include "kernels/cuda/amp.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/lt_linear.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/quant.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

using namespace dscpp;

namespace {

// The rank's device (LOCAL_RANK among the visible ones), created on first use.
CudaDevice* device() {
  static std::unique_ptr<CudaDevice> d = make_cuda_device_from_env(comm_backend_setting(""));
  return d.get();
}

std::vector<float> randoms(int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// A device copy of a host vector, read back with get().
template <class T>
struct On {
  DeviceBuffer buf;
  size_t n;
  explicit On(const std::vector<T>& h)
      : buf(*device(), std::max<size_t>(h.size(), 1) * sizeof(T), MemCategory::buffers), n(h.size()) {
    if (n) device()->copy_from_host(buf.data(), h.data(), n * sizeof(T));
  }
  T* p() { return static_cast<T*>(buf.data()); }
  std::vector<T> get() {
    std::vector<T> h(n);
    device()->synchronize();
    if (n) device()->copy_to_host(h.data(), buf.data(), n * sizeof(T));
    return h;
  }
};

std::vector<float> zeros(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
void require_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

const int64_t kSizes[] = {1, 5, 4099, 1 << 20};

}  // namespace

TEST_CASE("CUDA device: accounting, cache reuse, streams", "[gpu]") {
  const auto before = device()->stats();
  void* p = device()->allocate(1000, MemCategory::grads, true);
  CHECK(device()->stats().current[size_t(MemCategory::grads)] == before.current[size_t(MemCategory::grads)] + 1000);
  device()->release(p, 1000, MemCategory::grads);
  CHECK(device()->cached_bytes() >= 1024);
  void* q = device()->allocate(900, MemCategory::params);
  CHECK(q == p);  // the cached block
  device()->release(q, 900, MemCategory::params);
  device()->comm_waits_for_compute();
  device()->compute_waits_for_comm();
  device()->synchronize();
  device()->set_limit(device()->stats().total_current + 100);
  CHECK_THROWS_AS(device()->allocate(1 << 20, MemCategory::activations), OutOfDeviceMemory);
  device()->set_limit(0);
}

TEST_CASE("amp kernels equal the CPU loops bit for bit", "[gpu]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    const auto x = randoms(n, 1), g = randoms(n, 2);
    std::vector<uint16_t> cpu(x.size());
    kernels::store_from_f32(cpu.data(), DType::bf16, x.data(), n);
    On<float> dx(x), dg(g);
    On<uint16_t> d16(std::vector<uint16_t>(x.size()));
    On<int32_t> flag(std::vector<int32_t>{0});
    const auto s = device()->compute_stream();
    DSCPP_CUDA_CHECK(cuda::convert_into(d16.p(), hd::Storage::bf16, dx.p(), hd::Storage::f32, n, s));
    REQUIRE(d16.get() == cpu);
    kernels::accumulate_into(cpu.data(), DType::bf16, g.data(), n);
    DSCPP_CUDA_CHECK(cuda::accumulate_into(d16.p(), hd::Storage::bf16, dg.p(), n, s));
    REQUIRE(d16.get() == cpu);
    kernels::scale_inplace(cpu.data(), DType::bf16, 0.25f, n);
    DSCPP_CUDA_CHECK(cuda::unscale_check(d16.p(), hd::Storage::bf16, 0.25f, n, flag.p(), s));
    REQUIRE(d16.get() == cpu);
    CHECK(flag.get()[0] == 0);
    std::vector<double> none(cuda::sum_squares_blocks(n));
    On<double> partials(none);
    DSCPP_CUDA_CHECK(cuda::sum_squares_partials(dx.p(), hd::Storage::f32, n, partials.p(), s));
    double total = 0;
    for (double v : partials.get()) total += v;
    CHECK(total == Approx(kernels::sum_squares(x.data(), DType::f32, n)).epsilon(1e-12));
  }
}

TEST_CASE("multi-tensor Adam, Lion and LAMB equal the CPU loops", "[gpu]") {
  const std::vector<int64_t> sizes = {1, 4099, 3 * 65536 + 7, 100};
  std::vector<std::unique_ptr<On<float>>> w, g, m, v;
  std::vector<std::vector<float>> cw, cg, cm, cv;
  for (size_t k = 0; k < sizes.size(); ++k) {
    cw.push_back(randoms(sizes[k], 10 + uint32_t(k)));
    cg.push_back(randoms(sizes[k], 20 + uint32_t(k)));
    cm.push_back(randoms(sizes[k], 30 + uint32_t(k), -0.1f, 0.1f));
    cv.push_back(randoms(sizes[k], 40 + uint32_t(k), 0.0f, 0.01f));
    w.push_back(std::make_unique<On<float>>(cw.back()));
    g.push_back(std::make_unique<On<float>>(cg.back()));
    m.push_back(std::make_unique<On<float>>(cm.back()));
    v.push_back(std::make_unique<On<float>>(cv.back()));
  }
  std::vector<float*> pw, pm, pv;
  std::vector<const void*> pg;
  for (size_t k = 0; k < sizes.size(); ++k)
    pw.push_back(w[k]->p()), pg.push_back(g[k]->p()), pm.push_back(m[k]->p()), pv.push_back(v[k]->p());
  cuda::TensorLists t;
  t.count = int(sizes.size());
  t.sizes = sizes.data();
  t.w = pw.data(), t.g = pg.data(), t.s1 = pm.data(), t.s2 = pv.data();
  const auto adam = kernels::adam_coeffs(0.01, 0.9, 0.999, 1e-8, 0.1, true, true, 3);
  DSCPP_CUDA_CHECK(cuda::adam_step(t, adam, device()->compute_stream()));
  const auto lion = kernels::lion_coeffs(0.01, 0.9, 0.99, 0.1);
  DSCPP_CUDA_CHECK(cuda::lion_step(t, lion, device()->compute_stream()));
  for (size_t k = 0; k < sizes.size(); ++k) {
    kernels::cpu::adam_step(cw[k].data(), cg[k].data(), cm[k].data(), cv[k].data(), sizes[k], adam);
    kernels::cpu::lion_step(cw[k].data(), cg[k].data(), cm[k].data(), sizes[k], lion);
    REQUIRE(same_bits(w[k]->get(), cw[k]));
    REQUIRE(same_bits(m[k]->get(), cm[k]));
    REQUIRE(same_bits(v[k]->get(), cv[k]));
  }
  const auto lamb = kernels::lamb_coeffs(0.9, 0.999, 1e-6, 0.01, false);
  const double step = kernels::lamb_step_size(0.01, 0.9, 0.999, true, 2);
  On<double> scratch(std::vector<double>(size_t(cuda::lamb_scratch_doubles(t))));
  DSCPP_CUDA_CHECK(cuda::lamb_step(t, lamb, step, 0.01, 10.0, scratch.p(), device()->compute_stream()));
  for (size_t k = 0; k < sizes.size(); ++k) {
    kernels::cpu::lamb_step(cw[k].data(), cg[k].data(), cm[k].data(), cv[k].data(), {0, sizes[k]}, lamb, step, 0.01,
                            10.0);
    require_close(w[k]->get(), cw[k], 1e-6f);
  }
}

TEST_CASE("int8 quantization equals the CPU loop bit for bit", "[gpu]") {
  const int64_t n = 8000 * 8, groups = 8;
  const auto x = randoms(n, 50, -4.0f, 4.0f);
  std::vector<int8_t> q(x.size());
  std::vector<float> s(groups), back(x.size());
  kernels::quantize_int8_groups(x.data(), n, groups, q.data(), s.data());
  kernels::dequantize_int8_groups(q.data(), s.data(), n, groups, back.data());
  On<float> dx(x), ds(s), dback(back);
  On<int8_t> dq(q);
  DSCPP_CUDA_CHECK(cuda::quantize_int8_groups(dx.p(), n, groups, dq.p(), ds.p(), device()->compute_stream()));
  DSCPP_CUDA_CHECK(cuda::dequantize_int8_groups(dq.p(), ds.p(), n, groups, dback.p(), device()->compute_stream()));
  REQUIRE(dq.get() == q);
  REQUIRE(same_bits(ds.get(), s));
  REQUIRE(same_bits(dback.get(), back));
}

TEST_CASE("qgZ int4 quantization equals the CPU loop bit for bit", "[gpu]") {
  // qgZ's group of 256, and a group of an odd number of pairs wider than the block.
  for (auto [n, group] : {std::pair<int64_t, int64_t>{256 * 4099, 256}, {2 * 1027 * 5, 2 * 1027}}) {
    CAPTURE(n, group);
    const auto x = randoms(n, 51, -4.0f, 4.0f), acc = randoms(n, 52);
    std::vector<uint16_t> x16(x.size());
    kernels::store_from_f32(x16.data(), DType::bf16, x.data(), n);
    std::vector<uint8_t> q(static_cast<size_t>(n / 2));
    std::vector<float> s(static_cast<size_t>(n / group)), sum = acc;
    kernels::quantize_int4_groups(x16.data(), DType::bf16, n, group, q.data(), s.data());
    kernels::dequantize_int4_add(q.data(), s.data(), n, group, sum.data());
    On<uint16_t> dx(x16);
    On<uint8_t> dq(std::vector<uint8_t>(q.size()));
    On<float> ds(zeros(n / group)), dsum(acc);
    const auto st = device()->compute_stream();
    DSCPP_CUDA_CHECK(cuda::quantize_int4_groups(dx.p(), hd::Storage::bf16, n, group, dq.p(), ds.p(), st));
    DSCPP_CUDA_CHECK(cuda::dequantize_int4_add(dq.p(), ds.p(), n, group, dsum.p(), st));
    REQUIRE(dq.get() == q);
    REQUIRE(same_bits(ds.get(), s));
    REQUIRE(same_bits(dsum.get(), sum));
  }
}

TEST_CASE("the CUDA ops table matches the CPU table", "[gpu]") {
  cuda::OpsContext ctx(device()->compute_stream());
  const dscpp_ops g = cuda::cuda_ops(DSCPP_F32, &ctx);
  const dscpp_ops c = kernels::cpu_ops(DSCPP_F32);
  const int64_t rows = 33, cols = 300;
  const auto x = randoms(rows * cols, 60), gamma = randoms(cols, 61), beta = randoms(cols, 62);
  On<float> dx(x), dgm(gamma), dbt(beta), dy(zeros(x.size())), dmean(zeros(rows)), drstd(zeros(rows));
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  REQUIRE(g.layernorm_forward(&g, dx.p(), dgm.p(), dbt.p(), dy.p(), dmean.p(), drstd.p(), rows, cols, 1e-5f) ==
          DSCPP_OK);
  REQUIRE(c.layernorm_forward(&c, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                              1e-5f) == DSCPP_OK);
  require_close(dy.get(), y, 2e-5f);
  REQUIRE(g.gelu_forward(&g, dx.p(), dy.p(), rows * cols) == DSCPP_OK);
  REQUIRE(c.gelu_forward(&c, x.data(), y.data(), rows * cols) == DSCPP_OK);
  require_close(dy.get(), y, 1e-6f);
  REQUIRE(g.softmax_forward(&g, dx.p(), dy.p(), rows, cols) == DSCPP_OK);
  REQUIRE(c.softmax_forward(&c, x.data(), y.data(), rows, cols) == DSCPP_OK);
  require_close(dy.get(), y, 1e-6f);
  {  // dropout: the same mask as the CPU table's, the documented one, over 4M elements and in place
    const auto big = randoms(int64_t{1} << 22, 67);
    On<float> dbig(big), dd(zeros(int64_t(big.size())));
    std::vector<float> cd(big.size());
    REQUIRE(g.dropout(&g, dbig.p(), dd.p(), int64_t(big.size()), 0.3f, 0xABCDEFull) == DSCPP_OK);
    REQUIRE(c.dropout(&c, big.data(), cd.data(), int64_t(big.size()), 0.3f, 0xABCDEFull) == DSCPP_OK);
    CHECK(same_bits(dd.get(), cd));
    CHECK(same_bits(cd, ops_check::dropout_ref(big, 0.3f, 0xABCDEFull)));
    REQUIRE(g.dropout(&g, dbig.p(), dbig.p(), int64_t(big.size()), 0.3f, 0xABCDEFull) == DSCPP_OK);
    CHECK(same_bits(dbig.get(), cd));
  }

  // GEMM C = A·Bᵀ and a linear layer with bias, residual in place and GELU.
  const int64_t M = 33, N = 65, K = 300;
  const auto W = randoms(N * K, 63), bias = randoms(N, 64), res = randoms(M * N, 65);
  On<float> dW(W), dbias(bias), dout(res), dgelu(zeros(M * N));
  std::vector<float> out = res, gelu(M * N);
  REQUIRE(g.linear_forward(&g, dx.p(), dW.p(), dbias.p(), dout.p(), dout.p(), dgelu.p(), M, K, N) == DSCPP_OK);
  REQUIRE(c.linear_forward(&c, x.data(), W.data(), bias.data(), out.data(), out.data(), gelu.data(), M, K, N) ==
          DSCPP_OK);
  require_close(dout.get(), out, 1e-4f);
  require_close(dgelu.get(), gelu, 1e-4f);

  // Cross-entropy with an ignored row and a bad target.
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = r == 3 ? -1 : int32_t(r * 5 % cols);
  On<int32_t> dt(targets);
  double gl = 0, cl = 0;
  int64_t gc = 0, cc = 0, gk = 0, ck = 0;
  REQUIRE(g.cross_entropy_forward(&g, dx.p(), dt.p(), dy.p(), rows, cols, &gl, &gc, &gk) == DSCPP_OK);
  REQUIRE(c.cross_entropy_forward(&c, x.data(), targets.data(), y.data(), rows, cols, &cl, &cc, &ck) == DSCPP_OK);
  CHECK(gl == Approx(cl).epsilon(1e-6));
  CHECK(gc == cc);
  CHECK(gk == ck);
  targets[0] = int32_t(cols);
  On<int32_t> bad(targets);
  CHECK(g.cross_entropy_forward(&g, dx.p(), bad.p(), dy.p(), rows, cols, &gl, &gc, &gk) == DSCPP_E_INVALID_ARGUMENT);

  // Fused causal attention.
  const int64_t B = 2, T = 17, H = 3, D = 8, C3 = 3 * H * D;
  const auto qkv = randoms(B * T * C3, 66);
  On<float> dqkv(qkv), dprobs(zeros(B * H * T * T)), dao(zeros(B * T * H * D));
  std::vector<float> probs(B * H * T * T), ao(B * T * H * D);
  REQUIRE(g.causal_attention_forward(&g, dqkv.p(), dprobs.p(), dao.p(), B, T, H, D, 0.35f) == DSCPP_OK);
  REQUIRE(c.causal_attention_forward(&c, qkv.data(), probs.data(), ao.data(), B, T, H, D, 0.35f) == DSCPP_OK);
  require_close(dprobs.get(), probs, 1e-5f);
  require_close(dao.get(), ao, 1e-5f);

  // T5's attention (ABI 8) at a 512-token training shape, encoder (bidirectional, key lengths) and
  // decoder (causal): the bias a gather (same bits), its gradient and the softmax differently summed.
  const int64_t TB = 4, TH = 8, TT = 512, TN = TH * TT * TT, NB = 32;
  const auto table = randoms(NB * TH, 70), gbias = randoms(TN, 71), scores = randoms(TB * TN, 72, -4.0f, 4.0f);
  const std::vector<int32_t> lens = {512, 300, 1, 0};
  On<float> drt(table), drel(zeros(TN)), dgbias(gbias);
  On<int32_t> dlens(lens);
  for (int32_t bidirectional : {1, 0}) {
    CAPTURE(bidirectional);
    std::vector<float> bias(TN), dt(NB * TH), p(scores.size());
    On<float> ddt(dt), dp(scores);
    REQUIRE(g.relative_bias_forward(&g, drt.p(), drel.p(), TH, TT, TT, 0, bidirectional, NB, 128) == DSCPP_OK);
    REQUIRE(c.relative_bias_forward(&c, table.data(), bias.data(), TH, TT, TT, 0, bidirectional, NB, 128) == DSCPP_OK);
    CHECK(same_bits(drel.get(), bias));
    REQUIRE(g.relative_bias_backward(&g, dgbias.p(), ddt.p(), TH, TT, TT, 0, bidirectional, NB, 128) == DSCPP_OK);
    REQUIRE(c.relative_bias_backward(&c, gbias.data(), dt.data(), TH, TT, TT, 0, bidirectional, NB, 128) == DSCPP_OK);
    CHECK(ops_check::normwise(ddt.get(), dt) <= ops_check::sum_tol(TT * TT));
    const int32_t* dl = bidirectional ? dlens.p() : nullptr;  // in place on the device
    REQUIRE(g.masked_softmax_forward(&g, dp.p(), drel.p(), dl, 1, dp.p(), TB, TH, TT, TT, !bidirectional) == DSCPP_OK);
    REQUIRE(c.masked_softmax_forward(&c, scores.data(), bias.data(), bidirectional ? lens.data() : nullptr, 1, p.data(),
                                     TB, TH, TT, TT, !bidirectional) == DSCPP_OK);
    CHECK(ops_check::normwise(dp.get(), p) <= ops_check::sum_tol(TT));
  }
}

using ops_check::normwise;
using ops_check::sum_tol;

// The kernels that make the GPU step fast, on the gpt example's shapes: column sums over 8192
// rows in chunks (bias, layer-norm γ/β), the embedding gradient grouped by id (equal bits: the
// same adds in the same order), attention without T² (blocks of 128 queries on cuBLAS against
// the CPU's exact softmax; T = 600 is five blocks, the last seeing every key).
TEST_CASE("column sums, embedding gradient and flash attention match the CPU table at training sizes", "[gpu]") {
  cuda::OpsContext ctx(device()->compute_stream());
  const dscpp_ops g = cuda::cuda_ops(DSCPP_F32, &ctx);
  const dscpp_ops c = kernels::cpu_ops(DSCPP_F32);
  const int64_t rows = 8192, cols = 768;
  const auto dyv = randoms(rows * cols, 80), xv = randoms(rows * cols, 81), gamma = randoms(cols, 82);
  On<float> dy(dyv), x(xv), dg(gamma), db(zeros(cols)), dgam(zeros(cols)), dbeta(zeros(cols)), dxg(zeros(rows * cols));
  std::vector<float> b(cols), gam(cols), beta(cols), dxc(rows * cols), mean(rows), rstd(rows);
  REQUIRE(g.bias_grad(&g, dy.p(), db.p(), rows, cols) == DSCPP_OK);
  REQUIRE(c.bias_grad(&c, dyv.data(), b.data(), rows, cols) == DSCPP_OK);
  CHECK(normwise(db.get(), b) <= sum_tol(rows));
  for (int64_t r = 0; r < rows; ++r)
    mean[size_t(r)] = 0.01f * float(r % 13), rstd[size_t(r)] = 0.9f + 0.02f * float(r % 7);
  On<float> dmean(mean), drstd(rstd);
  REQUIRE(g.layernorm_backward(&g, dy.p(), x.p(), dg.p(), dmean.p(), drstd.p(), dxg.p(), dgam.p(), dbeta.p(), rows,
                               cols) == DSCPP_OK);
  REQUIRE(c.layernorm_backward(&c, dyv.data(), xv.data(), gamma.data(), mean.data(), rstd.data(), dxc.data(),
                               gam.data(), beta.data(), rows, cols) == DSCPP_OK);
  CHECK(normwise(dgam.get(), gam) <= sum_tol(rows));
  CHECK(normwise(dbeta.get(), beta) <= sum_tol(rows));

  // GPT-2's vocabulary, ids with repeats (a few hundred distinct).
  const int64_t vocab = 50257;
  std::vector<int32_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i) ids[size_t(i)] = int32_t((i * 7919 % 331) * 151 % vocab);
  const auto table = randoms(vocab * cols, 83);
  On<int32_t> did(ids);
  On<float> dtable(table);
  std::vector<float> ctable = table;
  REQUIRE(g.embedding_backward(&g, did.p(), dy.p(), dtable.p(), rows, vocab, cols) == DSCPP_OK);
  REQUIRE(c.embedding_backward(&c, ids.data(), dyv.data(), ctable.data(), rows, vocab, cols) == DSCPP_OK);
  CHECK(same_bits(dtable.get(), ctable));

  // The flash entries on both of the table's own paths: blockwise (cuBLAS per block of queries)
  // and tiled (ops_flash.cu, DSCPP_FLASH_ATTENTION=tiled: both instantiations; D = 48 leaves a
  // quarter of the 64-wide tiles zero).
  for (bool tiled : {false, true})
    for (int64_t D : {32, 48, 64, 128}) {
      CAPTURE(tiled, D);
      ctx.tiled_attention = tiled;
      const int64_t B = 2, T = 600, H = 4, C = H * D, n = B * T * C, lrows = B * H * T;
      const float scale = 1.0f / std::sqrt(float(D));
      const auto qkv = randoms(3 * n, 84, -1.5f, 1.5f), dout = randoms(n, 85);
      On<float> dq(qkv), ddo(dout), dout_g(zeros(n)), dlse(zeros(lrows)), ddq(zeros(3 * n)), dws(zeros(lrows));
      std::vector<float> out(n), lse(lrows), dqkv(3 * n), ws(lrows);
      REQUIRE(g.flash_attention_forward(&g, dq.p(), dlse.p(), dout_g.p(), B, T, H, D, scale) == DSCPP_OK);
      REQUIRE(c.flash_attention_forward(&c, qkv.data(), lse.data(), out.data(), B, T, H, D, scale) == DSCPP_OK);
      const double tol = sum_tol(std::max(T, D));
      CHECK(normwise(dout_g.get(), out) <= tol);
      CHECK(normwise(dlse.get(), lse) <= tol);
      REQUIRE(g.flash_attention_backward(&g, dq.p(), dout_g.p(), dlse.p(), ddo.p(), ddq.p(), dws.p(), B, T, H, D,
                                         scale) == DSCPP_OK);
      REQUIRE(c.flash_attention_backward(&c, qkv.data(), out.data(), lse.data(), dout.data(), dqkv.data(), ws.data(), B,
                                         T, H, D, scale) == DSCPP_OK);
      CHECK(normwise(ddq.get(), dqkv) <= 2 * tol);
    }

  // Masked (packed documents: first keys restart at 0, 100, 129, 400 and 0, 127, 128): the
  // device's blockwise path with a mask across its 128-query blocks, and the tiled kernels.
  for (bool tiled : {false, true}) {
    CAPTURE(tiled);
    ctx.tiled_attention = tiled;
    const int64_t B = 2, T = 600, H = 4, D = 64, C = H * D, n = B * T * C, lrows = B * H * T;
    std::vector<int32_t> first(size_t(B * T));
    for (int64_t t = 0; t < T; ++t) {
      first[size_t(t)] = t >= 400 ? 400 : t >= 129 ? 129 : t >= 100 ? 100 : 0;
      first[size_t(T + t)] = t >= 128 ? 128 : t >= 127 ? 127 : 0;
    }
    const auto qkv = randoms(3 * n, 86, -1.5f, 1.5f), dout = randoms(n, 87);
    On<int32_t> dfirst(first);
    On<float> dq(qkv), ddo(dout), dout_g(zeros(n)), dlse(zeros(lrows)), ddq(zeros(3 * n)), dws(zeros(lrows));
    std::vector<float> out(n), lse(lrows), dqkv(3 * n), ws(lrows);
    REQUIRE(g.flash_attention_masked_forward(&g, dq.p(), dfirst.p(), T, dlse.p(), dout_g.p(), B, T, H, D, 0.125f) ==
            DSCPP_OK);
    REQUIRE(c.flash_attention_masked_forward(&c, qkv.data(), first.data(), T, lse.data(), out.data(), B, T, H, D,
                                             0.125f) == DSCPP_OK);
    CHECK(normwise(dout_g.get(), out) <= sum_tol(T));
    CHECK(normwise(dlse.get(), lse) <= sum_tol(T));
    REQUIRE(g.flash_attention_masked_backward(&g, dq.p(), dfirst.p(), T, dout_g.p(), dlse.p(), ddo.p(), ddq.p(),
                                              dws.p(), B, T, H, D, 0.125f) == DSCPP_OK);
    REQUIRE(c.flash_attention_masked_backward(&c, qkv.data(), first.data(), T, out.data(), lse.data(), dout.data(),
                                              dqkv.data(), ws.data(), B, T, H, D, 0.125f) == DSCPP_OK);
    CHECK(normwise(ddq.get(), dqkv) <= 2 * sum_tol(T));
  }
  ctx.tiled_attention = false;
}

// Under bf16 GEMM math the flash entries go to cuDNN's SDPA (cast to bf16 and back), or, where
// cuDNN is absent or refuses, to the blockwise path on bf16 GEMMs: both run here. Against the
// CPU's exact fp32: inputs rounded to bf16 (2^-8 relative) and the output rounded again give
// normwise errors of a few 2^-8 (measured on the first run: see the closing notes); 2e-2 for out
// and the gradient, and lse (fp32 statistics from rounded q·k, |lse| ≈ 5) 1e-2.
TEST_CASE("flash attention under bf16 GEMM math (cuDNN SDPA, blockwise) matches the CPU table to bf16 rounding",
          "[gpu]") {
  const int64_t B = 2, T = 300, H = 4, D = 64, C = H * D, n = B * T * C, rows = B * H * T;
  const float scale = 0.125f;
  const auto qkv = randoms(3 * n, 90, -1.5f, 1.5f), dout = randoms(n, 91);
  const dscpp_ops c = kernels::cpu_ops(DSCPP_F32);
  std::vector<float> out(n), lse(rows), dqkv(3 * n), ws(rows);
  REQUIRE(c.flash_attention_forward(&c, qkv.data(), lse.data(), out.data(), B, T, H, D, scale) == DSCPP_OK);
  REQUIRE(c.flash_attention_backward(&c, qkv.data(), out.data(), lse.data(), dout.data(), dqkv.data(), ws.data(), B, T,
                                     H, D, scale) == DSCPP_OK);
  for (bool cudnn : {true, false}) {
    CAPTURE(cudnn);
    cuda::OpsContext ctx(device()->compute_stream());
    ctx.gemm_math = kernels::GemmMath::bf16;
    ctx.cudnn_attention_tried = !cudnn;  // tried and absent: the blockwise path
    const dscpp_ops g = cuda::cuda_ops(DSCPP_F32, &ctx);
    On<float> dq(qkv), ddo(dout), dout_g(zeros(n)), dlse(zeros(rows)), ddq(zeros(3 * n)), dws(zeros(rows));
    REQUIRE(g.flash_attention_forward(&g, dq.p(), dlse.p(), dout_g.p(), B, T, H, D, scale) == DSCPP_OK);
#if DSCPP_HAVE_CUDNN_SDPA
    if (cudnn) CHECK(ctx.cudnn_attention != nullptr);  // cuDNN loaded and took the shape (else the log says why)
#endif
    CHECK(normwise(dout_g.get(), out) <= 2e-2);
    CHECK(normwise(dlse.get(), lse) <= 1e-2);
    REQUIRE(g.flash_attention_backward(&g, dq.p(), dout_g.p(), dlse.p(), ddo.p(), ddq.p(), dws.p(), B, T, H, D,
                                       scale) == DSCPP_OK);
    CHECK(normwise(ddq.get(), dqkv) <= 2e-2);
  }
}

// The table's GEMMs on tensor-core math (tf32: cublasGemmStridedBatchedEx with FAST_TF32;
// bf16/fp16: operands cast to 16 bits, then 16-bit GEMMs): within the bound of operands rounded
// to the type's mantissa, 2·2^-p·Σ|a·b|, plus fp32 accumulation's K·u; and not the exact
// product (the rounding happened).
TEST_CASE("GEMMs on tf32/bf16/fp16 tensor-core math stay within their rounding bound", "[gpu]") {
  cuda::OpsContext ctx(device()->compute_stream());
  const dscpp_ops g = cuda::cuda_ops(DSCPP_F32, &ctx);
  const int64_t M = 64, N = 96, K = 512;
  const auto A = randoms(M * K, 95), Bm = randoms(K * N, 96);
  On<float> dA(A), dB(Bm), dC(zeros(M * N));
  std::vector<double> exact(M * N), mag(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(A[size_t(i * K + k)]) * Bm[size_t(k * N + j)];
        exact[size_t(i * N + j)] += p, mag[size_t(i * N + j)] += std::fabs(p);
      }
  for (auto [math, bits] : {std::pair{kernels::GemmMath::tf32, 11}, {kernels::GemmMath::bf16, 8},
                            {kernels::GemmMath::fp16, 11}}) {
    CAPTURE(kernels::gemm_math_name(math));
    ctx.gemm_math = math;
    REQUIRE(g.gemm(&g, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, dA.p(), K, dB.p(), N, 0.0f, dC.p(), N) ==
            DSCPP_OK);
    const std::vector<float> got = dC.get();
    double worst = 0, moved = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = (2 * std::ldexp(1.0, -bits) + double(K) / double(1 << 24)) * mag[i];
      worst = std::max(worst, std::fabs(got[i] - exact[i]) / bound);
      moved = std::max(moved, std::fabs(got[i] - exact[i]) / mag[i]);
    }
    INFO("largest error " << worst << " of the bound; largest relative move " << moved);
    CHECK(worst <= 1.0);
    CHECK(moved > double(K) / double(1 << 24) / 8);  // more than fp32 accumulation alone moves it
  }
}

// Linear layers through cuBLASLt's epilogues (bias, GELU with its input kept, the bias gradient
// of dW, the GELU derivative of dx: lt_linear.h) and, on a width cuBLASLt's GELU input matrix
// cannot take (not a multiple of 8), through GEMM + epilogue kernels: both against the CPU
// table. K-term sums in another order (K ≤ 256 here) and cuBLASLt's own tanh-GELU: 1e-4
// normwise, as the forward check above.
TEST_CASE("linear layers (cuBLASLt epilogues and the kernel path) match the CPU table", "[gpu]") {
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{64, 96, 128}, {33, 40, 51}}) {
    CAPTURE(rows, in, out);
    cuda::OpsContext ctx(device()->compute_stream());
    const dscpp_ops g = cuda::cuda_ops(DSCPP_F32, &ctx);
    const dscpp_ops c = kernels::cpu_ops(DSCPP_F32);
    const auto x = randoms(rows * in, 100), W = randoms(out * in, 101), b = randoms(out, 102),
               dy = randoms(rows * out, 103), pre = randoms(rows * in, 104), dW0 = randoms(out * in, 105),
               db0 = randoms(out, 106);
    On<float> dx_(x), dW_(W), db_(b), ddy(dy), dpre(pre), y(zeros(rows * out)), ge(zeros(rows * out)), gW(dW0), gb(db0),
        gdx(zeros(rows * in));
    std::vector<float> cy(rows * out), cg(rows * out), cW = dW0, cb = db0, cdx(rows * in);
    REQUIRE(g.linear_forward(&g, dx_.p(), dW_.p(), db_.p(), nullptr, y.p(), ge.p(), rows, in, out) == DSCPP_OK);
    REQUIRE(c.linear_forward(&c, x.data(), W.data(), b.data(), nullptr, cy.data(), cg.data(), rows, in, out) ==
            DSCPP_OK);
    CHECK(normwise(y.get(), cy) <= 1e-4);
    CHECK(normwise(ge.get(), cg) <= 1e-4);
    REQUIRE(g.linear_backward(&g, ddy.p(), dx_.p(), dW_.p(), gW.p(), gb.p(), gdx.p(), dpre.p(), rows, in, out) ==
            DSCPP_OK);
    REQUIRE(c.linear_backward(&c, dy.data(), x.data(), W.data(), cW.data(), cb.data(), cdx.data(), pre.data(), rows, in,
                              out) == DSCPP_OK);
    CHECK(normwise(gW.get(), cW) <= 1e-4);
    CHECK(normwise(gb.get(), cb) <= 1e-4);
    CHECK(normwise(gdx.get(), cdx) <= 1e-4);
    CHECK(ctx.lt_linear != nullptr);  // cuBLASLt started (its first failure, if any, is in the log)
  }
}

namespace {
// Inputs for a 16-bit table: fp32 values exactly representable in the dtype (for the CPU
// table), and their bits on the device (for the CUDA table).
struct Half {
  std::vector<float> f;
  std::vector<uint16_t> h;
  Half(const std::vector<float>& v, bool bf16) : f(v.size()), h(v.size()) {
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = bf16 ? float_to_bf16_bits(v[i]) : float_to_fp16_bits(v[i]);
      f[i] = bf16 ? bf16_bits_to_float(h[i]) : fp16_bits_to_float(h[i]);
    }
  }
};
std::vector<uint16_t> zeros16(int64_t n) {
  return std::vector<uint16_t>(static_cast<size_t>(n));
}
std::vector<float> widen(const std::vector<uint16_t>& h, bool bf16) {
  std::vector<float> r(h.size());
  for (size_t i = 0; i < h.size(); ++i) r[i] = bf16 ? bf16_bits_to_float(h[i]) : fp16_bits_to_float(h[i]);
  return r;
}
}  // namespace

// The table with a 16-bit compute dtype (what bf16/fp16 runs train with) at training sizes,
// against the CPU table's fp32 ops on the same inputs rounded to the dtype: each result is
// rounded once (tests/unit/test_cuda_ops_16bit.cpp checks every op on the host stub), so 1 unit
// roundoff u16 (2⁻⁸ bf16, 2⁻¹¹ fp16) plus the fp32 sums' order: 1.5 u16. Composite results
// round more than once (the linear layer's y before its bias, the GELU of the rounded y, dx
// before the GELU backward): 3 u16. cuDNN's attention keeps its probabilities in 16 bits for
// P·V and its backward products: 4 u16 forward, 8 u16 for dqkv, as the blockwise path also
// meets (it rounds once).
TEST_CASE("the bf16 and fp16 ops tables match the CPU table's fp32 ops to their roundings", "[gpu]") {
  const dscpp_ops c = kernels::cpu_ops(DSCPP_F32);
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    const double u = bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    cuda::OpsContext ctx(device()->compute_stream());
    ctx.gemm_math = bf16 ? kernels::GemmMath::bf16 : kernels::GemmMath::fp16;
    const dscpp_ops g = cuda::cuda_ops(bf16 ? DSCPP_BF16 : DSCPP_F16, &ctx);
    auto on = [](const Half& v) { return On<uint16_t>(v.h); };
    {  // dropout: the same mask, and the fp32 result rounded once (exactly)
      const int64_t n = int64_t{1} << 20;
      const Half x(randoms(n, 109), bf16);
      On<uint16_t> gx = on(x), gy(zeros16(n));
      std::vector<float> cy(static_cast<size_t>(n));
      REQUIRE(g.dropout(&g, gx.p(), gy.p(), n, 0.1f, 5) == DSCPP_OK);
      REQUIRE(c.dropout(&c, x.f.data(), cy.data(), n, 0.1f, 5) == DSCPP_OK);
      CHECK(widen(gy.get(), bf16) == Half(cy, bf16).f);
    }
    {  // linear forward and backward at a GPT-2 MLP's shape
      const int64_t rows = 512, in = 768, out = 3072;
      const Half x(randoms(rows * in, 110), bf16), W(randoms(out * in, 111, -0.05f, 0.05f), bf16),
          b(randoms(out, 112), bf16), dy(randoms(rows * out, 113), bf16), pre(randoms(rows * in, 114), bf16);
      On<uint16_t> gx = on(x), gW = on(W), gb = on(b), gdy = on(dy), gpre = on(pre),
                   y(zeros16(rows * out)), ge(zeros16(rows * out)),
                   dW(zeros16(out * in)), db(zeros16(out)),
                   dx(zeros16(rows * in));
      std::vector<float> cy(rows * out), cg(rows * out), cW(out * in), cb(out), cdx(rows * in);
      REQUIRE(g.linear_forward(&g, gx.p(), gW.p(), gb.p(), nullptr, y.p(), ge.p(), rows, in, out) == DSCPP_OK);
      REQUIRE(c.linear_forward(&c, x.f.data(), W.f.data(), b.f.data(), nullptr, cy.data(), cg.data(), rows, in, out) ==
              DSCPP_OK);
      CHECK(normwise(widen(y.get(), bf16), cy) <= 3 * u);
      CHECK(normwise(widen(ge.get(), bf16), cg) <= 3 * u);
      REQUIRE(g.linear_backward(&g, gdy.p(), gx.p(), gW.p(), dW.p(), db.p(), dx.p(), gpre.p(), rows, in, out) ==
              DSCPP_OK);
      REQUIRE(c.linear_backward(&c, dy.f.data(), x.f.data(), W.f.data(), cW.data(), cb.data(), cdx.data(), pre.f.data(),
                                rows, in, out) == DSCPP_OK);
      CHECK(normwise(widen(dW.get(), bf16), cW) <= 1.5 * u);
      CHECK(normwise(widen(db.get(), bf16), cb) <= 1.5 * u);
      CHECK(normwise(widen(dx.get(), bf16), cdx) <= 3 * u);
    }
    {  // layer norm and cross-entropy over 1024 rows
      const int64_t rows = 1024, cols = 768, vocab = 4099;
      const Half x(randoms(rows * cols, 115), bf16), gm(randoms(cols, 116, 0.5f, 1.5f), bf16),
          bt(randoms(cols, 117), bf16), dy(randoms(rows * cols, 118), bf16),
          logits(randoms(rows * vocab, 119, -4.0f, 4.0f), bf16);
      On<uint16_t> gx = on(x), ggm = on(gm), gbt = on(bt), gdy = on(dy), glog = on(logits),
                   y(zeros16(rows * cols)), dx(zeros16(rows * cols)),
                   dg(zeros16(cols)), db(zeros16(cols)),
                   probs(zeros16(rows * vocab));
      On<float> mean(zeros(rows)), rstd(zeros(rows));
      std::vector<float> cy(rows * cols), cm(rows), cr(rows), cdx(rows * cols), cdg(cols), cdb(cols), cp(rows * vocab);
      REQUIRE(g.layernorm_forward(&g, gx.p(), ggm.p(), gbt.p(), y.p(), mean.p(), rstd.p(), rows, cols, 1e-5f) ==
              DSCPP_OK);
      REQUIRE(c.layernorm_forward(&c, x.f.data(), gm.f.data(), bt.f.data(), cy.data(), cm.data(), cr.data(), rows, cols,
                                  1e-5f) == DSCPP_OK);
      CHECK(normwise(widen(y.get(), bf16), cy) <= 1.5 * u);
      CHECK(normwise(mean.get(), cm) <= 1e-5);
      REQUIRE(g.layernorm_backward(&g, gdy.p(), gx.p(), ggm.p(), mean.p(), rstd.p(), dx.p(), dg.p(), db.p(), rows,
                                   cols) == DSCPP_OK);
      REQUIRE(c.layernorm_backward(&c, dy.f.data(), x.f.data(), gm.f.data(), cm.data(), cr.data(), cdx.data(),
                                   cdg.data(), cdb.data(), rows, cols) == DSCPP_OK);
      CHECK(normwise(widen(dx.get(), bf16), cdx) <= 1.5 * u);
      CHECK(normwise(widen(dg.get(), bf16), cdg) <= 1.5 * u);
      CHECK(normwise(widen(db.get(), bf16), cdb) <= 1.5 * u);
      std::vector<int32_t> targets(rows);
      for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = int32_t((r * 37) % vocab);
      On<int32_t> gt(targets);
      double lg = 0, lc = 0;
      int64_t ng = 0, nc = 0, hg = 0, hc = 0;
      REQUIRE(g.cross_entropy_forward(&g, glog.p(), gt.p(), probs.p(), rows, vocab, &lg, &ng, &hg) == DSCPP_OK);
      REQUIRE(c.cross_entropy_forward(&c, logits.f.data(), targets.data(), cp.data(), rows, vocab, &lc, &nc, &hc) ==
              DSCPP_OK);
      CHECK(std::fabs(lg - lc) <= 1e-5 * std::fabs(lc));
      CHECK((ng == nc && hg == hc));
      CHECK(normwise(widen(probs.get(), bf16), cp) <= 1.5 * u);
    }
    {  // flash attention through cuDNN (tensors as they are), the blockwise path and the tiled kernels
      const int64_t B = 2, T = 300, H = 4, D = 64, n = B * T * H * D, rows = B * H * T;
      const float scale = 0.125f;
      const Half qkv(randoms(3 * n, 120, -1.5f, 1.5f), bf16), dout(randoms(n, 121), bf16);
      std::vector<float> out(n), lse(rows), dqkv(3 * n), ws(rows);
      REQUIRE(c.flash_attention_forward(&c, qkv.f.data(), lse.data(), out.data(), B, T, H, D, scale) == DSCPP_OK);
      const Half out16(out, bf16);  // the same forward output into both backwards
      REQUIRE(c.flash_attention_backward(&c, qkv.f.data(), out16.f.data(), lse.data(), dout.f.data(), dqkv.data(),
                                         ws.data(), B, T, H, D, scale) == DSCPP_OK);
      for (int path : {0, 1, 2}) {  // cuDNN, blockwise, tiled
        const bool cudnn = path == 0;
        CAPTURE(path);
        cuda::OpsContext actx(device()->compute_stream());
        actx.cudnn_attention_tried = !cudnn;
        actx.tiled_attention = path == 2;
        const dscpp_ops a = cuda::cuda_ops(bf16 ? DSCPP_BF16 : DSCPP_F16, &actx);
        On<uint16_t> gq = on(qkv), gdo = on(dout), go = on(out16), gout(zeros16(n)),
                     gdq(zeros16(3 * n));
        On<float> glse(zeros(rows)), gws(zeros(rows)), clse(lse);
        REQUIRE(a.flash_attention_forward(&a, gq.p(), glse.p(), gout.p(), B, T, H, D, scale) == DSCPP_OK);
#if DSCPP_HAVE_CUDNN_SDPA
        if (cudnn) CHECK(actx.cudnn_attention != nullptr);
#endif
        CHECK(normwise(widen(gout.get(), bf16), out) <= 4 * u);
        CHECK(normwise(glse.get(), lse) <= 1e-3);
        REQUIRE(a.flash_attention_backward(&a, gq.p(), go.p(), clse.p(), gdo.p(), gdq.p(), gws.p(), B, T, H, D,
                                           scale) == DSCPP_OK);
        CHECK(normwise(widen(gdq.get(), bf16), dqkv) <= 8 * u);
      }
    }
  }
}
