// prescale_gradients and gradient_predivide_factor at every ZeRO stage: GradReducer on 2 thread
// ranks, driven with the factors configs/plans.cpp's gradient_scaling gives, against DeepSpeed
// 0.19.8's arithmetic written out from its source below (each oracle names the file and
// function it follows, every torch operation one rounding in its tensor's dtype).
//
// The inputs are chosen so that the order of the scaling shows: sums past the dtype's largest
// value (a ×1/world after the sum overflows where one before it does not), full mantissas (a
// predivide factor of 3 rounds) and subnormals (a ÷world before the sum rounds them). A case
// whose arithmetic differs from another order (the 1/world in the loss gradient, or scaling
// before the conversion to the wire dtype) checks that the two disagree on some element, so it
// cannot pass by accident of its inputs. The last case runs the Engine, so that the loss
// gradient's 1/world and the reducer's factors are checked together: one of them too many or
// missing trains off the mean.
#include "checkpoint/safetensors.h"
#include "checkpoint/zero_to_fp32.h"
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "configs/load.h"
#include "configs/plans.h"
#include "core/dtype.h"
#include "core/error.h"
#include "device/device.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/train/engine.h"
#include "runtime/zero/grad_reducer.h"
#include "tests/unit/layer_decls.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#ifndef DSCPP_TEST_MLP_PLUGIN
#error "DSCPP_TEST_MLP_PLUGIN (path of libmlp.so) must be defined by the build"
#endif

using namespace dscpp;
using namespace dscpp::runtime;

namespace {

constexpr int kWorld = 2;

float rnd(DType t, float x) {
  unsigned char bits[4];
  float back = 0;
  convert(&x, DType::f32, bits, t, 1);
  convert(bits, t, &back, DType::f32, 1);
  return back;
}

// The gradient rank `rank` holds at flat element e, before any division by the world, in
// `dtype`. Four kinds by e % 4: a value whose sum over two ranks overflows the dtype, a full
// mantissa in [1, 2), a subnormal, a small value of either sign.
float value(int rank, int64_t e, DType dtype, bool subnormals) {
  const int64_t j = e / 4;
  const double largest = dtype == DType::f16 ? 65504.0 : 3.3895313892515355e38;
  const int min_exp = dtype == DType::f16 ? -24 : dtype == DType::bf16 ? -133 : -149;
  switch (e % 4) {
    case 0: return rnd(dtype, static_cast<float>(largest * (0.6 + 0.01 * static_cast<double>(j % 8 + rank))));
    case 1: return rnd(dtype, 1.0f + std::fmod(0.6180339887f * static_cast<float>(e + 7 * rank + 1), 1.0f));
    case 2:
      if (subnormals) return std::ldexp(static_cast<float>(2 * (j % 8) + 1 + 2 * rank), min_exp);
      [[fallthrough]];
    default: return rnd(dtype, (static_cast<float>(rank) - 0.5f) * 0.1f * static_cast<float>(j % 16 + 1));
  }
}

struct Case {
  int stage = 1;
  bool reduce_scatter = true;
  bool prescale = false;
  double f = 1.0;  // gradient_predivide_factor
  DType grads = DType::f32, wire = DType::f32;
};

// ---- DeepSpeed 0.19.8's arithmetic (deepspeed/runtime/...), per element over the ranks' x ----

// runtime/engine.py DeepSpeedEngine.allreduce_bucket (stage 0) and runtime/zero/stage_1_and_2.py
// DeepSpeedZeroOptimizer.gradient_reduction_w_predivide (stages 1-2, reduce_scatter false): to
// the communication dtype; postscale: mul_(1/f) if f != 1, all_reduce, mul_(f/w) if f != w;
// prescale: ÷w (engine: mul_(1./w), stage_1_and_2: div_(w); the same for w = 2), all_reduce;
// copied back to the gradients' dtype.
float ds_predivide_allreduce(const Case& c, const std::vector<float>& x) {
  const double w = static_cast<double>(x.size());
  float sum = 0;
  for (float xr : x) {
    float t = rnd(c.wire, xr);
    if (c.prescale)
      t = rnd(c.wire, t * static_cast<float>(1.0 / w));
    else if (c.f != 1.0)
      t = rnd(c.wire, t * static_cast<float>(1.0 / c.f));
    sum += t;  // two ranks: the exact sum, rounded once below
  }
  float s = rnd(c.wire, sum);
  if (!c.prescale && c.f != w) s = rnd(c.wire, s * static_cast<float>(c.f / w));
  return rnd(c.grads, s);
}

// runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer.average_tensor, reduce_scatter branch:
// tensor.div_(w) in the gradients' dtype, then allreduce_bucket(divide=False) reduces it in the
// communication dtype; neither key is read.
float ds_average_tensor(const Case& c, const std::vector<float>& x) {
  float sum = 0;
  for (float xr : x) sum += rnd(c.wire, rnd(c.grads, xr / static_cast<float>(x.size())));
  return rnd(c.grads, rnd(c.wire, sum));
}

// runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3.__avg_scatter_contiguous_grads
// (reduce_scatter false): to the communication dtype; postscale: div_(f) if f != 1; div_(w);
// all_reduce; postscale: mul(f) if f != w; to the gradients' dtype. A division by a Python
// scalar runs on the GPU as a multiplication by its reciprocal (PyTorch's div_true_kernel_cuda).
// `literal` false: always mul(f), to the documented mean (DeepSpeed's skip at f == w is a bug).
float avg_scatter_contiguous_grads(const Case& c, const std::vector<float>& x, bool literal) {
  const auto w = static_cast<float>(x.size());
  float sum = 0;
  for (float xr : x) {
    float t = rnd(c.wire, xr);
    if (!c.prescale && c.f != 1.0) t = rnd(c.wire, t * (1.0f / static_cast<float>(c.f)));
    sum += rnd(c.wire, t * (1.0f / w));
  }
  float s = rnd(c.wire, sum);
  if (!c.prescale && (c.f != static_cast<double>(w) || !literal)) s = rnd(c.wire, s * static_cast<float>(c.f));
  return rnd(c.grads, s);
}
float ds_avg_scatter_contiguous_grads(const Case& c, const std::vector<float>& x) {
  return avg_scatter_contiguous_grads(c, x, true);
}
float documented_avg_scatter_contiguous_grads(const Case& c, const std::vector<float>& x) {
  return avg_scatter_contiguous_grads(c, x, false);
}

// ---- dscpp ------------------------------------------------------------------------------

FlatLayout layout_for(const ZeroPlan& zero) {
  Grouping g;
  g.parts = zero.parts(kWorld);
  if (zero.parameters_partitioned)
    g.layer_per_group = true;
  else if (zero.optimizer_partitioned)
    g.max_group_elements = 64;
  using dscpp::test::layer_decl;
  return make_flat_layout({layer_decl("a", {40}), layer_decl("b", {24, 9})}, g);
}

// One micro-step on kWorld thread ranks with the plan's factors; the engine's 1/world in the
// loss gradient is modelled as average_tensor's div_ (what it stands for). Returns the reduced
// gradient of every real element (stages 1-3: from the rank that owns it).
std::map<int64_t, float> reduce(const Case& c, const ZeroPlan& zero, const FlatLayout& layout, bool subnormals) {
  const config::GradScaling scaling = config::gradient_scaling(zero, c.prescale, c.f, kWorld);
  GradReduceOptions opt;
  opt.reduction = zero.reduction;
  opt.reduce_scatter = zero.reduce_scatter;
  opt.pre_scale = scaling.pre;
  opt.post_scale = scaling.post;
  opt.accumulates = false;
  if (c.wire != c.grads) opt.comm_dtype = c.wire;
  std::vector<std::map<int64_t, float>> owned(kWorld);
  test::run_thread_ranks(kWorld, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext ctx = test::group_context(store, "scaling", rank, size);
    comm::Communicator comm(ctx, comm::make_shm_backend(ctx));
    auto device = make_cpu_device();
    GradReducer r(comm, layout, *device, c.grads, opt);
    const size_t esize = dtype_size(c.grads);
    r.begin_micro(true, true);
    for (int l = static_cast<int>(layout.layer_range.size()) - 1; l >= 0; --l) {
      const int64_t first = layout.layer_range[static_cast<size_t>(l)].first;
      auto* g = static_cast<char*>(r.layer_grads(l));
      for (const ParamSlot& s : layout.params) {
        if (s.layer != l) continue;
        for (int64_t e = s.offset; e < s.offset + s.numel; ++e) {
          float v = value(rank, e, c.grads, subnormals);
          if (scaling.world_in_loss) v = rnd(c.grads, v / static_cast<float>(size));
          convert(&v, DType::f32, g + (e - first) * static_cast<int64_t>(esize), c.grads, 1);
        }
      }
      r.layer_done(l);
    }
    r.end_micro();
    for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
      const PartitionGroup& grp = layout.groups[gi];
      const int64_t n = zero.optimizer_partitioned ? grp.part : grp.numel;
      const int64_t begin = zero.optimizer_partitioned ? grp.owned_begin(rank) : grp.begin;
      std::vector<char> host(static_cast<size_t>(n) * esize);
      r.owned_device(static_cast<int>(gi)).copy_to_host(host.data(), r.owned(static_cast<int>(gi)), host.size());
      std::vector<float> f(static_cast<size_t>(n));
      convert(host.data(), c.grads, f.data(), DType::f32, static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) owned[static_cast<size_t>(rank)][begin + i] = f[static_cast<size_t>(i)];
    }
  });
  std::map<int64_t, float> out;
  for (const ParamSlot& s : layout.params)
    for (int64_t e = s.offset; e < s.offset + s.numel; ++e)
      for (const auto& m : owned)
        if (auto it = m.find(e); it != m.end()) out[e] = it->second;  // stage 0: rank 1's, the same
  return out;
}

using Oracle = float (*)(const Case&, const std::vector<float>&);

// Checks every element against `oracle`; some element must also differ from `must_differ`, when
// given (an order of scaling the case exists to tell apart).
void check(const Case& c, Oracle oracle, Oracle must_differ = nullptr, bool subnormals = true) {
  CAPTURE(c.stage, c.reduce_scatter, c.prescale, c.f, dtype_name(c.grads), dtype_name(c.wire));
  ZeroPlan zero = ZeroPlan::for_stage(c.stage);
  zero.reduce_scatter = c.reduce_scatter;
  const FlatLayout layout = layout_for(zero);
  const auto got = reduce(c, zero, layout, subnormals);
  int64_t differ = 0, overflowed = 0;
  for (const auto& [e, v] : got) {
    std::vector<float> x;
    for (int r = 0; r < kWorld; ++r) x.push_back(value(r, e, c.grads, subnormals));
    const float want = oracle(c, x);
    CAPTURE(e, x, want, v);
    REQUIRE(((v == want && std::signbit(v) == std::signbit(want)) || (std::isnan(v) && std::isnan(want))));
    if (must_differ && !(must_differ(c, x) == want)) ++differ;
    overflowed += std::isinf(v);
  }
  CHECK(got.size() == static_cast<size_t>(layout.numel));
  INFO("elements where the order of scaling shows: " << differ << "; overflowed: " << overflowed);
  if (must_differ) CHECK(differ > 0);
}

}  // namespace

TEST_CASE("stages 1-2 without reduce_scatter scale as DeepSpeed's gradient_reduction_w_predivide", "[grad_scaling]") {
  for (int stage : {1, 2})
    for (DType t : {DType::f16, DType::f32}) {
      // Postscale (the default, f = 1 included) sums before its 1/w: the sums of the large
      // values overflow, where a 1/w in the loss would not.
      check({stage, false, false, 1.0, t, t}, ds_predivide_allreduce, ds_average_tensor);
      check({stage, false, false, 3.0, t, t}, ds_predivide_allreduce, ds_average_tensor);
      // Prescale divides before the sum, as the 1/w in the loss does: the same values.
      check({stage, false, true, 1.0, t, t}, ds_predivide_allreduce);
      check({stage, false, true, 3.0, t, t}, ds_predivide_allreduce);
    }
  // fp32 gradients on an fp16 wire: scaled after the conversion, in fp16.
  check({1, false, false, 3.0, DType::f32, DType::f16}, ds_predivide_allreduce, ds_average_tensor);
  check({2, false, true, 1.0, DType::bf16, DType::f32}, ds_predivide_allreduce);
}

TEST_CASE("stages 1-2 with reduce_scatter divide by the world before the sum, as DeepSpeed's average_tensor",
          "[grad_scaling]") {
  for (DType t : {DType::f16, DType::f32}) {
    check({1, true, false, 1.0, t, t}, ds_average_tensor, ds_predivide_allreduce);
    check({2, true, false, 1.0, t, t}, ds_average_tensor, ds_predivide_allreduce);
    // Stage 1 reads neither key there; prescale asks for what happens anyway.
    check({1, true, true, 1.0, t, t}, ds_average_tensor);
    check({1, true, true, 3.0, t, t}, ds_average_tensor);
    // A predivide factor DeepSpeed drops at stage 1 (docs/configs.md): dscpp pre-divides as
    // documented, with gradient_reduction_w_predivide's arithmetic.
    check({1, true, false, 3.0, t, t}, ds_predivide_allreduce, ds_average_tensor);
  }
}

TEST_CASE("stage 3 without reduce_scatter scales as DeepSpeed's __avg_scatter_contiguous_grads", "[grad_scaling]") {
  // The engine's 1/w is in the loss gradient, so a subnormal would round before the 1/f here
  // and after it in DeepSpeed: normal values only.
  for (DType t : {DType::f16, DType::f32}) {
    check({3, false, false, 3.0, t, t}, ds_avg_scatter_contiguous_grads, ds_average_tensor, false);
    check({3, false, true, 3.0, t, t}, ds_avg_scatter_contiguous_grads, nullptr, false);
    // f == w: DeepSpeed skips its mul(f) and leaves the mean divided by w once more; dscpp
    // multiplies back (docs/configs.md).
    check({3, false, false, 2.0, t, t}, documented_avg_scatter_contiguous_grads, ds_avg_scatter_contiguous_grads,
          false);
  }
}

TEST_CASE("stage 0 scales in the communication dtype, after the conversion, as DeepSpeed's allreduce_bucket",
          "[grad_scaling]") {
  // Scaled in the gradients' dtype, before the conversion and after the conversion back.
  const Oracle scaled_in_grads = [](const Case& c, const std::vector<float>& x) {
    float sum = 0;
    for (float xr : x) sum += rnd(c.wire, c.f != 1.0 ? rnd(c.grads, xr * static_cast<float>(1.0 / c.f)) : xr);
    const float s = rnd(c.grads, rnd(c.wire, sum));
    return rnd(c.grads, s * static_cast<float>(c.f / static_cast<double>(x.size())));
  };
  check({0, true, false, 3.0, DType::f32, DType::f16}, ds_predivide_allreduce, scaled_in_grads);
  check({0, true, false, 1.0, DType::f16, DType::f16}, ds_predivide_allreduce, ds_average_tensor);
  check({0, true, true, 3.0, DType::f16, DType::f16}, ds_predivide_allreduce);
}

TEST_CASE("the keys are refused where DeepSpeed refuses them: stages 2-3 with reduce_scatter", "[grad_scaling]") {
  for (int stage : {0, 1, 2, 3})
    for (bool rs : {true, false})
      for (auto [prescale, f] : {std::pair{false, 1.0}, {true, 1.0}, {false, 4.0}}) {
        CAPTURE(stage, rs, prescale, f);
        ZeroPlan z = ZeroPlan::for_stage(stage);
        z.reduce_scatter = rs;
        const bool refused = stage >= 2 && rs && (prescale || f != 1.0);
        CHECK(config::gradient_scaling(z, prescale, f, kWorld).refused.empty() == !refused);
      }
  // Both refusals are the config check's, so a run never starts with a key it would drop.
  config::RunFacts facts;
  facts.world_size = kWorld;
  const auto loaded = config::load_config_text(
      R"({"train_micro_batch_size_per_gpu": 1, "prescale_gradients": true, "optimizer": {"type": "Adam"},
          "zero_optimization": {"stage": 3}})",
      "s3.json", facts);
  REQUIRE_FALSE(loaded.ok());
  CHECK_THAT(loaded.diagnostics.format("s3.json"),
             Catch::Contains("ZeRO stage 3 with reduce_scatter does not support prescale_gradients"));
}

namespace {

namespace fs = std::filesystem;

// The mlp trained `steps` SGD steps (no momentum, no clipping: an update proportional to the
// gradient, so a mean off by a factor shows, as it would not through Adam) on `world` thread
// ranks of `micro` samples each; `zero` is the config's zero_optimization section, `extra`
// more top-level keys. Returns the consolidated fp32 weights, flattened in name order.
std::vector<float> train_sgd(const std::string& zero, const std::string& extra, int world, int micro,
                             const fs::path& dir, double lr = 0.05) {
  const int steps = 4;
  const std::string config = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": {}, "steps_per_print": 100, {} "zero_optimization": {},
           "zero_allow_untested_optimizer": true,
           "optimizer": {{"type": "SGD", "params": {{"lr": {}}}}}}})",
      micro, extra, zero, lr);
  static int run = 0;
  const fs::path save = dir / fmt::format("run{}", run++);
  test::run_thread_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext c = test::group_context(store, "world", rank, size, std::chrono::seconds(120));
    comm::Communicator comm(c, comm::make_shm_backend(c));
    auto device = make_cpu_device();
    const dscpp_ops ops = kernels::cpu_ops(DSCPP_F32, device.get());
    Plugin plugin(DSCPP_TEST_MLP_PLUGIN);
    dscpp_host_info host{};
    host.struct_size = sizeof(host);
    host.rank = rank;
    host.world_size = size;
    host.compute_dtype = DSCPP_F32;
    host.seed = 7;
    host.device_name = "cpu";
    host.log = [](void*, const char*) {};
    plugin.create({"--limit", "512", "--hidden", "37,23"}, host);
    config::RunFacts facts;
    facts.world_size = size;
    facts.total_steps = steps;
    const config::LoadedConfig loaded = config::load_config_text(config, "scaling.json", facts);
    // No Catch2 assertion on a rank thread (they are not thread-safe): a throw reaches the caller.
    if (!loaded.ok()) fail("the test's config was not accepted: {}", loaded.diagnostics.format(loaded.file_name));
    TrainOptions o;
    o.steps = steps;
    o.save_dir = save.string();
    o.eval = false;
    o.seed = 7;
    Engine engine(plugin, config::train_plan(loaded, comm.size()), comm, *device, ops, o);
    engine.run();
  });
  const fs::path out = dir / (save.filename().string() + ".safetensors");
  ckpt::zero_to_fp32(save.string(), out.string());
  ckpt::SafetensorsFile f(out.string());
  std::map<std::string, std::vector<float>> named;
  for (const ckpt::TensorInfo& t : f.tensors()) {
    std::vector<float>& v = named[t.name];
    v.resize(static_cast<size_t>(t.numel));
    f.read(t.name, 0, t.numel, v.data(), DType::f32);
  }
  std::vector<float> all;
  for (const auto& [name, v] : named) all.insert(all.end(), v.begin(), v.end());
  return all;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace

TEST_CASE("the engine trains to the mean whichever side of the sum the keys put the 1/world", "[grad_scaling]") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing checked");
    return;
  }
  char tmpl[] = "/tmp/dscpp_grad_scaling.XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  // Stage 0 on one rank with the global batch of 8: no reduction at all.
  const std::vector<float> ref = train_sgd(R"({"stage": 0})", "", 1, 8, dir);
  // Each with its 1/world in another place: the loss gradient (stage 1 with reduce_scatter),
  // after the sum (stages 1-2 without), before it (prescale), split around it (predivide).
  for (const auto& [zero, extra] : std::vector<std::pair<std::string, std::string>>{
           {R"({"stage": 1})", ""},
           {R"({"stage": 1, "reduce_scatter": false})", ""},
           {R"({"stage": 2, "reduce_scatter": false})", R"("prescale_gradients": true,)"},
           {R"({"stage": 2, "reduce_scatter": false})", R"("gradient_predivide_factor": 4.0,)"},
           {R"({"stage": 1})", R"("gradient_predivide_factor": 4.0,)"},
           {R"({"stage": 3, "reduce_scatter": false})", R"("gradient_predivide_factor": 2.0,)"}}) {
    CAPTURE(zero, extra);
    const double d = max_diff(train_sgd(zero, extra, 2, 4, dir), ref);
    INFO("max |Δw| " << d);
    CHECK(d <= 1e-6);
  }
  // Control: gradients of half the mean (one 1/world too many), which for plain SGD is half
  // the learning rate, land far outside the tolerance.
  const double control = max_diff(train_sgd(R"({"stage": 0})", "", 1, 8, dir, 0.025), ref);
  INFO("control max |Δw| " << control);
  CHECK(control > 1e-4);
  fs::remove_all(dir);
}
