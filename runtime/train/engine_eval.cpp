// Evaluation and the plugin's report: forward-only passes over the eval split, and the
// forward pass the runtime lends the plugin on rank 0. At ZeRO stage 3 a forward pass gathers
// parameters collectively, so the other ranks follow every pass rank 0 makes.
//
// --eval_only (ZeRO-Inference): the engine was built without gradients, optimizer state or
// training data; the weights come from a checkpoint or a safetensors file, and one evaluation
// is the whole run. With stage 3 and offload_param the device holds only the gathered layers.
#include "runtime/train/engine.h"

#include "checkpoint/checkpoint_dir.h"
#include "configs/plans.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/device_math.h"

#include <cstdio>
#include <filesystem>

namespace dscpp::runtime {

void Engine::run_eval_only() {
  const auto t0 = std::chrono::steady_clock::now();
  if (!options_.load_dir.empty() && !options_.init_from.empty())
    fail("--eval_only: give the weights once, with --load_dir ({}) or --init_from ({}), not both", options_.load_dir,
         options_.init_from);
  const InitialWeights init = initial_weights();
  if (options_.load_dir.empty() && init.path.empty()) {
    if (world_.rank() == 0)
      log::warn("--eval_only without --load_dir or --init_from: evaluating the freshly initialised weights (seed {})",
                options_.seed);
    initialise_params();
  } else if (options_.load_dir.empty()) {
    if (init.partial) initialise_params();  // what the file lacks keeps its init rule
    load_initial_weights(init, world_, checkpoint_view());
  } else {
    load_checkpoint(ckpt::tag_dir_to_load(options_.load_dir, options_.load_tag), world_, checkpoint_view());
  }
  if (plugin_.data().eval_size == 0) fail("--eval_only: model {} has no eval split", plugin_.name());
  EvalResult r;
  try {
    r = evaluate();
  } catch (const OutOfDeviceMemory& e) {
    out_of_memory(e);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (world_.rank() == 0)
    log::info("eval only: loss {:.6f}, accuracy {:.2f}%{} {} in {:.2f} s, weights from {}", r.loss,
              100 * r.accuracy, perplexity_text(r), counted_text(r), secs,
              !options_.load_dir.empty() ? options_.load_dir
                                         : !init.path.empty() ? init.path : "initialisation");
  params_->home().flush();
  log_memory_peaks();
}

void Engine::eval_out_of_memory(const OutOfDeviceMemory& e) {
  // Training's advice (stages, optimizer state) does not apply: only gathered layers and activations are here.
  const int64_t elem = static_cast<int64_t>(dtype_size(plan_.precision.params));
  fail(
      "{}\n--eval_only: this rank needs its gathered layers (the largest group alone is {}; planned parameters on "
      "the device: {}) plus activations and buffers for micro-batch {} ({}). Raise --device_memory_limit, lower "
      "train_micro_batch_size_per_gpu or stage3_prefetch_bucket_size{}.",
      e.what(), format_bytes(layout_.max_group_numel * elem),
      format_bytes(memory_plan_.bytes[static_cast<size_t>(MemCategory::params)]), plan_.batch.micro,
      format_bytes(memory_plan_.bytes[static_cast<size_t>(MemCategory::activations)] +
                   memory_plan_.bytes[static_cast<size_t>(MemCategory::buffers)]),
      plan_.zero.parameters_partitioned && plan_.param_offload.device != OffloadDevice::none
          ? ""
          : ", or use zero_optimization stage 3 with offload_param cpu or nvme so that the partitions leave the "
            "device");
}

EvalResult Engine::evaluate() {
  const dscpp_data_desc& d = plugin_.data();
  std::vector<unsigned char> input(static_cast<size_t>(plan_.batch.micro * d.input_numel * 4));
  std::vector<int32_t> target(static_cast<size_t>(plan_.batch.micro * d.target_numel));
  DeviceBuffer dinput(device_, input.size(), MemCategory::buffers);
  DeviceBuffer dtarget(device_, target.size() * 4, MemCategory::buffers);
  // Rank r evaluates samples r, r+W, ...: every sample exactly once across the world.
  double totals[3] = {0, 0, 0};  // loss sum, counted, correct
  std::vector<int64_t> mine;
  for (int64_t i = world_.rank(); i < d.eval_size; i += world_.size()) mine.push_back(i);
  // At stage 3 a forward pass is collective (gathers): every rank runs as many batches as the
  // rank with the most samples, the others following the gathers without computing.
  int64_t batches = (static_cast<int64_t>(mine.size()) + plan_.batch.micro - 1) / plan_.batch.micro;
  if (plan_.zero.parameters_partitioned && world_.size() > 1) {
    int64_t most = batches;
    world_.allreduce(&most, 1, DType::i64, comm::ReduceOp::max);
    for (int64_t b = batches; b < most; ++b) params_->follow_forward();
  }
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(plan_.batch.micro)) {
    int64_t n = std::min<int64_t>(plan_.batch.micro, static_cast<int64_t>(mine.size() - first));
    for (int64_t k = 0; k < n; ++k)
      plugin_.load_sample(1, mine[first + static_cast<size_t>(k)], input.data() + k * d.input_numel * 4,
                          target.data() + k * d.target_numel);
    device_.copy_from_host(dinput.data(), input.data(), static_cast<size_t>(n * d.input_numel * 4));
    device_.copy_from_host(dtarget.data(), target.data(), static_cast<size_t>(n * d.target_numel) * 4);
    params_->begin_pass(false, false);
    dscpp_metrics m = runner_->forward(dinput.data(), dtarget.as<int32_t>(), n, false, 0);
    totals[0] += m.loss_sum;
    totals[1] += static_cast<double>(m.counted);
    totals[2] += static_cast<double>(m.correct);
  }
  if (world_.size() > 1) world_.allreduce(totals, 3, DType::f64);
  EvalResult r;
  r.counted = static_cast<int64_t>(totals[1]);
  r.loss = totals[1] > 0 ? totals[0] / totals[1] : 0;
  r.accuracy = totals[1] > 0 ? totals[2] / totals[1] : 0;
  return r;
}


namespace {
struct InferContext {
  Engine* engine;
  ParamStore* params;
  LayerRunner* runner;
  Device* device;
  const Plugin* plugin;
  comm::Communicator* announce = nullptr;  // stage 3: tell the other ranks a pass begins
};

int infer_forward(const dscpp_infer* self, const void* inputs_host, int64_t batch, float* outputs_host,
                  dscpp_error* err) {
  auto* ctx = static_cast<InferContext*>(self->runtime);
  try {
    if (batch <= 0 || batch > ctx->runner->max_batch())
      fail("infer forward: batch {} outside 1..{}", batch, ctx->runner->max_batch());
    const dscpp_data_desc& d = ctx->plugin->data();
    DeviceBuffer in(*ctx->device, static_cast<size_t>(batch * d.input_numel * 4), MemCategory::buffers);
    ctx->device->copy_from_host(in.data(), inputs_host, in.bytes());
    if (ctx->announce) {
      int64_t cmd = 1;
      ctx->announce->broadcast(&cmd, 1, DType::i64, 0);
    }
    ctx->params->begin_pass(false, false);
    ctx->runner->forward(in.data(), nullptr, batch, false, 0);
    // The loss layer's output in the compute dtype, handed over as fp32 (the ABI's promise).
    const int64_t n = batch * ctx->runner->last_output_numel();
    const void* out = ctx->runner->last_output();
    DeviceBuffer widened;
    if (ctx->runner->compute_dtype() != DType::f32) {
      widened = DeviceBuffer(*ctx->device, static_cast<size_t>(n) * 4, MemCategory::buffers);
      kernels::math_of(*ctx->device).convert_into(widened.data(), DType::f32, out, ctx->runner->compute_dtype(), n);
      out = widened.data();
    }
    ctx->device->copy_to_host(outputs_host, out, static_cast<size_t>(n) * 4);
    return DSCPP_OK;
  } catch (const std::exception& e) {
    snprintf(err->message, sizeof(err->message), "%s", e.what());
    return DSCPP_E_INTERNAL;
  }
}
}  // namespace

void Engine::report() {
  if (!plugin_.has_report()) return;
  // The plugin reports on rank 0. At stage 3 each of its forward passes is collective, so rank
  // 0 announces every pass (1) and the end (0); the other ranks follow the gathers.
  const bool collective = plan_.zero.parameters_partitioned && world_.size() > 1;
  if (world_.rank() != 0) {
    if (!collective) return;
    for (int64_t cmd = 1; world_.broadcast(&cmd, 1, DType::i64, 0), cmd == 1;) params_->follow_forward();
    return;
  }
  InferContext ctx{this, params_.get(), runner_.get(), &device_, &plugin_, collective ? &world_ : nullptr};
  dscpp_infer infer{&ctx, runner_->max_batch(), infer_forward};
  try {
    plugin_.report(infer);
  } catch (...) {
    int64_t end = 0;
    if (collective) world_.broadcast(&end, 1, DType::i64, 0);
    throw;
  }
  int64_t end = 0;
  if (collective) world_.broadcast(&end, 1, DType::i64, 0);
}


}  // namespace dscpp::runtime
