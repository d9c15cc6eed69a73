// What a checked config resolves to, for the runtime to run: each plan turns the keys of one
// concern into typed values once, with DeepSpeed's defaults applied, so the runtime never reads
// the keys themselves or re-checks them (the checks are configs/rules.cpp's).
#pragma once

#include "configs/ds_config.h"
#include "configs/load.h"
#include "core/dtype.h"
#include "offload/aio_options.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dscpp::config {

// Where offloaded state goes: zero_optimization.offload_optimizer / offload_param "device".
enum class OffloadDevice { none, cpu, nvme };
const char* offload_device_name(OffloadDevice d);
// The section's device (none when the section is absent); the schema admits only these three.
OffloadDevice optimizer_offload_device(const ZeroConfig& z);
OffloadDevice param_offload_device(const ZeroConfig& z);

// The type the layers compute in: bf16 for bf16.enabled, f16 for fp16.enabled, else f32. It never
// throws, so the runtime may ask before the config's refusals are reported (the plugin is told its
// compute dtype before the step count is known); on the device it is the ops table's dtype where
// the table computes in 16 bits and the GEMMs' rounding (runtime/rank_device.h, where
// DSCPP_COMPUTE_DTYPE and DSCPP_GEMM_MATH override it).
DType compute_precision(const DsConfig& c);

// Mixed precision: fp16 / bf16 / data_types / communication_data_type.
struct PrecisionPlan {
  DType compute = DType::f32;  // compute_precision
  DType params = DType::f32;   // fp16.enabled → f16, bf16.enabled → bf16
  // data_types.grad_accum_dtype, else (stage 0) dscpp.stage0_grad_accum_dtype, else
  // DeepSpeed 0.19.8's default: the parameters' dtype, bf16 without ZeRO included.
  DType grads = DType::f32;
  // communication_data_type, else bf16 for bf16 without ZeRO (the gradients' dtype, and with
  // dscpp's fp32 accumulation still bf16 on the wire), else unset: the gradients' own dtype.
  std::optional<DType> wire;
};
PrecisionPlan precision_plan(const DsConfig& c);

// ---- ZeRO ------------------------------------------------------------------------------

// How the data-parallel ranks combine their gradients (runtime/zero/grad_reducer.h says how each runs).
enum class GradReduction {
  allreduce,         // stage 0: whole buckets, every rank keeps the whole sum
  into_whole_array,  // stage 1: accumulated locally, each group reduce-scattered once per step into
                     // this rank's slice of the whole gradient array
  into_partition,    // stages 2-3: per micro-step, through staging buffers, into a gradient partition
};

// What a ZeRO stage partitions, decided once from zero_optimization.stage (DeepSpeed's stages:
// 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters), with the
// section's bucket and overlap settings. The engine and its parts (GradReducer, ParamStore,
// MasterWeights, the memory plan) read these facts instead of comparing stage numbers; `stage`
// itself stays for what reports it (logs, checkpoint metadata, messages, the estimator's rows).
struct ZeroPlan {
  int stage = 0;
  bool optimizer_partitioned = false;   // each rank steps (and keeps the state of) its slice
  bool gradients_partitioned = false;   // each rank keeps only its slice of the reduced gradients
  bool parameters_partitioned = false;  // each rank keeps its slice; layers gather theirs to run
  GradReduction reduction = GradReduction::allreduce;

  int64_t reduce_bucket_elements = 500000000;     // reduce_bucket_size
  int64_t allgather_bucket_elements = 500000000;  // allgather_bucket_size
  bool reduce_scatter = true;
  bool overlap_comm = false;                   // overlap_comm, on by default at stage 3 only
  int64_t sub_group_size = 0;                  // optimizer sub-groups at stage 3; 0: one per group
  bool quantized_gradients = false;            // qgZ (stage 3)
  bool gather_16bit_weights_on_save = false;   // stage 3: save gathers the 16-bit weights

  // The stage's plan with DeepSpeed's default settings; throws for a stage outside 0-3 (the
  // config check refuses those first).
  static ZeroPlan for_stage(int stage);
  // Partitions of the flat layout: one per rank once anything is partitioned.
  int parts(int world_size) const { return optimizer_partitioned ? world_size : 1; }
};
ZeroPlan zero_plan(const ZeroConfig& z);

// Stage 3's gather and persistence knobs and ZeRO++'s parameter switches (meaningful only when
// parameters are partitioned; DeepSpeed's defaults otherwise).
struct Stage3Plan {
  int64_t prefetch_bucket_size = 50000000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  int64_t param_persistence_threshold = 100000;
  int64_t model_persistence_threshold = INT64_MAX;
  bool quantized_weights = false;  // qwZ: gathers send int8
  int hpz_partition_size = 1;      // hpZ: > 1 keeps a secondary copy per group of that many ranks
};
// Throws naming the key when zero_hpz_partition_size does not divide `world_size`.
Stage3Plan stage3_plan(const ZeroConfig& z, int world_size);

// ---- offload ---------------------------------------------------------------------------

// The `aio` section as the I/O engine takes it (aio.use_gds was refused by the config check).
offload::AioOptions aio_options(const AioConfig& aio);

// zero_optimization.offload_optimizer, with `aio`.
struct OptimizerOffloadPlan {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  int buffer_count = 4;
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  double ratio = 1.0;  // the share of the sub-groups offloaded (the first ones); < 1 at stage 3 only
  offload::AioOptions aio;
};
OptimizerOffloadPlan optimizer_offload_plan(const DsConfig& c);

// zero_optimization.offload_param, with `aio`. Below stage 3 DeepSpeed ignores offload_param
// silently (the config check warns): the plan is then device none.
struct ParamOffloadPlan {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;  // elements per buffer
  int64_t max_in_cpu = 1000000000;  // elements of swappable slices kept in host memory
  bool pin_memory = true;
  offload::AioOptions aio;  // the swap minimum is max(1 MiB, aio.block_size)
  // Appended to the job id of the swap directory: a rank's second parameter store (the frozen
  // parameters) swaps beside the first, not into it.
  std::string swap_suffix;
};
ParamOffloadPlan param_offload_plan(const DsConfig& c);

// ---- loss scaling ----------------------------------------------------------------------

enum class LossScaleRule { none, fixed, zero, legacy };
const char* rule_name(LossScaleRule rule);

struct LossScalePlan {
  LossScaleRule rule = LossScaleRule::none;
  double init_scale = 1.0;              // none: 1; fixed: loss_scale; dynamic: 2^initial_scale_power
  int64_t scale_window = 1000;          // clean steps per doubling (dynamic rules)
  int64_t hysteresis = 1;               // overflows absorbed before halving ("delayed_shift"; zero rule only)
  bool consecutive_hysteresis = false;  // zero rule: refill hysteresis on every clean step
  double min_scale = 1.0;               // floor of the dynamic rules
  bool raise_at_min_scale = false;      // zero rule: an overflow at min_scale is an error (DeepSpeed: always)
};
// The scaler DeepSpeed builds for this config: bf16 or fp32 -> none; fp16 -> fixed when
// fp16.loss_scale > 0, else zero (ZeRO stage >= 1) or legacy (stage 0), with the fp16 block's
// values (whose defaults configs/ already fills in).
//
// Documentation over code: DeepSpeed v0.16.4 passes the fp16 values to the ZeRO scaler only
// if the fp16 block names at least one of initial_scale_power, loss_scale_window,
// hysteresis, consecutive_hysteresis, min_loss_scale; `"fp16": {"enabled": true}` alone gets
// the class defaults (initial scale 2^32, hysteresis 1). The documentation promises 2^16 and
// hysteresis 2 in every case, and DeepSpeed >= 0.17.1 does the same, so this follows the
// documentation: the configured (or default) values always apply.
LossScalePlan loss_scale_plan(const DsConfig& c);

// ---- the whole run ---------------------------------------------------------------------

// train_batch_size = micro × gradient_accumulation_steps × world, resolved by the loader.
struct BatchPlan {
  int64_t micro = 1;
  int64_t gas = 1;
  int64_t train_batch = 1;
  bool drop_last = false;  // dataloader_drop_last
};

// How the mean over the data-parallel ranks is taken: prescale_gradients and
// gradient_predivide_factor as DeepSpeed 0.19.8 applies them at each stage (gradient_scaling).
// `pre` and `post` multiply in the communication dtype, as DeepSpeed converts before it scales:
// where the 1/world falls decides what can overflow an fp16 sum and what rounds on the wire.
struct GradScaling {
  bool world_in_loss = false;  // d(loss) carries the 1/world, so the reduction is a plain sum
  double pre = 1.0;            // × each rank's gradients before the reduction
  double post = 1.0;           // × the reduced sum after it
  // "key: why" where DeepSpeed refuses the keys with this plan; empty otherwise.
  std::string refused;
};
// The two keys on `zero` over `world` ranks (plans.cpp names the DeepSpeed function of each case).
GradScaling gradient_scaling(const ZeroPlan& zero, bool prescale, double predivide_factor, int world);

struct GradientPlan {
  double clipping = 0;  // gradient_clipping; <= 0: none
  GradScaling scaling;  // prescale_gradients, gradient_predivide_factor and the stage's mean
  bool check_bf16_overflow = false;  // bf16.check_grad_overflow
};

// Everything the runtime takes from a checked config. Sections that need no resolving (the
// optimizer's and scheduler's typed parameters, the profilers and monitors) come as they are.
// The optimizer's parameter groups and the LR schedule without a "scheduler" block
// (DscppConfig's no_weight_decay and lr_scheduler_type, resolved).
struct OptimizerGroupsPlan {
  bool no_decay_bias = false, no_decay_norm = false, no_decay_embedding = false;
  bool any() const { return no_decay_bias || no_decay_norm || no_decay_embedding; }
};
struct DefaultSchedulePlan {
  std::string type = "constant";  // an HF Trainer lr_scheduler_type (kDefaultScheduleTypes)
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
};

struct TrainPlan {
  std::string file_name;       // the config's, for messages
  std::string effective_json;  // every key with its value, stored in checkpoints
  BatchPlan batch;
  ZeroPlan zero;
  Stage3Plan stage3;
  PrecisionPlan precision;
  LossScalePlan loss_scale;
  GradientPlan gradients;
  OptimizerOffloadPlan optimizer_offload;
  ParamOffloadPlan param_offload;
  std::optional<OptimizerConfig> optimizer;
  std::optional<SchedulerConfig> scheduler;
  OptimizerGroupsPlan groups;
  DefaultSchedulePlan default_schedule;  // when `scheduler` is unset
  std::optional<ActivationCheckpointingConfig> activation_checkpointing;  // the section's presence turns it on
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  FlopsProfilerConfig flops_profiler;
  TensorboardConfig csv_monitor;
  TensorboardConfig tensorboard;
  CommsLoggerConfig comms_logger;
  // For the out-of-memory advice, which plans other settings exactly as a run would: this
  // config's zero_optimization at each stage, and the offload a `{"device": "cpu"}` section gives.
  std::array<ZeroPlan, 4> zero_at_stage;
  OptimizerOffloadPlan cpu_optimizer_offload;
  ParamOffloadPlan cpu_param_offload;
};
// Throws for what needs the world to be known (hpZ's group size).
TrainPlan train_plan(const LoadedConfig& loaded, int world_size);

}  // namespace dscpp::config
