// Cross-key rules: what DeepSpeed asserts across sections, plus the cases
// DeepSpeed silently ignores but dscpp refuses because the config cannot mean what it says.
#include "configs/resolve.h"
#include "core/dtype.h"
#include "offload/aio_options.h"

#include <fmt/core.h>

namespace dscpp::config {
namespace {

class Rules {
 public:
  explicit Rules(LoadedConfig& c) : c_(c), cfg_(c.config) {}

  void error(const std::string& path, std::string message) {
    auto it = c_.origins.find(path);
    c_.diagnostics.error(path, it == c_.origins.end() ? Location{} : it->second.loc, std::move(message));
  }
  void warning(const std::string& path, std::string message) {
    auto it = c_.origins.find(path);
    c_.diagnostics.warning(path, it == c_.origins.end() ? Location{} : it->second.loc, std::move(message));
  }

  void run() {
    precision();
    zero();
    offload();
    optimizer();
    scheduler();
    misc();
    validate_checked_only(cfg_.checked_only, c_.diagnostics);
  }

 private:
  LoadedConfig& c_;
  DsConfig& cfg_;

  i64 stage() const { return cfg_.zero_optimization.stage; }

  void precision() {
    if (cfg_.fp16.enabled && cfg_.bf16.enabled)
      error("bf16.enabled", "fp16 and bf16 cannot both be enabled; choose one precision");
    if (cfg_.amp.enabled) {
      if (cfg_.fp16.enabled || cfg_.bf16.enabled)
        error("amp.enabled", "apex amp cannot be combined with fp16 or bf16; enable only one of them");
      if (stage() > 0) error("amp.enabled", "apex amp cannot be combined with ZeRO; use fp16 or bf16 instead");
    }
    if (cfg_.fp16.fp16_master_weights_and_grads && stage() == 0)
      error("fp16.fp16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3");
    if (cfg_.fp16.fp16_master_weights_and_grads && !cfg_.fp16.enabled)
      error("fp16.fp16_master_weights_and_grads", "needs fp16.enabled");
    if (cfg_.bf16.bf16_master_weights_and_grads && stage() == 0)
      error("bf16.bf16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3");
    if (cfg_.bf16.bf16_optimizer_states && (stage() == 0 || !cfg_.bf16.bf16_master_weights_and_grads))
      error("bf16.bf16_optimizer_states", "needs ZeRO stage 1, 2 or 3 and bf16.bf16_master_weights_and_grads");
    grad_accum();
  }

  // DeepSpeed 0.19.8's accepted mixes (DeepSpeedEngine._do_optimizer_sanity_check): without
  // ZeRO the gradients accumulate in the model's dtype and any other grad_accum_dtype is an
  // "unsupported mix"; under ZeRO every mix runs, except that its BF16_Optimizer (bf16 with
  // fp32 accumulation at stage 1, the optimizer not offloaded to the CPU) needs the gradient norm.
  void grad_accum() {
    const char* model = cfg_.fp16.enabled ? "fp16" : cfg_.bf16.enabled ? "bf16" : "fp32";
    const std::optional<std::string>& key = cfg_.data_types.grad_accum_dtype;
    const std::optional<DType> accum = key ? parse_dtype(*key) : parse_dtype(model);
    const std::string accum_name = accum ? std::string(dtype_name(*accum)) : key.value_or(model);
    const std::optional<std::string>& ours = cfg_.dscpp.stage0_grad_accum_dtype;
    if (stage() == 0 && key && accum_name != model)
      error("data_types.grad_accum_dtype",
            fmt::format("\"{}\" with {} training at ZeRO stage 0 is a mix DeepSpeed refuses (\"unsupported mix\"): "
                        "without ZeRO, gradients accumulate in the model's dtype ({}). Remove the key, or enable "
                        "ZeRO stage 1, 2 or 3, where DeepSpeed accumulates in the dtype you name{}",
                        *key, model, model,
                        accum_name == "fp32" && std::string(model) != "fp32"
                            ? "; for fp32 accumulation at stage 0 dscpp offers \"dscpp\": "
                              "{\"stage0_grad_accum_dtype\": \"fp32\"} (DeepSpeed ignores that section)"
                            : ""));
    if (stage() == 1 && cfg_.bf16.enabled && accum_name == "fp32" &&
        cfg_.zero_optimization.compute_grad_norm == false && !optimizer_offloaded_to_cpu())
      error(
          "zero_optimization.compute_grad_norm",
          "false is not supported with ZeRO stage 1, bf16 and fp32 gradient accumulation: DeepSpeed's BF16_Optimizer, "
          "which runs that mix, always computes the gradient norm. Remove the key or set it to true, or offload the "
          "optimizer to the CPU");
    if (!ours) return;
    if (stage() != 0)
      error("dscpp.stage0_grad_accum_dtype",
            fmt::format("applies only at ZeRO stage 0 (the stage is {}); under ZeRO set "
                        "data_types.grad_accum_dtype, which DeepSpeed accepts there",
                        stage()));
    else if (!cfg_.fp16.enabled && !cfg_.bf16.enabled)
      error("dscpp.stage0_grad_accum_dtype",
            "applies only with fp16 or bf16 enabled: fp32 training already accumulates in fp32; remove the key");
    else if (key)
      error("dscpp.stage0_grad_accum_dtype",
            "conflicts with data_types.grad_accum_dtype: at stage 0 name the accumulation dtype in one place only; "
            "remove data_types.grad_accum_dtype to accumulate in fp32, or this key to follow DeepSpeed");
  }

  bool optimizer_offloaded_to_cpu() const {
    const auto& o = cfg_.zero_optimization.offload_optimizer;
    return o && o->device == "cpu";
  }

  void zero() {
    const ZeroConfig& z = cfg_.zero_optimization;
    if (z.legacy_stage1)
      error("zero_optimization.legacy_stage1", "the legacy stage 1 implementation was removed; set it to false");
    // DeepSpeed's stage-2 and stage-3 optimizers assert these (stage_1_and_2.py, stage3.py).
    if ((stage() == 2 || stage() == 3) && z.reduce_scatter) {
      if (cfg_.gradient_predivide_factor != 1.0)
        error("gradient_predivide_factor", fmt::format("ZeRO stage {} with reduce_scatter requires "
                                                       "gradient_predivide_factor 1.0", stage()));
      if (cfg_.prescale_gradients)
        error("prescale_gradients",
              fmt::format("ZeRO stage {} with reduce_scatter does not support prescale_gradients", stage()));
    }
    if (cfg_.gradient_allreduce_op == "sum" && stage() == 3)
      error("gradient_allreduce_op", "\"sum\" is not supported with ZeRO stage 3; use \"mean\"");
    auto stage3_only = [&](bool on, const char* key, const char* what) {
      if (on && stage() != 3)
        error(fmt::format("zero_optimization.{}", key),
              fmt::format("{} works only with ZeRO stage 3 (stage is {}); DeepSpeed would ignore it silently", what,
                          stage()));
    };
    stage3_only(z.zero_hpz_partition_size > 1, "zero_hpz_partition_size", "ZeRO++ hierarchical partitioning (hpZ)");
    stage3_only(z.zero_quantized_weights, "zero_quantized_weights", "ZeRO++ quantized weights (qwZ)");
    stage3_only(z.zero_quantized_gradients, "zero_quantized_gradients", "ZeRO++ quantized gradients (qgZ)");
    stage3_only(z.mics_shard_size > 0, "mics_shard_size", "MiCS sharding");
  }

  void offload() {
    const ZeroConfig& z = cfg_.zero_optimization;
    if (z.offload_param && z.offload_param->device != "none") {
      // DeepSpeed ignores it silently below stage 3; a config that ran there must still run.
      if (stage() != 3)
        warning("zero_optimization.offload_param",
                fmt::format("parameter offload works only with ZeRO stage 3 (stage is {}): ignored, as DeepSpeed "
                            "ignores it. Use stage 3 to offload parameters, or offload_optimizer at stages 1-2",
                            stage()));
      if (z.offload_param->device == "nvme" && !z.offload_param->nvme_path)
        error("zero_optimization.offload_param.nvme_path",
              "device \"nvme\" needs nvme_path (a directory on the NVMe drive)");
    }
    if (z.offload_optimizer && z.offload_optimizer->device != "none") {
      const auto& o = *z.offload_optimizer;
      if (stage() == 0)
        error("zero_optimization.offload_optimizer", "optimizer offload needs ZeRO stage 1, 2 or 3 (stage is 0)");
      if (o.buffer_count < 1 || o.buffer_count > 1024)
        error("zero_optimization.offload_optimizer.buffer_count",
              fmt::format("must be between 1 and 1024, found {}", o.buffer_count));
      if (o.device == "nvme" && !o.nvme_path)
        error("zero_optimization.offload_optimizer.nvme_path",
              "device \"nvme\" needs nvme_path (a directory on the NVMe drive)");
      if (o.device == "nvme" && stage() != 3)
        error("zero_optimization.offload_optimizer.device",
              "NVMe optimizer offload (ZeRO-Infinity) needs ZeRO stage 3");
      if (cfg_.optimizer && cfg_.zero_force_ds_cpu_optimizer) {
        OptimizerKind k = cfg_.optimizer->kind;
        bool cpu_capable = k == OptimizerKind::adam || k == OptimizerKind::adamw || k == OptimizerKind::adagrad ||
                           k == OptimizerKind::lion;
        if (!cpu_capable)
          error("optimizer.type",
                fmt::format("optimizer offload runs DeepSpeed's CPU optimizers (Adam, AdamW, Adagrad, "
                            "Lion); {} has none. Use one of those or set "
                            "zero_force_ds_cpu_optimizer to false",
                            cfg_.optimizer->type));
      }
    }
    // The `aio` section drives only the NVMe swap's I/O engine: what the engine refuses is an
    // error where a run would start one; elsewhere nothing reads the section.
    const bool nvme = (z.offload_param && z.offload_param->device == "nvme" && stage() == 3) ||
                      (z.offload_optimizer && z.offload_optimizer->device == "nvme");
    const AioConfig& aio = cfg_.aio;
    for (const offload::AioProblem& p :
         offload::aio_problems(aio.block_size, aio.queue_depth, aio.intra_op_parallelism)) {
      const std::string text = fmt::format("expected {}, found {}", p.expected, p.found);
      if (nvme)
        error(p.key, text);
      else
        warning(p.key, text + " (unused without NVMe offload, which would refuse it)");
    }
    if (z.offload_optimizer && z.offload_optimizer->ratio < 1.0 && stage() != 3)
      error("zero_optimization.offload_optimizer.ratio",
            fmt::format("partial offload (ratio {} < 1) needs ZeRO stage 3, found stage {}; set stage to 3 or ratio "
                        "to 1",
                        z.offload_optimizer->ratio, stage()));
  }

  void optimizer() {
    if (!cfg_.optimizer) return;
    const OptimizerConfig& o = *cfg_.optimizer;
    const OptimizerParams& p = o.params;
    if (p.max_grad_norm)
      error("optimizer.params.max_grad_norm",
            "not an optimizer parameter; set the top-level \"gradient_clipping\" instead");
    bool onebit = o.kind == OptimizerKind::onebit_adam || o.kind == OptimizerKind::zero_one_adam ||
                  o.kind == OptimizerKind::onebit_lamb;
    if (onebit && stage() > 0)
      error("optimizer.type", fmt::format("{} cannot be combined with ZeRO (stage {}); use stage 0", o.type, stage()));
    if (stage() > 0 && !onebit && !zero_supported_optimizer(o.kind) && !cfg_.zero_allow_untested_optimizer)
      error("optimizer.type", fmt::format("{} is not one of the optimizers tested with ZeRO (Adam, AdamW, Adagrad, "
                                          "Lion, Muon); set zero_allow_untested_optimizer to true to use it anyway",
                                          o.type));
    if (p.betas.size() != 2)
      error("optimizer.params.betas", fmt::format("expected two values [beta1, beta2], found {}", p.betas.size()));
    // The schema admits [0, 1]; torch's optimizers (and DeepSpeed's fused ones) raise for 1.
    for (double b : p.betas)
      if (b >= 1.0)
        error("optimizer.params.betas", fmt::format("each beta must be below 1 (torch refuses 1), found {}", b));
    if (o.kind == OptimizerKind::lamb && p.min_coeff > p.max_coeff)
      error("optimizer.params.min_coeff", fmt::format("must not exceed max_coeff ({}), found {}", p.max_coeff,
                                                      p.min_coeff));
    if (o.kind == OptimizerKind::sgd && p.nesterov && (p.momentum <= 0 || p.dampening != 0))
      error("optimizer.params.nesterov",
            fmt::format("Nesterov momentum needs momentum > 0 and dampening 0 (torch.optim.SGD), found momentum {} "
                        "and dampening {}",
                        p.momentum, p.dampening));
    if (p.etas.size() != 2) error("optimizer.params.etas", "expected two values [eta_minus, eta_plus]");
    if (p.step_sizes.size() != 2) error("optimizer.params.step_sizes", "expected two values [min, max]");
    if (p.amsgrad && (o.kind == OptimizerKind::adam || o.kind == OptimizerKind::adamw) && !p.torch_adam &&
        !(cfg_.zero_optimization.offload_optimizer && cfg_.zero_optimization.offload_optimizer->device != "none"))
      error("optimizer.params.amsgrad", "FusedAdam does not support amsgrad; set torch_adam to true to use it");
  }

  void scheduler() {
    if (!cfg_.scheduler) return;
    const SchedulerConfig& s = *cfg_.scheduler;
    const SchedulerParams& p = s.params;
    if (p.total_num_steps && (s.kind == SchedulerKind::warmup_decay_lr || s.kind == SchedulerKind::warmup_cosine_lr) &&
        *p.total_num_steps < p.warmup_num_steps)
      warning("scheduler.params.total_num_steps",
              fmt::format("total_num_steps {} is less than warmup_num_steps {}: the schedule never leaves warmup",
                          *p.total_num_steps, p.warmup_num_steps));
    if (s.kind == SchedulerKind::one_cycle && p.cycle_min_lr.size() && p.cycle_max_lr.size() &&
        p.cycle_min_lr.size() != p.cycle_max_lr.size())
      error("scheduler.params.cycle_max_lr", "cycle_min_lr and cycle_max_lr must list the same number of groups");
  }

  void misc() {
    if (cfg_.zero_optimization.reflow && !cfg_.bf16.enabled)
      error("zero_optimization.reflow", "ReFlow runs with bf16 model parameters only; enable bf16");
    if (cfg_.vocabulary_size && *cfg_.vocabulary_size % 8 != 0)
      warning("vocabulary_size",
              fmt::format("{} is not a multiple of 8; tensor-core GEMMs run slower", *cfg_.vocabulary_size));
    if (cfg_.aio.use_gds)
      error("aio.use_gds",
            "GPUDirect Storage needs CUDA and the cuFile library; dscpp does not implement it, set it to false");
  }
};

// DeepSpeed 0.18.3+ can keep the ZeRO master copy in 16 bits; dscpp's master weights and
// optimizer state are always fp32, so a run with these keys would plan (and use) more memory
// per parameter than the user sized the job for. The figures are per parameter, with Adam.
void low_precision_master(const DsConfig& c, std::vector<std::string>& out) {
  auto master_16bit = [&](bool on, const char* dtype) {
    if (on)
      out.push_back(fmt::format(
          "{0}.{0}_master_weights_and_grads: true (DeepSpeed keeps the ZeRO master weights and their gradients in "
          "{0}, 2 bytes each instead of 4, with Adam's moments in fp32 through ZeRO-Offload's DeepSpeedCPUAdam: "
          "10 bytes per parameter of master weights and optimizer state; dscpp keeps fp32 master weights and fp32 "
          "optimizer state, 12 bytes per parameter. Remove the key or set it to false)",
          dtype));
  };
  master_16bit(c.bf16.bf16_master_weights_and_grads, "bf16");
  if (c.bf16.bf16_optimizer_states)
    out.emplace_back(
        "bf16.bf16_optimizer_states: true (DeepSpeed keeps Adam's two moments in bf16 beside bf16 master weights: "
        "6 bytes per parameter of master weights and optimizer state; dscpp keeps both in fp32, 12 bytes per "
        "parameter. Remove the key or set it to false)");
  master_16bit(c.fp16.fp16_master_weights_and_grads, "fp16");
}

// Keys whose value would change what the user gets from the run (files, loaded weights, log
// records) where dscpp cannot give it; docs/architecture.md has the table of every key
// accepted without effect and why each is harmless.
void without_effect(const DsConfig& c, std::vector<std::string>& out) {
  if (c.checkpoint.load_universal)
    out.emplace_back(
        "checkpoint.load_universal: true (DeepSpeed loads a universal checkpoint, converted by ds_to_universal, "
        "from the tag latest_universal names; dscpp reads its own checkpoints, which already load at any ZeRO stage "
        "and world size. Remove the key or set it to false)");
  if (c.checkpoint.use_node_local_storage)
    out.emplace_back(
        "checkpoint.use_node_local_storage: true (DeepSpeed saves each node's files to storage local to the node; "
        "dscpp commits a checkpoint from rank 0 and needs save_dir on a filesystem every rank shares. Remove the key "
        "or set it to false)");
  const ZeroConfig& z = c.zero_optimization;
  if (!z.load_from_fp32_weights && z.stage > 0 && (c.fp16.enabled || c.bf16.enabled))
    out.emplace_back(
        "zero_optimization.load_from_fp32_weights: false (DeepSpeed rebuilds the fp32 master weights from the "
        "checkpoint's 16-bit weights; dscpp always restores the saved fp32 master. Remove the key or set it to "
        "true)");
  if (c.comms_logger.enabled && c.comms_logger.debug)
    out.emplace_back(
        "comms_logger.debug: true (DeepSpeed records each operation under the name of the function that called "
        "it; dscpp's summary groups operations by kind and message size only. Remove the key or set it to false)");
}

}  // namespace

void check_rules(LoadedConfig& c) {
  Rules(c).run();
}

std::vector<std::string> monitors_not_written(const DsConfig& c) {
  std::vector<std::string> out;
  auto monitor = [&](bool on, const char* key, const char* service) {
    if (on)
      out.push_back(
          fmt::format("{}.enabled: true: dscpp writes nothing to {} (it logs to the vendor's service, which "
                      "a native run does not reach); the same scalars go to TensorBoard event files "
                      "(\"tensorboard\": {{\"enabled\": true}}) and CSV files (csv_monitor)",
                      key, service));
  };
  monitor(c.wandb.enabled, "wandb", "Weights & Biases");
  monitor(c.comet.enabled, "comet", "Comet");
  return out;
}

std::vector<std::string> unsupported_features(const DsConfig& c) {
  std::vector<std::string> out = unsupported_enabled_features(c.checked_only);
  auto add = [&](bool on, const char* what) {
    if (on) out.emplace_back(what);
  };
  const ZeroConfig& z = c.zero_optimization;
  add(c.amp.enabled, "amp.enabled (NVIDIA apex amp; use fp16 or bf16)");
  add(c.torch_autocast.enabled, "torch_autocast.enabled (torch autocast)");
  add(c.hifloat8.enabled, "hifloat8.enabled (HiFloat8 training on Ascend NPUs)");
  add(c.sparse_gradients, "sparse_gradients (sparse embedding gradients)");
  add(c.sequence_parallel_size.value_or(1) > 1, "sequence_parallel_size > 1 (sequence parallelism)");
  add(z.mics_shard_size > 0, "zero_optimization.mics_shard_size (MiCS)");
  add(z.zenflow.has_value(), "zero_optimization.zenflow (ZenFlow)");
  add(z.reflow.has_value(), "zero_optimization.reflow (ReFlow)");
  if (c.optimizer) {
    const OptimizerKind k = c.optimizer->kind;
    if (k != OptimizerKind::adam && k != OptimizerKind::adamw && k != OptimizerKind::lamb &&
        k != OptimizerKind::sgd && k != OptimizerKind::adagrad && k != OptimizerKind::lion)
      out.push_back(fmt::format("optimizer.type {} (dscpp implements Adam, AdamW, Lamb, SGD, Adagrad and Lion)",
                                c.optimizer->type));
  }
  if (c.scheduler) {
    const SchedulerConfig& s = *c.scheduler;
    const SchedulerKind k = s.kind;
    if (k != SchedulerKind::warmup_lr && k != SchedulerKind::warmup_decay_lr && k != SchedulerKind::warmup_cosine_lr &&
        k != SchedulerKind::one_cycle && k != SchedulerKind::lr_range_test)
      out.push_back(fmt::format("scheduler.type {} (a torch.optim.lr_scheduler class; dscpp runs DeepSpeed's WarmupLR, "
                                "WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest)",
                                s.type));
    // DeepSpeed takes one value per parameter group; dscpp trains one group.
    auto one_group = [&](const std::vector<double>& values, const char* key) {
      if (values.size() > 1)
        out.push_back(fmt::format("scheduler.params.{} with {} values (dscpp trains one parameter group: give one)",
                                  key, values.size()));
    };
    one_group(s.params.warmup_min_lr, "warmup_min_lr");
    one_group(s.params.warmup_max_lr, "warmup_max_lr");
    one_group(s.params.cycle_min_lr, "cycle_min_lr");
    one_group(s.params.cycle_max_lr, "cycle_max_lr");
    one_group(s.params.lr_range_test_min_lr, "lr_range_test_min_lr");
  }
  const bool adam =
      c.optimizer && (c.optimizer->kind == OptimizerKind::adam || c.optimizer->kind == OptimizerKind::adamw);
  add(adam && c.optimizer->params.amsgrad, "optimizer.params.amsgrad (dscpp's Adam has no AMSGrad variant)");
  add(z.zeropp_loco_param && z.zero_quantized_gradients,
      "zero_optimization.zeropp_loco_param with qgZ (LoCo error feedback is not implemented; remove the section and "
      "qgZ runs without it)");
  add(z.offload_optimizer && z.offload_optimizer->super_offload,
      "zero_optimization.offload_optimizer.super_offload (SuperOffload)");
  // The runtime always averages over the data-parallel ranks; summing would silently train
  // with gradients world times smaller than asked for.
  add(c.gradient_allreduce_op == "sum",  // the schema stores the canonical spelling
      "gradient_allreduce_op \"sum\" (dscpp-runtime averages gradients over the ranks; use \"mean\")");
  auto int8 = [](const std::optional<std::string>& t) { return t && (*t == "int8" || *t == "torch.int8"); };
  add(int8(c.data_types.grad_accum_dtype),
      "data_types.grad_accum_dtype int8 (gradients accumulate in fp32, fp16 or bf16)");
  add(int8(c.communication_data_type), "communication_data_type int8 (gradients travel in fp32, fp16 or bf16)");
  low_precision_master(c, out);
  without_effect(c, out);
  return out;
}

}  // namespace dscpp::config
