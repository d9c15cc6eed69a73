// LoRA in the layer library (dscpp/layers.h's Linear and Lora) and null gradients of frozen
// parameters, on the CPU ops table: a targeted Linear's forward and its A, B and input gradients
// against a naive fp64 reference (contiguous, and q/k/v written into packed strided rows; with and
// without a bias; rslora; a decode call), lora_dropout (training against a reference drawing the
// documented mask, gradients against finite differences with the mask fixed, evaluation and decoding
// as p = 0, the kept fraction), then whole blocks (Llama's and GPT-2's, every Linear adapted, A and B
// random, with and without dropout) against central finite differences, and blocks whose parameters
// the runtime froze (null gradients) against the same blocks training everything.
#include "dscpp/layers.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace dscpp::layers;
using namespace ops_check;

// A layer with nothing of its own: the parts under test declare their parameters and buffers on it.
class Host final : public Layer {
 public:
  explicit Host(const Env& env) : Layer(env, "blocks.0", 0) {}
  void forward(const Call&) override {}
  void backward(const Call&) override {}
};

size_t numel(const ParamSpec& p) {
  size_t n = 1;
  for (int64_t d : p.shape) n *= static_cast<size_t>(d);
  return n;
}

// A layer's memory for `batch` samples as the runtime hands it over: every parameter (random, the
// adapters' B included, so that every LoRA term is non-zero), a gradient for each one that trains
// (null for a frozen one, or for those `frozen` names), saved and workspace bytes.
struct Rig {
  Rig(Layer& l, int64_t b, uint32_t seed, const std::function<bool(const ParamSpec&)>& frozen = {})
      : layer(l), batch(b) {
    for (size_t i = 0; i < l.params().size(); ++i) {
      const ParamSpec& p = l.params()[i];
      params.push_back(rnd(numel(p), seed + uint32_t(i), -0.5f, 0.5f));
      grads.push_back(p.frozen || (frozen && frozen(p)) ? Vec{} : Vec(numel(p), 0.0f));
    }
    saved.assign(size_t(l.saved.bytes() * b / 4 + 16), kNaN);
    const int64_t work = std::max({l.fwd_work.bytes(), l.bwd_work.bytes(), l.decode_work.bytes()});
    workspace.assign(size_t(work * (b + 4) / 4 + 16), kNaN);  // decode calls of a few more sequences
    bind();
  }
  void bind() {
    pp.clear(), gp.clear();
    for (size_t i = 0; i < params.size(); ++i) {
      pp.push_back(params[i].data());
      gp.push_back(grads[i].empty() ? nullptr : grads[i].data());
    }
    ctx = dscpp_layer_ctx{};
    ctx.struct_size = sizeof ctx;
    ctx.ops = O();
    ctx.batch = batch;
    ctx.training = 1;
    ctx.params = pp.data();
    ctx.grads = gp.data();
    ctx.saved = saved.data();
    ctx.workspace = workspace.data();
  }
  Call call() const { return Call{ctx, layer}; }
  int index(const std::string& full) const {
    for (size_t i = 0; i < params.size(); ++i)
      if (layer.full_name(int(i)) == full) return int(i);
    FAIL("no parameter " << full);
    return -1;
  }
  Layer& layer;
  int64_t batch;
  std::vector<Vec> params, grads;
  std::vector<const void*> pp;
  std::vector<void*> gp;
  Vec saved, workspace;
  dscpp_layer_ctx ctx{};
};

// y[rows × out] = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ in fp64.
DVec lora_ref(const Vec& x, const Vec& W, const Vec* b, const Vec& A, const Vec& B, double s, int64_t rows, int64_t in,
              int64_t out, int64_t r) {
  DVec y(size_t(rows * out));
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> ax(size_t(r), 0.0);
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < in; ++j) ax[k] += double(x[i * in + j]) * A[k * in + j];
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0, lo = 0;
      for (int64_t j = 0; j < in; ++j) acc += double(x[i * in + j]) * W[o * in + j];
      for (int64_t k = 0; k < r; ++k) lo += ax[k] * B[o * r + k];
      y[i * out + o] = acc + s * lo;
    }
  }
  return y;
}

struct LoraGrads {
  DVec dA, dB, dx;
};
// dB = s·dyᵀ·(x·Aᵀ), dA = s·(dy·B)ᵀ·x, dx = dy·W + s·(dy·B)·A in fp64.
LoraGrads lora_grads_ref(const Vec& dy, const Vec& x, const Vec& W, const Vec& A, const Vec& B, double s, int64_t rows,
                         int64_t in, int64_t out, int64_t r) {
  LoraGrads g{DVec(size_t(r * in)), DVec(size_t(out * r)), DVec(size_t(rows * in))};
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> ax(size_t(r), 0.0), dyb(size_t(r), 0.0);
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t j = 0; j < in; ++j) ax[k] += double(x[i * in + j]) * A[k * in + j];
      for (int64_t o = 0; o < out; ++o) dyb[k] += double(dy[i * out + o]) * B[o * r + k];
    }
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < r; ++k) g.dB[o * r + k] += s * dy[i * out + o] * ax[k];
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < in; ++j) g.dA[k * in + j] += s * dyb[k] * x[i * in + j];
    for (int64_t j = 0; j < in; ++j) {
      double acc = 0;
      for (int64_t o = 0; o < out; ++o) acc += double(dy[i * out + o]) * W[o * in + j];
      for (int64_t k = 0; k < r; ++k) acc += s * dyb[k] * A[k * in + j];
      g.dx[i * in + j] = acc;
    }
  }
  return g;
}

// Columns [c0, c0 + n) of a rows × ld matrix.
Vec columns(const Vec& m, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
  Vec v(size_t(rows * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = m[i * ld + c0 + j];
  return v;
}

constexpr double kTol = 1e-5;  // fp32 sums of a few dozen terms of size ≤ 1 against fp64

TEST_CASE("a LoRA Linear declares PEFT's parameters and computes W·x + b + scale·B·A·x", "[lora]") {
  const bool with_bias = GENERATE(false, true), rslora = GENERATE(false, true);
  INFO("bias " << with_bias << ", rslora " << rslora);
  const int64_t T = 5, batch = 2, rows = batch * T, in = 12, out = 10, r = 3;
  LoraSpec spec;
  spec.r = r, spec.alpha = 6, spec.rslora = rslora, spec.targets = {"q_proj"};
  Lora lora(spec);
  Env env;
  env.context = T;
  env.lora = &lora;
  Host host(env);
  Linear lin(host, Name("self_attn.q_proj.weight"), in, out, normal(0.02f),
             with_bias ? Name("self_attn.q_proj.bias") : Name{});
  REQUIRE(lin.adapted());
  const double s = rslora ? 6.0 / std::sqrt(3.0) : 6.0 / 3.0;
  CHECK(lora.spec().scale() == Approx(s));
  // PEFT's names, shapes and init; every base parameter frozen.
  CHECK(host.full_name(lin.lora_a) == "blocks.0.self_attn.q_proj.lora_A.weight");
  CHECK(host.full_name(lin.lora_b) == "blocks.0.self_attn.q_proj.lora_B.weight");
  const ParamSpec& A = host.params()[size_t(lin.lora_a)];
  const ParamSpec& B = host.params()[size_t(lin.lora_b)];
  CHECK(A.shape == std::vector<int64_t>{r, in});
  CHECK(B.shape == std::vector<int64_t>{out, r});
  CHECK((A.adapter && B.adapter && !A.frozen && !B.frozen));
  CHECK((A.init.kind == DSCPP_INIT_UNIFORM && A.init.a == Approx(1 / std::sqrt(12.0))));
  CHECK(B.init.kind == DSCPP_INIT_ZEROS);
  CHECK(host.params()[size_t(lin.weight)].frozen);
  if (with_bias) CHECK(host.params()[size_t(lin.bias)].frozen);
  dscpp_layer_desc desc;
  host.describe(&desc);
  CHECK((desc.params[lin.lora_a].adapter == 1 && desc.params[lin.lora_a].frozen == 0));
  CHECK((desc.params[lin.weight].adapter == 0 && desc.params[lin.weight].frozen == 1));

  Rig rig(host, batch, 11);
  const Vec& W = rig.params[size_t(lin.weight)];
  const Vec* b = with_bias ? &rig.params[size_t(lin.bias)] : nullptr;
  const Vec& Av = rig.params[size_t(lin.lora_a)];
  const Vec& Bv = rig.params[size_t(lin.lora_b)];
  const Vec x = rnd(size_t(rows * in), 3), dy = rnd(size_t(rows * out), 4);
  Vec y(size_t(rows * out), kNaN);
  lin.forward(rig.call(), x.data(), y.data(), rows);
  check_close(y, lora_ref(x, W, b, Av, Bv, s, rows, in, out, r), kTol, kTol);

  SECTION("backward overwriting dx; the frozen weight and bias get no gradient") {
    Vec dx(size_t(rows * in), kNaN);
    lin.backward(rig.call(), dy.data(), out, x.data(), dx.data(), false, rows);
    const LoraGrads ref = lora_grads_ref(dy, x, W, Av, Bv, s, rows, in, out, r);
    check_close(rig.grads[size_t(lin.lora_a)], ref.dA, kTol, kTol);
    check_close(rig.grads[size_t(lin.lora_b)], ref.dB, kTol, kTol);
    check_close(dx, ref.dx, kTol, kTol);
  }
  SECTION("backward accumulating into dx and into the adapters' gradients") {
    Vec dx = rnd(size_t(rows * in), 5);
    DVec want = to_d(dx);
    lin.backward(rig.call(), dy.data(), out, x.data(), dx.data(), true, rows);
    lin.backward(rig.call(), dy.data(), out, x.data(), nullptr, false, rows);  // no dx: the adapters' only
    const LoraGrads ref = lora_grads_ref(dy, x, W, Av, Bv, s, rows, in, out, r);
    for (size_t i = 0; i < want.size(); ++i) want[i] += ref.dx[i];
    DVec dA2 = ref.dA, dB2 = ref.dB;
    for (double& v : dA2) v *= 2;
    for (double& v : dB2) v *= 2;
    check_close(rig.grads[size_t(lin.lora_a)], dA2, kTol, kTol);
    check_close(rig.grads[size_t(lin.lora_b)], dB2, kTol, kTol);
    check_close(dx, want, kTol, kTol);
  }
  SECTION("a decode call (one row per sequence) adds the same term, with decode scratch") {
    dscpp_decode_ctx d{};
    d.struct_size = sizeof d;
    d.ops = O();
    d.params = rig.pp.data();
    d.batch = 3;
    d.workspace = rig.workspace.data();
    const DecodeCall call(d, host);
    Vec yd(size_t(3 * out), kNaN);
    lin.forward(call.call(), x.data(), yd.data(), 3);
    check_close(yd, lora_ref(Vec(x.begin(), x.begin() + 3 * in), W, b, Av, Bv, s, 3, in, out, r), kTol, kTol);
  }
}

// The seed of a module's LoRA dropout in a call (dscpp/layers.h's Linear): rng_seed ^ FNV-1a(name).
uint64_t dropout_seed(uint64_t rng_seed, const std::string& module) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : module) h = (h ^ ch) * 0x100000001B3ull;
  return rng_seed ^ h;
}

// Central differences of the loss in fp32 (as dscpp gradcheck takes them) at a sample of elements,
// within 1% of the tensor's largest gradient (gradcheck's verdict) plus 1e-5.
void check_fd(const std::string& what, Vec& v, const Vec& g, const std::function<double()>& loss) {
  double scale = 0;
  for (float e : g) scale = std::max(scale, std::fabs(double(e)));
  INFO(what << ": largest gradient " << scale);
  CHECK(scale > 0);
  double worst = 0;
  for (size_t i : sample(v.size(), 77, 24)) {
    const float theta = v[i], h = 1e-2f * std::max(1.0f, std::fabs(theta));
    v[i] = theta + h;
    const double up = loss();
    v[i] = theta - h;
    const double down = loss();
    v[i] = theta;
    worst = std::max(worst, std::fabs((up - down) / (double(theta + h) - double(theta - h)) - g[i]));
  }
  CHECK(worst <= 1e-2 * scale + 1e-5);
}

TEST_CASE("lora_dropout: a mask per module from rng_seed in training; evaluation and decoding as p = 0", "[lora]") {
  const int64_t T = 5, batch = 2, rows = batch * T, in = 12, out = 10, r = 3;
  const float p = 0.3f;
  LoraSpec spec;
  spec.r = r, spec.alpha = 6, spec.dropout = p, spec.targets = {"q_proj", "v_proj"};
  Lora lora(spec);
  LoraSpec plain_spec = spec;
  plain_spec.dropout = 0;
  Lora plain(plain_spec);
  Env env;
  env.context = T;
  env.lora = &lora;
  Env plain_env = env;
  plain_env.lora = &plain;
  Host host(env), plain_host(plain_env);
  Linear q(host, Name("self_attn.q_proj.weight"), in, out, normal(0.02f), Name("self_attn.q_proj.bias"));
  Linear v(host, Name("self_attn.v_proj.weight"), in, out, normal(0.02f));
  Linear q0(plain_host, Name("self_attn.q_proj.weight"), in, out, normal(0.02f), Name("self_attn.q_proj.bias"));
  // q and v take turns in one scratch slot of drop(x) (5 rows × 12 × 4 bytes, rounded to 64) each way.
  CHECK(host.fwd_work.bytes() == 256);
  CHECK(host.bwd_work.bytes() == plain_host.bwd_work.bytes() + 64 + 256);  // + v's dy·B, + the shared slot
  // q's parameters are the same in both.
  Rig rig(host, batch, 61), prig(plain_host, batch, 61);
  rig.ctx.rng_seed = prig.ctx.rng_seed = 0x5EED;
  const Vec& W = rig.params[size_t(q.weight)];
  const Vec& b = rig.params[size_t(q.bias)];
  Vec& A = rig.params[size_t(q.lora_a)];
  Vec& B = rig.params[size_t(q.lora_b)];
  Vec x = rnd(size_t(rows * in), 16);
  const Vec w = rnd(size_t(rows * out), 17);
  const uint64_t seed = dropout_seed(0x5EED, "blocks.0.self_attn.q_proj");
  const Vec xd = dropout_ref(x, p, seed);
  auto forward = [&](const Linear& l, Rig& g) {
    Vec y(size_t(rows * out), kNaN);
    l.forward(g.call(), x.data(), y.data(), rows);
    return y;
  };
  const Vec y = forward(q, rig);

  SECTION("(a) training: the base on x, the adapter on the documented mask's drop(x); v draws another mask") {
    DVec want = lora_ref(x, W, &b, A, Vec(B.size(), 0.0f), 2.0, rows, in, out, r);  // x·Wᵀ + b
    const DVec lo = lora_ref(xd, Vec(W.size(), 0.0f), nullptr, A, B, 2.0, rows, in, out, r);
    for (size_t i = 0; i < want.size(); ++i) want[i] += lo[i];
    check_close(y, want, kTol, kTol);
    CHECK(bitwise(forward(q, rig), y));  // the recompute of activation checkpointing: the same mask
    rig.ctx.rng_seed = 0x5EEE;           // the next micro-step: another
    CHECK_FALSE(bitwise(forward(q, rig), y));
    const Vec vd = dropout_ref(x, p, dropout_seed(0x5EED, "blocks.0.self_attn.v_proj"));
    int64_t differ = 0;
    for (size_t i = 0; i < xd.size(); ++i) differ += (xd[i] == 0) != (vd[i] == 0);
    CHECK(differ > 0);
  }
  SECTION("(b) A, B and the input against finite differences, the mask fixed by the seed") {
    auto loss = [&] {
      const Vec yl = forward(q, rig);
      double l = 0;
      for (size_t i = 0; i < yl.size(); ++i) l += double(w[i]) * yl[i];
      return l;
    };
    Vec dx(size_t(rows * in), kNaN);
    q.backward(rig.call(), w.data(), out, x.data(), dx.data(), false, rows);
    const Vec dA = rig.grads[size_t(q.lora_a)], dB = rig.grads[size_t(q.lora_b)];
    const LoraGrads ref = lora_grads_ref(w, xd, W, A, B, 2.0, rows, in, out, r);  // dA, dB on drop(x)
    check_close(dA, ref.dA, kTol, kTol);
    check_close(dB, ref.dB, kTol, kTol);
    check_fd("lora_A", A, dA, loss);
    check_fd("lora_B", B, dB, loss);
    check_fd("the input", x, dx, loss);
  }
  SECTION("(c) evaluation and decoding: the p = 0 forward, bit for bit") {
    rig.ctx.training = 0;
    CHECK(bitwise(forward(q, rig), forward(q0, prig)));
    CHECK_FALSE(bitwise(y, forward(q0, prig)));
    dscpp_decode_ctx d{};
    d.struct_size = sizeof d;
    d.ops = O();
    d.params = rig.pp.data();
    d.batch = 3;
    d.workspace = rig.workspace.data();
    Vec yd(size_t(3 * out), kNaN);
    q.forward(DecodeCall(d, host).call(), x.data(), yd.data(), 3);
    check_close(yd, lora_ref(Vec(x.begin(), x.begin() + 3 * in), W, &b, A, B, 2.0, 3, in, out, r), kTol, kTol);
  }
  SECTION("(d) the kept fraction over a large tensor is 1 − p within 1%") {
    const int64_t n = int64_t{1} << 22;
    const Vec ones(size_t(n), 1.0f);
    Vec kept(static_cast<size_t>(n));
    for (uint64_t s : {seed, uint64_t{0}, uint64_t{1}}) {
      REQUIRE(O()->dropout(O(), ones.data(), kept.data(), n, p, s) == DSCPP_OK);
      const int64_t k = std::count(kept.begin(), kept.end(), 1.0f / (1.0f - p));
      CHECK(k + std::count(kept.begin(), kept.end(), 0.0f) == n);  // kept and scaled, or dropped
      CHECK(std::fabs(double(k) / double(n) - (1 - p)) <= 0.01 * (1 - p));
    }
  }
}

TEST_CASE("a memory plan's shared slot grows to its largest ask, moving the slots after it", "[lora]") {
  Buffers plan;
  const int first = plan.add(10), shared = plan.add_shared(100), after = plan.add(64);
  CHECK(plan.add_shared(300) == shared);
  CHECK(plan.add_shared(50) == shared);
  CHECK(plan.bytes() == 64 + 320 + 64);
  char base[4096];
  CHECK(plan.at(base, first, 2) == base);
  CHECK(plan.at(base, shared, 2) == base + 2 * 64);
  CHECK(plan.at(base, after, 2) == base + 2 * (64 + 320));
}

TEST_CASE("LoRA on q/k/v written into packed rows: the strided forward and accumulating backward", "[lora]") {
  const bool with_bias = GENERATE(false, true);
  INFO("bias " << with_bias);
  const int64_t T = 4, batch = 2, rows = batch * T, in = 8, Q = 8, KV = 4, width = Q + 2 * KV, r = 2;
  LoraSpec spec;
  spec.r = r, spec.alpha = 3, spec.targets = {"q_proj", "v_proj"};  // k_proj stays plain
  Lora lora(spec);
  Env env;
  env.context = T;
  env.lora = &lora;
  Host host(env);
  auto bias = [&](const char* n) { return with_bias ? Name(n) : Name{}; };
  Linear q(host, "q_proj.weight", in, Q, normal(0.02f), bias("q_proj.bias"));
  Linear k(host, "k_proj.weight", in, KV, normal(0.02f), bias("k_proj.bias"));
  Linear v(host, "v_proj.weight", in, KV, normal(0.02f), bias("v_proj.bias"));
  REQUIRE((q.adapted() && !k.adapted() && v.adapted()));
  CHECK(lora.adapted() == std::vector<std::string>{"blocks.0.q_proj", "blocks.0.v_proj"});
  Rig rig(host, batch, 21);
  const double s = 1.5;
  const Vec x = rnd(size_t(rows * in), 6), dy = rnd(size_t(rows * width), 7);
  const Vec ones(size_t(rows), 1.0f);
  Vec y(size_t(rows * width), kNaN);
  q.forward_strided(rig.call(), x.data(), y.data(), width, rows, ones.data());
  k.forward_strided(rig.call(), x.data(), y.data() + Q, width, rows, ones.data());
  v.forward_strided(rig.call(), x.data(), y.data() + Q + KV, width, rows, ones.data());
  Vec dx(size_t(rows * in), kNaN);
  q.backward(rig.call(), dy.data(), width, x.data(), dx.data(), false, rows, ones.data());
  k.backward(rig.call(), dy.data() + Q, width, x.data(), dx.data(), true, rows, ones.data());
  v.backward(rig.call(), dy.data() + Q + KV, width, x.data(), dx.data(), true, rows, ones.data());

  DVec dx_ref(size_t(rows * in), 0.0);
  int64_t c0 = 0;
  for (const Linear* l : {&q, &k, &v}) {
    const Vec& W = rig.params[size_t(l->weight)];
    const Vec* b = with_bias ? &rig.params[size_t(l->bias)] : nullptr;
    const Vec A = l->adapted() ? rig.params[size_t(l->lora_a)] : Vec(size_t(r * in), 0.0f);
    const Vec B = l->adapted() ? rig.params[size_t(l->lora_b)] : Vec(size_t(l->out * r), 0.0f);
    INFO("columns from " << c0);
    check_close(columns(y, rows, width, c0, l->out), lora_ref(x, W, b, A, B, s, rows, in, l->out, r), kTol, kTol);
    const Vec dyl = columns(dy, rows, width, c0, l->out);
    const LoraGrads ref = lora_grads_ref(dyl, x, W, A, B, s, rows, in, l->out, r);
    for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] += ref.dx[i];
    if (l->adapted()) {
      check_close(rig.grads[size_t(l->lora_a)], ref.dA, kTol, kTol);
      check_close(rig.grads[size_t(l->lora_b)], ref.dB, kTol, kTol);
    }
    c0 += l->out;
  }
  check_close(dx, dx_ref, kTol, kTol);
}

TEST_CASE("a Linear whose weight the runtime froze (null gradient) still passes its input's gradient", "[lora]") {
  const int64_t T = 3, batch = 2, rows = batch * T, in = 6, out = 5;
  Env env;
  env.context = T;
  Host host(env);
  Linear lin(host, "fc.weight", in, out, normal(0.02f), "fc.bias");
  Rig rig(host, batch, 31, [](const ParamSpec& p) { return p.name.local == "fc.weight"; });
  REQUIRE(rig.gp[size_t(lin.weight)] == nullptr);
  const Vec x = rnd(size_t(rows * in), 8), dy = rnd(size_t(rows * out), 9);
  Vec dx(size_t(rows * in), kNaN);
  lin.backward(rig.call(), dy.data(), out, x.data(), dx.data(), false, rows);
  const Vec zeros_r(size_t(out), 0.0f);
  const LoraGrads ref =
      lora_grads_ref(dy, x, rig.params[size_t(lin.weight)], Vec(size_t(in), 0.0f), zeros_r, 0.0, rows, in, out, 1);
  check_close(dx, ref.dx, kTol, kTol);
  DVec db(size_t(out), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o) db[o] += dy[i * out + o];
  check_close(rig.grads[size_t(lin.bias)], db, kTol, kTol);
}

// ---- blocks -------------------------------------------------------------------------------------

BlockSpec llama_block(int64_t C) {
  BlockSpec b;
  b.eps = 1e-5f;
  b.norm1 = "input_layernorm.weight", b.norm2 = "post_attention_layernorm.weight";
  AttentionSpec& a = b.attention;
  a.hidden = C, a.heads = 4, a.kv_heads = 2, a.head_dim = C / 4;
  a.q = "self_attn.q_proj.weight", a.k = "self_attn.k_proj.weight", a.v = "self_attn.v_proj.weight";
  a.out = "self_attn.o_proj.weight";
  a.rope = dscpp_rope{};
  a.rope->theta = 10000;
  a.init = a.out_init = normal(0.02f);
  MlpSpec& f = b.mlp;
  f.hidden = C, f.inner = 24, f.gated = true;
  f.gate = "mlp.gate_proj.weight", f.up = "mlp.up_proj.weight", f.down = "mlp.down_proj.weight";
  f.init = f.out_init = normal(0.02f);
  return b;
}

BlockSpec gpt2_block(int64_t C) {
  BlockSpec b;
  b.norm = NormKind::layer;
  b.norm1 = "ln_1.weight", b.norm1_bias = "ln_1.bias", b.norm2 = "ln_2.weight", b.norm2_bias = "ln_2.bias";
  AttentionSpec& a = b.attention;
  a.hidden = C, a.heads = 4, a.kv_heads = 4, a.head_dim = C / 4;
  a.fused_qkv = true, a.qkv = "attn.c_attn.weight", a.qkv_bias = "attn.c_attn.bias";
  a.out = "attn.c_proj.weight", a.out_bias = "attn.c_proj.bias";
  a.file_transposed = true;
  a.init = a.out_init = normal(0.02f);
  MlpSpec& f = b.mlp;
  f.hidden = C, f.inner = 32, f.gated = false, f.act = Activation::gelu_tanh;
  f.fc = "mlp.c_fc.weight", f.fc_bias = "mlp.c_fc.bias", f.proj = "mlp.c_proj.weight", f.proj_bias = "mlp.c_proj.bias";
  f.file_transposed = true;
  f.init = f.out_init = normal(0.02f);
  return b;
}

struct BlockRun {
  Vec y, dx;
};

// Forward, then backward of L = Σ w·y (so dL/dy = w).
BlockRun run_block(Layer& block, Rig& rig, const Vec& x, const Vec& w) {
  BlockRun r{Vec(w.size(), kNaN), Vec(x.size(), kNaN)};
  for (Vec& g : rig.grads) std::fill(g.begin(), g.end(), 0.0f);
  rig.ctx.input = x.data();
  rig.ctx.output = r.y.data();
  block.forward(rig.call());
  rig.ctx.grad_output = w.data();
  rig.ctx.grad_input = r.dx.data();
  block.backward(rig.call());
  rig.ctx.grad_output = nullptr, rig.ctx.grad_input = nullptr;
  return r;
}

double block_loss(Layer& block, Rig& rig, const Vec& x, const Vec& w) {
  Vec y(w.size(), kNaN);
  rig.ctx.input = x.data();
  rig.ctx.output = y.data();
  block.forward(rig.call());
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) l += double(w[i]) * y[i];
  return l;
}

TEST_CASE("blocks with every Linear adapted: LoRA and input gradients against finite differences", "[lora]") {
  const bool gpt2 = GENERATE(false, true);
  const double dropout = GENERATE(0.0, 0.3);  // with a mask the loss is still linear in A, B and x
  INFO((gpt2 ? "GPT-2 block (fused c_attn, LayerNorm, GELU)" : "Llama block (GQA, RoPE, SwiGLU)"));
  INFO("lora_dropout " << dropout);
  const int64_t T = 6, batch = 2, C = 16;
  LoraSpec spec;
  spec.r = 2, spec.alpha = 4, spec.dropout = dropout;
  spec.targets =
      gpt2 ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
           : std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  Lora lora(spec);
  Env env;
  env.context = T;
  env.lora = &lora;
  DecoderBlock block(env, "blocks.0", gpt2 ? gpt2_block(C) : llama_block(C));
  lora.check();
  CHECK(lora.adapted().size() == (gpt2 ? 4u : 7u));
  CHECK(lora.fan_in_fan_out() == gpt2);
  Rig rig(block, batch, 41);
  rig.ctx.rng_seed = 99;
  Vec x = rnd(size_t(batch * T * C), 12);
  const Vec w = rnd(size_t(batch * T * C), 13);
  const BlockRun run = run_block(block, rig, x, w);
  auto loss = [&] { return block_loss(block, rig, x, w); };
  int adapters = 0;
  for (size_t i = 0; i < rig.params.size(); ++i) {
    const ParamSpec& p = block.params()[i];
    CHECK(p.frozen == !p.adapter);
    CHECK((rig.gp[i] == nullptr) == p.frozen);
    if (!p.adapter) continue;
    ++adapters;
    check_fd(block.full_name(int(i)), rig.params[i], rig.grads[i], loss);
  }
  CHECK(adapters == 2 * int(lora.adapted().size()));
  check_fd("the input", x, run.dx, loss);
}

TEST_CASE("null gradients of frozen parameters change nothing else", "[lora]") {
  const bool gpt2 = GENERATE(false, true);
  INFO((gpt2 ? "GPT-2 block" : "Llama block"));
  const int64_t T = 5, batch = 2, C = 16;
  Env env;
  env.context = T;
  DecoderBlock block(env, "blocks.0", gpt2 ? gpt2_block(C) : llama_block(C));
  const Vec x = rnd(size_t(batch * T * C), 14), w = rnd(size_t(batch * T * C), 15);
  Rig all(block, batch, 51);
  const BlockRun want = run_block(block, all, x, w);
  SECTION("frozen norms: the same ops on the same data, every other result bit for bit") {
    Rig rig(block, batch, 51, [](const ParamSpec& p) { return p.role == DSCPP_ROLE_NORM; });
    const BlockRun got = run_block(block, rig, x, w);
    CHECK(bitwise(got.y, want.y));
    CHECK(bitwise(got.dx, want.dx));
    for (size_t i = 0; i < rig.grads.size(); ++i)
      if (!rig.grads[i].empty()) CHECK(bitwise(rig.grads[i], all.grads[i]));
  }
  SECTION("everything frozen: the input's gradient alone") {
    Rig rig(block, batch, 51, [](const ParamSpec&) { return true; });
    const BlockRun got = run_block(block, rig, x, w);
    CHECK(bitwise(got.y, want.y));
    CHECK(normwise(got.dx, want.dx) <= 1e-6);
  }
}

TEST_CASE("LoRA refuses targets it cannot adapt and reports the ones that matched nothing", "[lora]") {
  LoraSpec spec;
  spec.r = 2;
  Env env;
  env.context = 4;
  auto refused = [&](std::vector<std::string> targets, const std::string& text) {
    spec.targets = std::move(targets);
    Lora lora(spec);
    env.lora = &lora;
    try {
      DecoderBlock block(env, "model.layers.0", llama_block(16));
      TokenEmbedding emb(env, "model", 32, 16, Name("embed_tokens.weight"), normal(0.02f));
      lora.check();
      FAIL("accepted");
    } catch (const Failure& f) {
      INFO(f.message);
      CHECK(f.message.find(text) != std::string::npos);
    }
  };
  refused({"q_proj", "qproj"}, "target \"qproj\" matches no Linear module");
  refused({"q_proj", "qproj"}, "model.layers.*.self_attn.q_proj, model.layers.*.self_attn.k_proj");
  refused({"input_layernorm"}, "model.layers.0.input_layernorm, which is a norm");
  refused({"embed_tokens"}, "model.embed_tokens, which is an embedding");
  spec.regex = true, spec.target_regex = "q_proj";  // a regular expression matches whole names only
  refused({}, "target_regex \"q_proj\" matches no whole Linear module name");
  spec.target_regex = "(";
  CHECK_THROWS_AS(Lora(spec), Failure);
  spec.regex = false, spec.targets = {"q_proj"}, spec.dropout = 0.1;
  CHECK_NOTHROW(Lora(spec));
  for (double p : {1.0, -0.1, 1 - 1e-9, std::nan("")}) {  // 1 − 1e-9 is 1 in fp32, as the op takes it
    spec.dropout = p;
    try {
      Lora l(spec);
      FAIL("accepted lora_dropout " << p);
    } catch (const Failure& f) {
      CHECK(f.message.find("it must be in [0, 1)") != std::string::npos);
    }
  }
  spec.dropout = 0, spec.r = 0;
  CHECK_THROWS_AS(Lora(spec), Failure);
}

TEST_CASE("PEFT's target_modules rules", "[lora]") {
  LoraSpec spec;
  spec.targets = {"q_proj", "mlp.c_proj", "lm_head"};
  const Lora list(spec);
  CHECK(list.matches("model.layers.0.self_attn.q_proj"));
  CHECK(list.matches("q_proj"));
  CHECK(list.matches("lm_head"));
  CHECK(list.matches("transformer.h.1.mlp.c_proj"));
  CHECK_FALSE(list.matches("transformer.h.1.attn.c_proj"));
  CHECK_FALSE(list.matches("model.layers.0.self_attn.xq_proj"));
  spec.regex = true, spec.target_regex = R"(.*\.(q|v)_proj)";
  const Lora regex(spec);
  CHECK(regex.matches("model.layers.0.self_attn.v_proj"));
  CHECK_FALSE(regex.matches("model.layers.0.self_attn.v_proj.x"));
  CHECK_FALSE(regex.matches("q_proj"));
}

}  // namespace
