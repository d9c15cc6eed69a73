// DeepSpeed's JSON config as typed structs. Defaults are DeepSpeed's (current release,
// v0.19.5); where DeepSpeed's code contradicts its documentation, the documented value is
// used and the field says so. The keys of each struct are listed once, in the describe()
// functions (schema_*.cpp), which every reader/printer shares.
#pragma once

#include "configs/ds_checked_only.h"
#include "configs/schema.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::config {

using i64 = std::int64_t;
constexpr i64 kMaxInt = std::numeric_limits<i64>::max();  // Python's sys.maxsize

// ---- precision -----------------------------------------------------------------------
struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0;  // 0 = dynamic, > 0 = static
  i64 initial_scale_power = 16;
  i64 loss_scale_window = 1000;
  i64 hysteresis = 2;
  bool consecutive_hysteresis = false;
  i64 min_loss_scale = 1;
  bool fp16_master_weights_and_grads = false;
};

struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
  bool check_grad_overflow = true;
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
};

// NVIDIA apex amp: the keys are apex.amp.initialize's keyword arguments.
struct AmpConfig {
  bool enabled = false;
  std::optional<std::string> opt_level;
  std::optional<std::string> cast_model_type;
  std::optional<bool> patch_torch_functions;
  std::optional<bool> keep_batchnorm_fp32;
  std::optional<bool> master_weights;
  std::optional<JsonValue> loss_scale;  // a number or "dynamic"
  std::optional<bool> cast_model_outputs;
  i64 num_losses = 1;
  i64 verbosity = 1;
  std::optional<double> min_loss_scale;
  double max_loss_scale = 16777216.0;  // 2^24
};

struct TorchAutocastConfig {
  bool enabled = false;
  std::optional<std::string> dtype;
  std::vector<std::string> lower_precision_safe_modules;
};

struct DataTypesConfig {
  std::optional<std::string> grad_accum_dtype;  // fp32|fp16|bf16; null = by precision mode
  std::optional<std::string> param_dtype;
  std::optional<std::string> buffer_dtype;
};

// The "dscpp" section: choices of dscpp's own that DeepSpeed does not offer. DeepSpeed does not
// read the section, so the same file still runs there, with DeepSpeed's behaviour.
struct DscppConfig {
  // "fp32": at ZeRO stage 0 with fp16 or bf16, accumulate gradients in fp32 (more exact over
  // many micro-steps) where DeepSpeed accumulates in the model's dtype and refuses
  // data_types.grad_accum_dtype "fp32".
  std::optional<std::string> stage0_grad_accum_dtype;
  // The parameter roles weight decay skips ("bias", "norm", "embedding": include/dscpp/model.h's
  // dscpp_param_role). Unset: none when the config has an "optimizer" block (DeepSpeed's one
  // parameter group); biases and norms when dscpp fills the optimizer in (the HF Trainer's groups).
  // An empty list given in the file decays every parameter.
  std::vector<std::string> no_weight_decay;
  // The LR schedule without a "scheduler" block, by the HF Trainer's lr_scheduler_type name.
  // Unset: "linear" when dscpp fills the optimizer in (the HF Trainer's default), else
  // "constant" (DeepSpeed keeps the optimizer's LR).
  std::optional<std::string> lr_scheduler_type;
  // Resolved from the run's facts, not keys: that schedule's warmup and optimizer steps (0: unknown).
  i64 warmup_steps_ = 0;
  i64 total_steps_ = 0;
};

// ---- optimizer -----------------------------------------------------------------------
enum class OptimizerKind {
  adam,
  adamw,
  lamb,
  onebit_adam,
  zero_one_adam,
  onebit_lamb,
  lion,
  adagrad,
  muadam,
  muadamw,
  musgd,
  muon,  // DeepSpeed's own names
  sgd,
  rmsprop,
  adadelta,
  adamax,
  nadam,
  radam,
  asgd,
  rprop,
  sparse_adam,  // torch.optim
};

// One struct for every optimizer's parameters; which keys a type accepts, and their
// defaults, follow the type (see schema_optimizer.cpp).
struct OptimizerParams {
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool bias_correction = true;
  bool amsgrad = false;
  bool set_grad_none = true;
  bool torch_adam = false;
  bool adam_w_mode = true;
  bool fp32_optimizer_states = true;
  bool eps_inside_sqrt = false;
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  i64 freeze_step = 100000;
  bool cuda_aware = false;
  std::string comm_backend_name = "nccl";
  i64 var_freeze_step = 100000;
  i64 var_update_scaler = 16;
  i64 local_step_scaler = 32678;
  i64 local_step_clipper = 16;
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  bool maximize = false;
  std::optional<bool> foreach;
  bool differentiable = false;
  bool capturable = false;
  std::optional<bool> fused;
  double lr_decay = 0;
  double initial_accumulator_value = 0;
  double alpha = 0.99;  // RMSprop smoothing; ASGD power (0.75)
  bool centered = false;
  double rho = 0.9;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;
  double lambd = 1e-4;
  double t0 = 1e6;
  std::vector<double> etas = {0.5, 1.2};
  std::vector<double> step_sizes = {1e-6, 50};
  i64 ns_steps = 5;
  std::optional<double> muon_lr;  // Muon: lr of the matrix parameters (else lr)
  std::optional<double> adam_lr;  // Muon: lr of the parameters it updates with Adam
  std::string ns_method = "newton_schulz";
  bool per_head_muon = false;
  std::optional<double> max_grad_norm;  // rejected: clipping is the top-level gradient_clipping
};

struct OptimizerConfig {
  std::string type;
  OptimizerKind kind = OptimizerKind::adam;
  OptimizerParams params;
  bool legacy_fusion = false;
  // Adam with adam_w_mode (DeepSpeed's default) or AdamW: decoupled weight decay.
  bool decoupled_weight_decay() const;
  std::string defaults_for_;  // the type whose defaults `params` holds (schema bookkeeping)
};

// ---- scheduler -----------------------------------------------------------------------
enum class SchedulerKind {
  warmup_lr,
  warmup_decay_lr,
  warmup_cosine_lr,
  one_cycle,
  lr_range_test,  // DeepSpeed's
  step_lr,
  multi_step_lr,
  exponential_lr,
  cosine_annealing_lr,
  cosine_annealing_warm_restarts,
  constant_lr,
  linear_lr,
  polynomial_lr,
  cyclic_lr,
  one_cycle_lr,
  reduce_lr_on_plateau,  // torch
};

struct SchedulerParams {
  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  std::vector<double> warmup_min_lr = {0.0};
  std::vector<double> warmup_max_lr;  // empty = the optimizer's lr
  i64 warmup_num_steps = 1000;
  std::string warmup_type = "log";
  std::optional<i64> total_num_steps;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  i64 last_batch_iteration = -1;
  // OneCycle
  std::vector<double> cycle_min_lr;
  std::vector<double> cycle_max_lr;
  double decay_lr_rate = 0;
  i64 cycle_first_step_size = 2000;
  std::optional<i64> cycle_second_step_size;
  i64 cycle_first_stair_count = 0;
  std::optional<i64> cycle_second_stair_count;
  i64 decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
  // LRRangeTest
  std::vector<double> lr_range_test_min_lr = {1e-3};
  i64 lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  // torch.optim.lr_scheduler
  std::optional<i64> step_size;
  std::vector<i64> milestones;
  std::optional<double> gamma;
  std::optional<i64> T_max;
  std::optional<i64> T_0;
  i64 T_mult = 1;
  double eta_min = 0;
  double factor = 1.0 / 3;
  std::optional<i64> total_iters;
  double start_factor = 1.0 / 3;
  double end_factor = 1.0;
  double power = 1.0;
  std::vector<double> base_lr;
  std::vector<double> max_lr;
  i64 step_size_up = 2000;
  std::optional<i64> step_size_down;
  std::string mode = "triangular";
  std::string scale_mode = "cycle";
  double base_momentum = 0.8;
  double max_momentum = 0.9;
  std::optional<i64> total_steps;
  std::optional<i64> epochs;
  std::optional<i64> steps_per_epoch;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  i64 patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";
  i64 cooldown = 0;
  std::vector<double> min_lr = {0.0};
  double eps = 1e-8;
  i64 last_epoch = -1;
};

struct SchedulerConfig {
  std::string type;
  SchedulerKind kind = SchedulerKind::warmup_lr;
  SchedulerParams params;
  std::string defaults_for_;
};

// ---- ZeRO ----------------------------------------------------------------------------
struct OffloadParamConfig {
  std::string device = "none";  // none | cpu | nvme
  std::optional<std::string> nvme_path;
  i64 buffer_count = 5;
  i64 buffer_size = 100000000;
  i64 max_in_cpu = 1000000000;
  bool pin_memory = true;
};

struct OffloadOptimizerConfig {
  std::string device = "none";
  std::optional<std::string> nvme_path;
  i64 buffer_count = 4;
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
  bool super_offload = false;
  double cpuadam_cores_perc = 0.8;
  bool pipeline() const { return pipeline_read || pipeline_write; }
};

struct ZenFlowConfig {
  double topk_ratio = 0.1;
  std::string select_strategy = "auto";
  std::optional<JsonValue> select_interval;  // an integer or "auto"
  std::optional<JsonValue> update_interval;  // an integer or "auto"
  bool overlap_step = false;
  bool offload = false;
  double auto_ratio = 0.99;
  i64 full_warm_up_rounds = 0;
  double pt_reserved_cores_perc = 0.5;
  std::optional<i64> steps_per_epoch;
};

struct LocoConfig {
  double err_beta = 0.8;
  i64 reset_T = 1024;
};

struct LeafModuleConfig {
  std::vector<std::string> classes;
  std::vector<std::string> names;
  std::vector<std::string> name_suffixes;
};

// ReFlow: CPU-side optimizer-step scheduling for offloaded stage 3 (needs bf16).
struct ReflowConfig {
  bool enable_cpu_affinity = false;
  std::optional<i64> main_thread_cores;
  std::optional<i64> bucketwise_cores_per_worker;
  std::optional<i64> state_update_cores;
};

struct ZeroConfig {
  i64 stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  i64 reduce_bucket_size = 500000000;
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  i64 allgather_bucket_size = 500000000;
  std::optional<bool> overlap_comm;  // null = on for stage 3 only
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  std::optional<OffloadParamConfig> offload_param;
  std::optional<OffloadOptimizerConfig> offload_optimizer;
  i64 sub_group_size = 1000000000;
  i64 prefetch_bucket_size = 50000000;
  i64 param_persistence_threshold = 100000;
  i64 model_persistence_threshold = kMaxInt;
  i64 max_live_parameters = 1000000000;
  i64 max_reuse_distance = 1000000000;
  bool gather_16bit_weights_on_model_save = false;
  i64 module_granularity_threshold = 0;
  bool use_all_reduce_for_fetch_params = false;
  bool allgather_sequential = false;
  bool ignore_unused_parameters = true;
  bool legacy_stage1 = false;
  bool round_robin_gradients = false;
  i64 zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  std::optional<LocoConfig> zeropp_loco_param;
  i64 mics_shard_size = -1;
  bool mics_hierarchical_params_gather = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
  bool enable_sanity_checks = false;
  bool save_muon_momentum_buffer_in_memory = false;
  std::optional<ZenFlowConfig> zenflow;
  LeafModuleConfig leaf_module;
  std::optional<ReflowConfig> reflow;
  // Shown in DeepSpeed's documented zero_optimization template but read by no release.
  std::optional<bool> compute_grad_norm;
  std::optional<bool> parameter_alignment;
  // Deprecated spellings, mapped onto the fields above after reading.
  std::optional<bool> cpu_offload;
  std::optional<bool> cpu_offload_param;
  std::optional<bool> cpu_offload_use_pin_memory;
  std::optional<bool> gather_fp16_weights_on_model_save;

  bool overlap() const { return overlap_comm.value_or(stage == 3); }
  std::string optimizer_offload_device() const { return offload_optimizer ? offload_optimizer->device : "none"; }
  std::string param_offload_device() const { return offload_param ? offload_param->device : "none"; }
};

struct AioConfig {
  i64 block_size = 1048576;
  i64 queue_depth = 8;
  i64 intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

// ---- runtime sections ----------------------------------------------------------------
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
  bool cpu_checkpointing = false;
  std::optional<i64> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

struct CheckpointParallelWriteConfig {
  bool pipeline_stage = false;
};

struct CheckpointWriterConfig {
  std::string type = "FAST";  // MOCK | PYTHON | FAST
  i64 io_buffer_size = 64 * 1024 * 1024;
  bool io_buffer_double = true;
  bool show_statistics = false;
  std::optional<std::string> data_parallel;  // REPLICA | SOCKET | MACHINE
  bool decoupled = false;
  i64 io_multiplier = 1;
};

struct CheckpointConfig {
  std::string tag_validation = "Warn";  // Ignore | Warn | Fail
  bool load_universal = false;
  bool use_node_local_storage = false;
  CheckpointParallelWriteConfig parallel_write;
  bool checkpoint_serialization = true;
  std::optional<CheckpointWriterConfig> writer;
};

struct TensorboardConfig {  // also csv_monitor
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct WandbConfig {
  bool enabled = false;
  std::optional<std::string> group;
  std::optional<std::string> team;
  std::string project = "deepspeed";
};

struct CometConfig {
  bool enabled = false;
  i64 samples_log_interval = 100;
  std::optional<std::string> project;
  std::optional<std::string> workspace;
  std::optional<std::string> api_key;
  std::optional<std::string> experiment_name;
  std::optional<std::string> experiment_key;
  std::optional<bool> online;
  std::optional<std::string> mode;
};

struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;
};

struct FlopsProfilerConfig {
  bool enabled = false;
  double recompute_fwd_factor = 0.0;
  i64 profile_step = 1;
  i64 module_depth = -1;
  i64 top_modules = 1;
  bool detailed = true;
  std::optional<std::string> output_file;
};

struct ThroughputTimerConfig {
  bool enabled = true;
  bool synchronized = true;
};

struct TimersConfig {
  ThroughputTimerConfig throughput;
};

// HiFloat8 training (Ascend NPUs): which modules run in the 8-bit format, and its recipe.
struct HiFloat8Recipe {
  std::optional<double> input_dst_type_max;
  std::optional<double> weight_dst_type_max;
  std::optional<double> grad_dst_type_max;
  std::optional<std::string> scale_policy;
  std::optional<std::string> compute_dtype;
};

struct HiFloat8Config {
  bool enabled = false;
  std::optional<std::string> backend;
  std::vector<std::string> module_name_patterns;
  i64 min_numel = 0;
  std::optional<HiFloat8Recipe> config;
};

// ---- the whole config ----------------------------------------------------------------
struct DsConfig {
  std::optional<i64> train_batch_size;
  std::optional<i64> train_micro_batch_size_per_gpu;
  std::optional<i64> gradient_accumulation_steps;
  bool managed_gradient_accumulation = true;
  i64 steps_per_print = 10;  // DeepSpeed's docs; Infinity (Accelerate) = never
  double gradient_clipping = 1.0;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::string gradient_allreduce_op = "mean";
  std::optional<std::string> communication_data_type;
  std::string seq_parallel_communication_data_type = "fp32";
  bool sparse_gradients = false;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool dump_state = false;
  bool disable_allgather = false;
  std::optional<i64> vocabulary_size;
  bool dataloader_drop_last = false;
  bool graph_harvesting = false;
  bool use_data_before_expert_parallelism = false;
  i64 allgather_size = 500000000;
  std::optional<i64> sequence_parallel_size;
  std::optional<i64> data_parallel_size;
  std::optional<std::string> log_level;

  ZeroConfig zero_optimization;
  Fp16Config fp16;
  Bf16Config bf16;
  AmpConfig amp;
  TorchAutocastConfig torch_autocast;
  DataTypesConfig data_types;
  DscppConfig dscpp;
  std::optional<OptimizerConfig> optimizer;
  std::optional<SchedulerConfig> scheduler;
  ActivationCheckpointingConfig activation_checkpointing;
  CheckpointConfig checkpoint;
  AioConfig aio;
  TensorboardConfig tensorboard;
  TensorboardConfig csv_monitor;
  WandbConfig wandb;
  CometConfig comet;
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  TimersConfig timers;
  HiFloat8Config hifloat8;
  CheckedOnlyConfig checked_only;  // sections dscpp validates but does not run (ds_checked_only.h)

  // ZeRO stage > 0.
  bool zero_enabled() const { return zero_optimization.stage > 0; }
};

void describe(Visitor& v, DsConfig& c);
void describe(Visitor& v, ZeroConfig& c);
void describe(Visitor& v, OffloadParamConfig& c);
void describe(Visitor& v, OffloadOptimizerConfig& c);
void describe(Visitor& v, ZenFlowConfig& c);
void describe(Visitor& v, LocoConfig& c);
void describe(Visitor& v, LeafModuleConfig& c);
void describe(Visitor& v, ReflowConfig& c);
void describe(Visitor& v, HiFloat8Config& c);
void describe(Visitor& v, HiFloat8Recipe& c);
void describe(Visitor& v, AioConfig& c);
void describe(Visitor& v, Fp16Config& c);
void describe(Visitor& v, Bf16Config& c);
void describe(Visitor& v, AmpConfig& c);
void describe(Visitor& v, TorchAutocastConfig& c);
void describe(Visitor& v, DataTypesConfig& c);
void describe(Visitor& v, DscppConfig& c);
void describe(Visitor& v, OptimizerConfig& c);
void describe(Visitor& v, SchedulerConfig& c);
void describe(Visitor& v, ActivationCheckpointingConfig& c);
void describe(Visitor& v, CheckpointParallelWriteConfig& c);
void describe(Visitor& v, CheckpointWriterConfig& c);
void describe(Visitor& v, CheckpointConfig& c);
void describe(Visitor& v, TensorboardConfig& c);
void describe(Visitor& v, WandbConfig& c);
void describe(Visitor& v, CometConfig& c);
void describe(Visitor& v, CommsLoggerConfig& c);
void describe(Visitor& v, FlopsProfilerConfig& c);
void describe(Visitor& v, ThroughputTimerConfig& c);
void describe(Visitor& v, TimersConfig& c);

// The canonical spelling of an optimizer/scheduler type, or nullopt if unknown.
std::optional<OptimizerKind> optimizer_kind(const std::string& type);
std::optional<SchedulerKind> scheduler_kind(const std::string& type);
std::vector<std::string> optimizer_type_names();
std::vector<std::string> scheduler_type_names();
// Optimizers DeepSpeed's ZeRO runs without zero_allow_untested_optimizer.
bool zero_supported_optimizer(OptimizerKind kind);

}  // namespace dscpp::config
