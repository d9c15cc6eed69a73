#include "configs/plans.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace dscpp::config {

namespace {
// A dtype key the schema accepted (kDtypeChoices) and the rules narrowed to what runs.
DType floating(const std::string& name, const char* key) {
  const std::optional<DType> t = parse_dtype(name);
  if (!t || (*t != DType::f32 && *t != DType::f16 && *t != DType::bf16))
    fail("internal: {} \"{}\" reached the runtime; the config check should have refused it", key, name);
  return *t;
}
OffloadDevice device_named(const std::string& name, const char* key) {
  if (name == "none") return OffloadDevice::none;
  if (name == "cpu") return OffloadDevice::cpu;
  if (name == "nvme") return OffloadDevice::nvme;
  fail("internal: {}.device \"{}\" reached the runtime; the config check should have refused it", key, name);
}
}  // namespace

const char* offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
    case OffloadDevice::none: break;
  }
  return "none";
}

OffloadDevice optimizer_offload_device(const ZeroConfig& z) {
  return z.offload_optimizer ? device_named(z.offload_optimizer->device, "zero_optimization.offload_optimizer")
                             : OffloadDevice::none;
}

OffloadDevice param_offload_device(const ZeroConfig& z) {
  return z.offload_param ? device_named(z.offload_param->device, "zero_optimization.offload_param")
                         : OffloadDevice::none;
}

DType compute_precision(const DsConfig& c) {
  return c.bf16.enabled ? DType::bf16 : c.fp16.enabled ? DType::f16 : DType::f32;
}

PrecisionPlan precision_plan(const DsConfig& c) {
  PrecisionPlan p;
  p.compute = compute_precision(c);
  p.params = p.compute;
  const bool zero = c.zero_optimization.stage > 0;
  if (c.data_types.grad_accum_dtype)
    p.grads = floating(*c.data_types.grad_accum_dtype, "data_types.grad_accum_dtype");
  else if (c.dscpp.stage0_grad_accum_dtype && !zero)
    p.grads = floating(*c.dscpp.stage0_grad_accum_dtype, "dscpp.stage0_grad_accum_dtype");
  else
    p.grads = p.params;
  if (c.communication_data_type)
    p.wire = floating(*c.communication_data_type, "communication_data_type");
  else if (p.params == DType::bf16 && !zero)
    p.wire = DType::bf16;
  return p;
}

ZeroPlan ZeroPlan::for_stage(int stage) {
  if (stage < 0 || stage > 3) fail("zero_optimization.stage must be 0, 1, 2 or 3 (got {})", stage);
  ZeroPlan p;
  p.stage = stage;
  p.optimizer_partitioned = stage >= 1;
  p.gradients_partitioned = stage >= 2;
  p.parameters_partitioned = stage == 3;
  p.reduction = stage == 0   ? GradReduction::allreduce
                : stage == 1 ? GradReduction::into_whole_array
                             : GradReduction::into_partition;
  p.overlap_comm = stage == 3;
  return p;
}

ZeroPlan zero_plan(const ZeroConfig& z) {
  ZeroPlan p = ZeroPlan::for_stage(static_cast<int>(z.stage));
  p.reduce_bucket_elements = z.reduce_bucket_size;
  p.allgather_bucket_elements = z.allgather_bucket_size;
  p.reduce_scatter = z.reduce_scatter;
  p.overlap_comm = z.overlap();
  if (p.parameters_partitioned) {  // the config check refused these below stage 3
    p.sub_group_size = z.sub_group_size;
    p.quantized_gradients = z.zero_quantized_gradients;
    p.gather_16bit_weights_on_save = z.gather_16bit_weights_on_model_save;
  }
  return p;
}

Stage3Plan stage3_plan(const ZeroConfig& z, int world_size) {
  Stage3Plan s3;
  s3.prefetch_bucket_size = z.prefetch_bucket_size;
  s3.max_live_parameters = z.max_live_parameters;
  s3.max_reuse_distance = z.max_reuse_distance;
  s3.param_persistence_threshold = z.param_persistence_threshold;
  s3.model_persistence_threshold = z.model_persistence_threshold;
  if (z.stage != 3) return s3;  // the config check refused ZeRO++ below stage 3
  s3.quantized_weights = z.zero_quantized_weights;
  const int64_t h = z.zero_hpz_partition_size;
  if (h > 1 && (h > world_size || world_size % h != 0))
    fail("zero_optimization.zero_hpz_partition_size is {}: it must divide the number of ranks ({}); hpZ groups are "
         "that many consecutive ranks, normally the ranks of one node",
         h, world_size);
  s3.hpz_partition_size = static_cast<int>(std::max<int64_t>(h, 1));
  return s3;
}

offload::AioOptions aio_options(const AioConfig& a) {
  offload::AioOptions out;
  out.block_size = a.block_size;
  out.queue_depth = static_cast<int>(a.queue_depth);
  out.thread_count = static_cast<int>(a.intra_op_parallelism);
  out.single_submit = a.single_submit;
  out.overlap_events = a.overlap_events;
  return out;
}

OptimizerOffloadPlan optimizer_offload_plan(const DsConfig& c) {
  OptimizerOffloadPlan out;
  const ZeroConfig& z = c.zero_optimization;
  out.device = optimizer_offload_device(z);
  if (out.device == OffloadDevice::none) return out;
  const OffloadOptimizerConfig& o = *z.offload_optimizer;
  // ratio in [0, 1] and < 1 only at stage 3, buffer_count in 1-1024: rules.cpp checked.
  out.ratio = o.ratio;
  out.nvme_path = o.nvme_path.value_or("");
  out.buffer_count = static_cast<int>(o.buffer_count);
  out.pin_memory = o.pin_memory;
  out.pipeline_read = o.pipeline_read;
  out.pipeline_write = o.pipeline_write;
  out.aio = aio_options(c.aio);
  return out;
}

ParamOffloadPlan param_offload_plan(const DsConfig& c) {
  ParamOffloadPlan o;
  const ZeroConfig& z = c.zero_optimization;
  if (!z.offload_param || z.stage != 3) return o;
  const OffloadParamConfig& p = *z.offload_param;
  o.device = param_offload_device(z);
  o.nvme_path = p.nvme_path.value_or("");
  o.buffer_count = p.buffer_count;
  o.buffer_size = p.buffer_size;
  o.max_in_cpu = p.max_in_cpu;
  o.pin_memory = p.pin_memory;
  o.aio = aio_options(c.aio);
  return o;
}

const char* rule_name(LossScaleRule rule) {
  switch (rule) {
    case LossScaleRule::none: return "none";
    case LossScaleRule::fixed: return "static";
    case LossScaleRule::zero: return "dynamic (ZeRO rule)";
    case LossScaleRule::legacy: return "dynamic (stage-0 FP16_Optimizer rule)";
  }
  return "?";
}

LossScalePlan loss_scale_plan(const DsConfig& c) {
  LossScalePlan o;
  const Fp16Config& f = c.fp16;
  if (!f.enabled) return o;  // bf16 or fp32: DeepSpeed's LossScaler(1.0)
  if (f.loss_scale > 0) {
    o.rule = LossScaleRule::fixed;
    o.init_scale = f.loss_scale;
    return o;
  }
  // With its arguments given (always, here), FP16_UnfusedOptimizer (LAMB at stage 0) takes
  // min_loss_scale from the config too; its 0.25 floor applies only without arguments.
  o.rule = c.zero_enabled() ? LossScaleRule::zero : LossScaleRule::legacy;
  o.init_scale = std::ldexp(1.0, static_cast<int>(f.initial_scale_power));
  o.scale_window = f.loss_scale_window;
  o.min_scale = static_cast<double>(f.min_loss_scale);
  if (o.rule == LossScaleRule::zero) {
    o.hysteresis = f.hysteresis;
    o.consecutive_hysteresis = f.consecutive_hysteresis;
    o.raise_at_min_scale = true;
  }
  return o;
}

// DeepSpeed 0.19.8 (f = gradient_predivide_factor, w = the data-parallel world; "postscale" is
// prescale_gradients false; every path converts to communication_data_type before it scales):
//  - stage 0, runtime/engine.py allreduce_bucket, and stages 1-2 with reduce_scatter false,
//    runtime/zero/stage_1_and_2.py gradient_reduction_w_predivide: postscale ×1/f (if f ≠ 1),
//    SUM, ×f/w (if f ≠ w); prescale ×1/w, SUM, f unused.
//  - stages 1-2 with reduce_scatter, stage_1_and_2.py average_tensor: ÷w, then the reduce; both
//    keys unused. The constructor refuses either key at stage 2 only (the check sits under
//    partition_gradients), so stage 1 drops a predivide factor without a word: dscpp applies it
//    as documented, with the stage-0 arithmetic. prescale there is what happens anyway.
//  - stage 3 with reduce_scatter (qgZ included): runtime/zero/stage3.py's constructor refuses both.
//  - stage 3 without, stage3.py __avg_scatter_contiguous_grads and __avg_scatter_grads:
//    postscale ÷f (if f ≠ 1), ÷w, SUM, ×f, except that it skips the ×f when f == w, which
//    leaves the gradients w times too small: dscpp always multiplies back, to the documented
//    mean. prescale ÷w, SUM, f unused.
// A ÷w before the sum is folded into d(loss) (world_in_loss), which the engine scales anyway:
// for a power-of-two world the result is the same, bit for bit, short of subnormals.
GradScaling gradient_scaling(const ZeroPlan& zero, bool prescale, double predivide_factor, int world) {
  GradScaling s;
  const double f = predivide_factor, w = world;
  auto averaged_after = [&] {  // gradient_reduction_w_predivide's
    if (prescale) {
      s.pre = 1.0 / w;
    } else {
      if (f != 1.0) s.pre = 1.0 / f;
      if (f != w) s.post = f / w;
    }
  };
  if (!zero.optimizer_partitioned) {
    averaged_after();
  } else if (zero.parameters_partitioned) {
    if (zero.reduce_scatter || zero.quantized_gradients) {
      if (f != 1.0)
        s.refused =
            "gradient_predivide_factor: ZeRO stage 3 with reduce_scatter requires gradient_predivide_factor 1.0";
      else if (prescale)
        s.refused = "prescale_gradients: ZeRO stage 3 with reduce_scatter does not support prescale_gradients";
    }
    s.world_in_loss = true;
    if (!prescale && f != 1.0) s.pre = 1.0 / f, s.post = f;
  } else if (!zero.reduce_scatter) {
    averaged_after();
  } else if (zero.gradients_partitioned) {
    if (f != 1.0)
      s.refused = "gradient_predivide_factor: ZeRO stage 2 with reduce_scatter requires gradient_predivide_factor 1.0";
    else if (prescale)
      s.refused = "prescale_gradients: ZeRO stage 2 with reduce_scatter does not support prescale_gradients";
    s.world_in_loss = true;
  } else if (prescale || f == 1.0) {
    s.world_in_loss = true;
  } else {
    averaged_after();
  }
  return s;
}

TrainPlan train_plan(const LoadedConfig& loaded, int world_size) {
  const DsConfig& c = loaded.config;
  TrainPlan p;
  p.file_name = loaded.file_name;
  p.effective_json = format_effective_config_json(loaded);
  p.batch.micro = c.train_micro_batch_size_per_gpu.value_or(1);
  p.batch.gas = c.gradient_accumulation_steps.value_or(1);
  p.batch.train_batch = c.train_batch_size.value_or(p.batch.micro * p.batch.gas * world_size);
  if (p.batch.train_batch != p.batch.micro * p.batch.gas * world_size)
    fail("{}: train_batch_size {} is not train_micro_batch_size_per_gpu {} × gradient_accumulation_steps {} × {} "
         "rank{}",
         loaded.file_name, p.batch.train_batch, p.batch.micro, p.batch.gas, world_size, world_size == 1 ? "" : "s");
  p.batch.drop_last = c.dataloader_drop_last;
  p.zero = zero_plan(c.zero_optimization);
  p.stage3 = stage3_plan(c.zero_optimization, world_size);
  p.precision = precision_plan(c);
  p.loss_scale = loss_scale_plan(c);
  p.gradients.clipping = c.gradient_clipping;
  p.gradients.scaling = gradient_scaling(p.zero, c.prescale_gradients, c.gradient_predivide_factor, world_size);
  if (!p.gradients.scaling.refused.empty())
    fail("{}: {} (DeepSpeed refuses it too)", loaded.file_name, p.gradients.scaling.refused);
  p.gradients.check_bf16_overflow = c.bf16.enabled && c.bf16.check_grad_overflow;
  p.optimizer_offload = optimizer_offload_plan(c);
  p.param_offload = param_offload_plan(c);
  p.optimizer = c.optimizer;
  p.scheduler = c.scheduler;
  for (const std::string& role : c.dscpp.no_weight_decay) {
    p.groups.no_decay_bias |= role == "bias";
    p.groups.no_decay_norm |= role == "norm";
    p.groups.no_decay_embedding |= role == "embedding";
  }
  if (c.dscpp.lr_scheduler_type)
    p.default_schedule = {*c.dscpp.lr_scheduler_type, c.dscpp.warmup_steps_, c.dscpp.total_steps_};
  // The section's presence turns checkpointing on (its every key has a default), as the
  // presence of comms_logger turns on its configuration.
  if (loaded.origins.count("activation_checkpointing") > 0) p.activation_checkpointing = c.activation_checkpointing;
  p.steps_per_print = c.steps_per_print;
  p.wall_clock_breakdown = c.wall_clock_breakdown;
  p.flops_profiler = c.flops_profiler;
  p.csv_monitor = c.csv_monitor;
  p.tensorboard = c.tensorboard;
  p.comms_logger = c.comms_logger;
  DsConfig other = c;
  for (int s = 0; s <= 3; ++s) {
    other.zero_optimization.stage = s;
    p.zero_at_stage[static_cast<size_t>(s)] = zero_plan(other.zero_optimization);
  }
  other.zero_optimization.stage = 3;
  other.zero_optimization.offload_optimizer = OffloadOptimizerConfig{};
  other.zero_optimization.offload_optimizer->device = "cpu";
  other.zero_optimization.offload_param = OffloadParamConfig{};
  other.zero_optimization.offload_param->device = "cpu";
  p.cpu_optimizer_offload = optimizer_offload_plan(other);
  p.cpu_param_offload = param_offload_plan(other);
  return p;
}

}  // namespace dscpp::config
