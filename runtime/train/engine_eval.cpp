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

std::string Engine::load_inference_weights() {
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
  return !options_.load_dir.empty() ? options_.load_dir : !init.path.empty() ? init.path : "initialisation";
}

Engine::Inference Engine::prepare_inference() {
  const std::string from = load_inference_weights();
  if (world_.rank() == 0) log::info("generating with ZeRO stage {} on {} rank(s), weights from {}", plan_.zero.stage,
                                    world_.size(), from);
  zero_.model().begin_pass(false, false);
  return Inference{*runner_, zero_.model(), world_, plan_.batch.micro};
}

void Engine::finish_inference() {
  zero_.model().release_all();
  zero_.model().flush();
  log_memory_peaks();
}

void Engine::run_eval_only() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string from = load_inference_weights();
  if (plugin_.data().eval_size == 0) fail("--eval_only: model {} has no eval split", plugin_.name());
  EvalResult r;
  try {
    r = evaluate();
  } catch (const OutOfDeviceMemory& e) {
    out_of_memory(e);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (world_.rank() == 0)
    log::info("eval only: {} in {:.2f} s, weights from {}", format_eval(r, plugin_.data().tokens_per_sample, 6), secs,
              from);
  zero_.model().flush();
  log_memory_peaks();
}

void Engine::eval_out_of_memory(const OutOfDeviceMemory& e) {
  // Training's advice (stages, optimizer state) does not apply: only gathered layers and activations are here.
  const int64_t elem = static_cast<int64_t>(dtype_size(plan_.precision.params));
  fail(
      "{}\n--eval_only: this rank needs its gathered layers (the largest group alone is {}; planned parameters on "
      "the device: {}) plus activations and buffers for micro-batch {} ({}). Raise --device_memory_limit, lower "
      "train_micro_batch_size_per_gpu or stage3_prefetch_bucket_size{}.",
      e.what(), format_bytes(zero_.layout.max_group_numel * elem),
      format_bytes(memory_plan_.bytes[static_cast<size_t>(MemCategory::params)]), plan_.batch.micro,
      format_bytes(memory_plan_.bytes[static_cast<size_t>(MemCategory::activations)] +
                   memory_plan_.bytes[static_cast<size_t>(MemCategory::buffers)]),
      plan_.zero.parameters_partitioned && plan_.param_offload.device != OffloadDevice::none
          ? ""
          : ", or use zero_optimization stage 3 with offload_param cpu or nvme so that the partitions leave the "
            "device");
}

EvalResult Engine::evaluate() {
  EvalResult r = runtime::evaluate(forward_passes());
  if (options_.generation.enabled) evaluate_generation(forward_passes(), options_.generation, r);
  return r;
}

void Engine::report() { run_plugin_report(forward_passes()); }

ForwardPasses Engine::forward_passes() {
  return {plugin_, zero_.model(), *runner_, world_, device_, plan_.batch.micro, plan_.zero.parameters_partitioned};
}

}  // namespace dscpp::runtime
