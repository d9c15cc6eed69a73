// The top level, precision, and the runtime sections (checkpoint, monitors, profilers).
#include "configs/ds_config.h"

namespace dscpp::config {

void describe(Visitor& v, Fp16Config& c) {
  v.field("enabled", c.enabled);
  v.field("auto_cast", c.auto_cast);
  v.field("loss_scale", c.loss_scale, kNonNegative);
  v.field("initial_scale_power", c.initial_scale_power, {.min = 0, .max = 127});
  v.field("loss_scale_window", c.loss_scale_window, kPositive);
  v.field("hysteresis", c.hysteresis, kPositive);
  v.field("consecutive_hysteresis", c.consecutive_hysteresis);
  v.field("min_loss_scale", c.min_loss_scale, {.min = 0, .min_exclusive = true});
  v.field("fp16_master_weights_and_grads", c.fp16_master_weights_and_grads);
}

void describe(Visitor& v, Bf16Config& c) {
  v.field("enabled", c.enabled);
  v.field("immediate_grad_update", c.immediate_grad_update);
  v.field("check_grad_overflow", c.check_grad_overflow);
  v.field("bf16_master_weights_and_grads", c.bf16_master_weights_and_grads);
  v.field("bf16_optimizer_states", c.bf16_optimizer_states);
}

void describe(Visitor& v, AmpConfig& c) {
  v.field("enabled", c.enabled);
  v.field("opt_level", c.opt_level, {.choices = {"O0", "O1", "O2", "O3"}});
  v.field("cast_model_type", c.cast_model_type);
  v.field("patch_torch_functions", c.patch_torch_functions);
  v.field("keep_batchnorm_fp32", c.keep_batchnorm_fp32);
  v.field("master_weights", c.master_weights);
  v.field("loss_scale", c.loss_scale);
  v.field("cast_model_outputs", c.cast_model_outputs);
  v.field("num_losses", c.num_losses, kPositive);
  v.field("verbosity", c.verbosity, kNonNegative);
  v.field("min_loss_scale", c.min_loss_scale, kNonNegative);
  v.field("max_loss_scale", c.max_loss_scale, kNonNegative);
}

void describe(Visitor& v, TorchAutocastConfig& c) {
  v.field("enabled", c.enabled);
  v.field("dtype", c.dtype, {.choices = kDtypeChoices});
  v.field("lower_precision_safe_modules", c.lower_precision_safe_modules);
}

void describe(Visitor& v, DataTypesConfig& c) {
  v.field("grad_accum_dtype", c.grad_accum_dtype, {.choices = kDtypeChoices});
  v.field("param_dtype", c.param_dtype, {.choices = kDtypeChoices});
  v.field("buffer_dtype", c.buffer_dtype, {.choices = kDtypeChoices});
}

void describe(Visitor& v, DscppConfig& c) {
  v.field("stage0_grad_accum_dtype", c.stage0_grad_accum_dtype, {.choices = {"fp32"}});
  v.field("no_weight_decay", c.no_weight_decay, {.choices = kNoDecayRoles});
  v.field("lr_scheduler_type", c.lr_scheduler_type, {.choices = kDefaultScheduleTypes});
}

void describe(Visitor& v, ActivationCheckpointingConfig& c) {
  v.field("partition_activations", c.partition_activations);
  v.field("contiguous_memory_optimization", c.contiguous_memory_optimization);
  v.field("cpu_checkpointing", c.cpu_checkpointing);
  v.field("number_checkpoints", c.number_checkpoints, kPositive);
  v.field("synchronize_checkpoint_boundary", c.synchronize_checkpoint_boundary);
  v.field("profile", c.profile);
}

void describe(Visitor& v, CheckpointParallelWriteConfig& c) {
  v.field("pipeline_stage", c.pipeline_stage);
}

void describe(Visitor& v, CheckpointWriterConfig& c) {
  v.field("type", c.type, {.choices = {"FAST", "PYTHON", "MOCK"}, .case_insensitive = true});
  v.field("io_buffer_size", c.io_buffer_size, kPositive);
  v.field("io_buffer_double", c.io_buffer_double);
  v.field("show_statistics", c.show_statistics);
  v.field("data_parallel", c.data_parallel, {.choices = {"REPLICA", "SOCKET", "MACHINE"}, .case_insensitive = true});
  v.field("decoupled", c.decoupled);
  v.field("io_multiplier", c.io_multiplier, kPositive);
}

void describe(Visitor& v, CheckpointConfig& c) {
  v.field("tag_validation", c.tag_validation, {.choices = {"Warn", "Ignore", "Fail"}, .case_insensitive = true});
  v.field("load_universal", c.load_universal);
  v.field("use_node_local_storage", c.use_node_local_storage);
  v.section("parallel_write", c.parallel_write);
  v.field("checkpoint_serialization", c.checkpoint_serialization);
  v.section("writer", c.writer);
}

void describe(Visitor& v, TensorboardConfig& c) {
  v.field("enabled", c.enabled);
  v.field("output_path", c.output_path);
  v.field("job_name", c.job_name);
}

void describe(Visitor& v, WandbConfig& c) {
  v.field("enabled", c.enabled);
  v.field("group", c.group);
  v.field("team", c.team);
  v.field("project", c.project);
}

void describe(Visitor& v, CometConfig& c) {
  v.field("enabled", c.enabled);
  v.field("samples_log_interval", c.samples_log_interval, kPositive);
  v.field("project", c.project);
  v.field("workspace", c.workspace);
  v.field("api_key", c.api_key);
  v.field("experiment_name", c.experiment_name);
  v.field("experiment_key", c.experiment_key);
  v.field("online", c.online);
  v.field("mode", c.mode, {.choices = {"get", "create", "get_or_create"}});
}

void describe(Visitor& v, CommsLoggerConfig& c) {
  v.field("enabled", c.enabled);
  v.field("verbose", c.verbose);
  v.field("prof_all", c.prof_all);
  v.field("debug", c.debug);
  v.field("prof_ops", c.prof_ops);
}

void describe(Visitor& v, FlopsProfilerConfig& c) {
  v.field("enabled", c.enabled);
  v.field("recompute_fwd_factor", c.recompute_fwd_factor, kNonNegative);
  v.field("profile_step", c.profile_step, kPositive);
  v.field("module_depth", c.module_depth, {.min = -1});
  v.field("top_modules", c.top_modules, kPositive);
  v.field("detailed", c.detailed);
  v.field("output_file", c.output_file);
}

void describe(Visitor& v, ThroughputTimerConfig& c) {
  v.field("enabled", c.enabled);
  v.field("synchronized", c.synchronized);
}

void describe(Visitor& v, TimersConfig& c) {
  v.section("throughput", c.throughput, {.strict = true});
}

void describe(Visitor& v, HiFloat8Recipe& c) {
  v.field("input_dst_type_max", c.input_dst_type_max, kNonNegative);
  v.field("weight_dst_type_max", c.weight_dst_type_max, kNonNegative);
  v.field("grad_dst_type_max", c.grad_dst_type_max, kNonNegative);
  v.field("scale_policy", c.scale_policy);
  v.field("compute_dtype", c.compute_dtype, {.choices = kDtypeChoices});
}

void describe(Visitor& v, HiFloat8Config& c) {
  v.field("enabled", c.enabled);
  v.field("backend", c.backend);
  v.field("module_name_patterns", c.module_name_patterns);
  v.field("min_numel", c.min_numel, kNonNegative);
  v.section("config", c.config);
}

void describe(Visitor& v, DsConfig& c) {
  v.field("train_batch_size", c.train_batch_size, kPositive);
  v.field("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, kPositive);
  v.field("gradient_accumulation_steps", c.gradient_accumulation_steps, kPositive);
  v.field("managed_gradient_accumulation", c.managed_gradient_accumulation);
  v.field("steps_per_print", c.steps_per_print, {.min = 1, .infinity_ok = true});
  v.field("gradient_clipping", c.gradient_clipping, kNonNegative);
  v.field("prescale_gradients", c.prescale_gradients);
  v.field("gradient_predivide_factor", c.gradient_predivide_factor, {.min = 0, .min_exclusive = true});
  v.field("gradient_allreduce_op", c.gradient_allreduce_op, {.choices = {"mean", "sum"}, .case_insensitive = true});
  v.field("communication_data_type", c.communication_data_type,
          {.choices = {"fp32", "fp16", "bf16"}, .case_insensitive = true});
  v.field("seq_parallel_communication_data_type", c.seq_parallel_communication_data_type,
          {.alias = "seq_parallel_comm_data_type", .choices = {"fp32", "fp16", "bf16"}, .case_insensitive = true});
  v.field("sparse_gradients", c.sparse_gradients);
  v.field("zero_allow_untested_optimizer", c.zero_allow_untested_optimizer);
  v.field("zero_force_ds_cpu_optimizer", c.zero_force_ds_cpu_optimizer);
  v.field("wall_clock_breakdown", c.wall_clock_breakdown);
  v.field("memory_breakdown", c.memory_breakdown);
  v.field("dump_state", c.dump_state);
  v.field("disable_allgather", c.disable_allgather);
  v.field("vocabulary_size", c.vocabulary_size, kPositive);
  v.field("dataloader_drop_last", c.dataloader_drop_last);
  v.field("graph_harvesting", c.graph_harvesting);
  v.field("use_data_before_expert_parallelism", c.use_data_before_expert_parallelism);
  v.field("allgather_size", c.allgather_size, kNonNegative);
  v.field("sequence_parallel_size", c.sequence_parallel_size, kPositive);
  v.field("data_parallel_size", c.data_parallel_size, kPositive);
  v.field("log_level", c.log_level,
          {.choices = {"debug", "info", "warning", "error", "critical"}, .case_insensitive = true});

  v.section("zero_optimization", c.zero_optimization, {.strict = true});
  v.section("fp16", c.fp16, {.strict = true});
  v.section("bf16", c.bf16, {.alias = "bfloat16", .strict = true});
  v.section("amp", c.amp);
  v.section("torch_autocast", c.torch_autocast);
  v.section("data_types", c.data_types);
  v.section("dscpp", c.dscpp, {.strict = true});
  v.section("optimizer", c.optimizer);
  v.section("scheduler", c.scheduler);
  v.section("activation_checkpointing", c.activation_checkpointing);
  v.section("checkpoint", c.checkpoint);
  v.section("aio", c.aio);
  v.section("tensorboard", c.tensorboard, {.strict = true});
  v.section("csv_monitor", c.csv_monitor, {.strict = true});
  v.section("wandb", c.wandb, {.strict = true});
  v.section("comet", c.comet, {.strict = true});
  v.section("comms_logger", c.comms_logger, {.strict = true});
  v.section("flops_profiler", c.flops_profiler);
  v.section("timers", c.timers);
  v.section("hifloat8", c.hifloat8);
  describe_checked_only(v, c.checked_only);
}

}  // namespace dscpp::config
