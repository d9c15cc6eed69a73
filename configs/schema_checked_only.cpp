// Schema of the sections dscpp validates but does not run (ds_checked_only.h); their rules are in
// rules_checked_only.cpp.
#include "configs/diagnostics.h"
#include "configs/ds_checked_only.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dscpp::config {

namespace {

const char* const kMoqLegacy =
    "legacy MoQ setting: DeepSpeed no longer reads it (use compression_training.weight_quantization)";

const std::vector<const char*> kSymmetry = {"symmetric", "asymmetric"};
const std::vector<const char*> kCurriculumSchedules = {"fixed_linear", "fixed_root", "fixed_discrete", "custom"};

// Free-form fields where "auto" is one of the values DeepSpeed itself understands (the
// reader otherwise treats "auto" as a placeholder for HF/Accelerate to fill in).
const FieldOpts kAutoOk{.choices = {"auto"}};

FieldOpts at_least(double lo) {
  return FieldOpts{.min = lo};
}
FieldOpts one_of(std::vector<const char*> choices) {
  return FieldOpts{.choices = std::move(choices)};
}

}  // namespace

// ---- describe ------------------------------------------------------------------------

void describe(Visitor& v, PipelineConfig& c) {
  v.field("stages", c.stages, kAutoOk);
  v.field("partition", c.partition);
  v.field("seed_layers", c.seed_layers);
  v.field("activation_checkpoint_interval", c.activation_checkpoint_interval, at_least(0));
  v.field("pipe_partitioned", c.pipe_partitioned);
  v.field("grad_partitioned", c.grad_partitioned);
  v.field("use_reentrant", c.use_reentrant);
}

void describe(Visitor& v, TpConfig& c) {
  v.field("tp_size", c.tp_size, at_least(1));
  v.field("tp_grain_size", c.tp_grain_size, at_least(1));
  v.field("mpu", c.mpu);
  v.field("tp_group", c.tp_group);
}

void describe(Visitor& v, TensorParallelConfig& c) {
  v.field("dtype", c.dtype, one_of(kDtypeChoices));
  v.field("autotp_size", c.autotp_size, at_least(0));
  v.field("tp_overlap_comm", c.tp_overlap_comm);
  v.section("tp", c.tp, {.alias = "tensor_parallel"});
  v.field("injection_policy_tuple", c.injection_policy_tuple);
  v.field("partition_config", c.partition_config);
  v.field("preset_model", c.preset_model);
  v.field("keep_module_on_host", c.keep_module_on_host);
  v.field("replace_with_kernel_inject", c.replace_with_kernel_inject, {.alias = "kernel_inject"});
  v.field("vocab_parallel_lm_head", c.vocab_parallel_lm_head);
}

void describe(Visitor& v, HybridEngineConfig& c) {
  v.field("enabled", c.enabled);
  v.field("max_out_tokens", c.max_out_tokens, at_least(1));
  v.field("inference_tp_size", c.inference_tp_size, at_least(1));
  v.field("release_inference_cache", c.release_inference_cache);
  v.field("pin_parameters", c.pin_parameters);
  v.field("tp_gather_partition_size", c.tp_gather_partition_size, at_least(1));
  v.field("enable_cuda_graph", c.enable_cuda_graph);
}

void describe(Visitor& v, CompileConfig& c) {
  v.field("deepcompile", c.deepcompile);
  v.field("autoep_non_moe", c.autoep_non_moe);
  v.field("free_activation", c.free_activation);
  v.field("free_activation_threshold", c.free_activation_threshold, at_least(0));
  v.field("offload_activation", c.offload_activation);
  v.field("offload_activation_pin_memory", c.offload_activation_pin_memory);
  v.field("offload_opt_states", c.offload_opt_states);
  v.field("double_buffer", c.double_buffer);
  v.field("symmetric_memory", c.symmetric_memory);
  v.field("debug_log", c.debug_log);
  v.field("offload_parameters", c.offload_parameters);
  v.field("sync_before_reduce", c.sync_before_reduce);
  v.field("sync_after_reduce", c.sync_after_reduce);
  v.field("sync_before_allgather", c.sync_before_allgather);
  v.field("sync_after_allgather", c.sync_after_allgather);
  v.field("keep_int_input_tensors", c.keep_int_input_tensors);
  v.field("keep_all_input_tensors", c.keep_all_input_tensors);
  v.field("passes", c.passes, one_of({"z1", "z3", "autosp", "autotp"}));
}

void describe(Visitor& v, WeightQuantizationConfig& c) {
  v.field("enabled", c.enabled);
  v.field("num_bits", c.num_bits, at_least(1));
  v.field("q_type", c.q_type, one_of(kSymmetry));
  v.field("q_groups", c.q_groups, at_least(1));
  v.field("quantized_initialization", c.quantized_initialization);
  v.field("post_init_quant", c.post_init_quant);
}

void describe(Visitor& v, SparseAttentionConfig& c) {
  v.field("mode", c.mode, one_of({"fixed", "dense", "variable", "bigbird", "bslongformer"}));
  v.field("block", c.block, at_least(1));
  v.field("different_layout_per_head", c.different_layout_per_head);
  v.field("num_local_blocks", c.num_local_blocks, at_least(1));
  v.field("num_global_blocks", c.num_global_blocks, at_least(0));
  v.field("attention", c.attention, one_of({"bidirectional", "unidirectional"}));
  v.field("horizontal_global_attention", c.horizontal_global_attention);
  v.field("num_different_global_patterns", c.num_different_global_patterns, at_least(1));
  v.field("num_random_blocks", c.num_random_blocks, at_least(0));
  v.field("local_window_blocks", c.local_window_blocks, at_least(1));
  v.field("global_block_indices", c.global_block_indices, at_least(0));
  v.field("global_block_end_indices", c.global_block_end_indices);
  v.field("num_sliding_window_blocks", c.num_sliding_window_blocks, at_least(1));
}

void describe(Visitor& v, ProgressiveLayerDropConfig& c) {
  v.field("enabled", c.enabled);
  v.field("theta", c.theta, FieldOpts{.min = 0, .max = 1});
  v.field("gamma", c.gamma, at_least(0));
}

void describe(Visitor& v, QuantizeBitsConfig& c) {
  v.field("start_bits", c.start_bits, at_least(1));
  v.field("target_bits", c.target_bits, at_least(1));
}

void describe(Visitor& v, QuantizeScheduleConfig& c) {
  v.field("quantize_period", c.quantize_period, at_least(1));
  v.field("schedule_offset", c.schedule_offset, at_least(0));
}

void describe(Visitor& v, QuantizeAlgoConfig& c) {
  v.field("q_type", c.q_type, one_of(kSymmetry));
  v.field("rounding", c.rounding, one_of({"nearest", "stochastic"}));
}

void describe(Visitor& v, Fp16MixedQuantizeConfig& c) {
  v.field("enabled", c.enabled);
  v.field("quantize_change_ratio", c.quantize_change_ratio, FieldOpts{.min = 0, .max = 1});
}

void describe(Visitor& v, EigenvalueConfig& c) {
  v.field("enabled", c.enabled);
  v.field("verbose", c.verbose);
  v.field("max_iter", c.max_iter, at_least(1));
  v.field("tol", c.tol, at_least(0));
  v.field("stability", c.stability, at_least(0));
  v.field("gas_boundary_resolution", c.gas_boundary_resolution, at_least(1));
  v.field("layer_name", c.layer_name);
  v.field("layer_num", c.layer_num, at_least(0));
}

void describe(Visitor& v, QuantizeTrainingConfig& c) {
  v.field("enabled", c.enabled, {.ignored = kMoqLegacy});
  v.field("quantize_verbose", c.quantize_verbose, {.ignored = kMoqLegacy});
  v.field("quantizer_kernel", c.quantizer_kernel, {.ignored = kMoqLegacy});
  v.field("quantize_groups", c.quantize_groups, {.min = 1, .ignored = kMoqLegacy});
  v.section("quantize_bits", c.quantize_bits, {.deprecated = kMoqLegacy});
  v.section("quantize_schedule", c.quantize_schedule, {.deprecated = kMoqLegacy});
  v.section("quantize_algo", c.quantize_algo, {.deprecated = kMoqLegacy});
  v.section("fp16_mixed_quantize", c.fp16_mixed_quantize, {.deprecated = kMoqLegacy});
  v.section("eigenvalue", c.eigenvalue);
}

void describe(Visitor& v, CompressionWeightQuantParams& c) {
  v.field("start_bits", c.start_bits, {.min = 1, .required = true});
  v.field("target_bits", c.target_bits, {.min = 1, .required = true});
  v.field("quantization_period", c.quantization_period, at_least(1));
}

void describe(Visitor& v, CompressionWeightQuantGroup& c) {
  v.section("params", c.params);
  v.field("modules", c.modules, {.scalar_ok = true});
  v.field("related_modules", c.related_modules);
}

void describe(Visitor& v, CompressionWeightQuantShared& c) {
  v.field("enabled", c.enabled);
  v.field("quantizer_kernel", c.quantizer_kernel);
  v.field("schedule_offset", c.schedule_offset, at_least(0));
  v.field("quantize_groups", c.quantize_groups, at_least(1));
  v.field("quantize_verbose", c.quantize_verbose);
  v.field("quantization_type", c.quantization_type, one_of(kSymmetry));
  v.field("rounding", c.rounding, one_of({"nearest", "stochastic"}));
  v.field("quantize_weight_in_forward", c.quantize_weight_in_forward);
  v.section("fp16_mixed_quantize", c.fp16_mixed_quantize);
}

void describe(Visitor& v, CompressionWeightQuant& c) {
  v.section("shared_parameters", c.shared_parameters);
  v.named_sections("different_groups", c.different_groups);
}

void describe(Visitor& v, CompressionActQuantParams& c) {
  v.field("bits", c.bits, {.min = 1, .required = true});
}

void describe(Visitor& v, CompressionActQuantGroup& c) {
  v.section("params", c.params);
  v.field("modules", c.modules, {.scalar_ok = true});
  v.field("related_modules", c.related_modules);
}

void describe(Visitor& v, CompressionActQuantShared& c) {
  v.field("enabled", c.enabled);
  v.field("quantization_type", c.quantization_type, one_of(kSymmetry));
  v.field("range_calibration", c.range_calibration, one_of({"dynamic", "static"}));
  v.field("schedule_offset", c.schedule_offset, at_least(0));
}

void describe(Visitor& v, CompressionActQuant& c) {
  v.section("shared_parameters", c.shared_parameters);
  v.named_sections("different_groups", c.different_groups);
}

void describe(Visitor& v, CompressionPruneParams& c) {
  v.field("dense_ratio", c.dense_ratio, {.min = 0, .max = 1, .min_exclusive = true, .required = true});
}

void describe(Visitor& v, CompressionPruneGroup& c) {
  v.section("params", c.params);
  v.field("modules", c.modules, {.scalar_ok = true});
  v.field("related_modules", c.related_modules);
}

void describe(Visitor& v, CompressionSparsePruneShared& c) {
  v.field("enabled", c.enabled);
  v.field("method", c.method, one_of({"l1", "topk", "snip_momentum"}));
  v.field("schedule_offset", c.schedule_offset, at_least(0));
  v.field("schedule_offset_end", c.schedule_offset_end, at_least(0));
  v.field("schedule_offset_stride", c.schedule_offset_stride, at_least(1));
  v.field("block_pattern", c.block_pattern);
  v.field("dense_ratio", c.dense_ratio, {.min = 0, .max = 1, .min_exclusive = true});
  v.field("excluded_modules", c.excluded_modules);
}

void describe(Visitor& v, CompressionSparsePrune& c) {
  v.section("shared_parameters", c.shared_parameters);
  v.named_sections("different_groups", c.different_groups);
}

void describe(Visitor& v, CompressionPruneShared& c) {
  v.field("enabled", c.enabled);
  v.field("method", c.method, one_of({"l1", "topk"}));
  v.field("schedule_offset", c.schedule_offset, at_least(0));
}

void describe(Visitor& v, CompressionPrune& c) {
  v.section("shared_parameters", c.shared_parameters);
  v.named_sections("different_groups", c.different_groups);
}

void describe(Visitor& v, CompressionHeadPruneShared& c) {
  v.field("enabled", c.enabled);
  v.field("method", c.method, one_of({"topk", "l1"}));
  v.field("schedule_offset", c.schedule_offset, at_least(0));
  v.field("num_heads", c.num_heads, at_least(1));
}

void describe(Visitor& v, CompressionHeadPrune& c) {
  v.section("shared_parameters", c.shared_parameters);
  v.named_sections("different_groups", c.different_groups);
}

void describe(Visitor& v, LayerReductionConfig& c) {
  v.field("enabled", c.enabled);
  v.field("keep_number_layer", c.keep_number_layer, at_least(1));
  v.field("module_name_prefix", c.module_name_prefix);
  v.field("teacher_layer", c.teacher_layer, at_least(0));
  v.field("other_module_name", c.other_module_name);
}

void describe(Visitor& v, CompressionConfig& c) {
  v.section("weight_quantization", c.weight_quantization);
  v.section("activation_quantization", c.activation_quantization);
  v.section("sparse_pruning", c.sparse_pruning);
  v.section("row_pruning", c.row_pruning);
  v.section("head_pruning", c.head_pruning);
  v.section("channel_pruning", c.channel_pruning);
  v.section("layer_reduction", c.layer_reduction);
}

void describe(Visitor& v, CurriculumScheduleConfig& c) {
  v.field("difficulty", c.difficulty);
  v.field("max_step", c.max_step, at_least(0));
  v.field("total_curriculum_step", c.total_curriculum_step, at_least(1));
  v.field("difficulty_step", c.difficulty_step, at_least(1));
  v.field("root_degree", c.root_degree, at_least(1));
}

void describe(Visitor& v, CurriculumLegacyConfig& c) {
  v.field("enabled", c.enabled);
  v.field("curriculum_type", c.curriculum_type);
  v.field("min_difficulty", c.min_difficulty);
  v.field("max_difficulty", c.max_difficulty);
  v.field("schedule_type", c.schedule_type, one_of(kCurriculumSchedules));
  v.section("schedule_config", c.schedule_config);
}

void describe(Visitor& v, CurriculumMetricConfig& c) {
  v.field("index_to_sample_path", c.index_to_sample_path);
  v.field("index_to_metric_path", c.index_to_metric_path);
  v.field("difficulty_type", c.difficulty_type, one_of({"value", "percentile"}));
  v.field("clustering_type", c.clustering_type, one_of({"schedule_based", "single_cluster"}));
  v.field("min_difficulty", c.min_difficulty);
  v.field("max_difficulty", c.max_difficulty);
  v.field("schedule_type", c.schedule_type, one_of(kCurriculumSchedules));
  v.section("schedule_config", c.schedule_config);
}

void describe(Visitor& v, DataCurriculumConfig& c) {
  v.field("enabled", c.enabled);
  v.field("data_cluster_path", c.data_cluster_path);
  v.named_sections("curriculum_metrics", c.curriculum_metrics);
}

void describe(Visitor& v, DynamicBatchingConfig& c) {
  v.field("enabled", c.enabled);
  v.field("metrics_path", c.metrics_path);
  v.field("lr_scaling_method", c.lr_scaling_method, one_of({"linear", "sqrt", "none"}));
  v.field("min_batch_size", c.min_batch_size, at_least(1));
  v.field("max_batch_size", c.max_batch_size, at_least(1));
  v.field("sequence_picking_order", c.sequence_picking_order, one_of({"dataloader", "random", "seqlen"}));
  v.field("max_tokens", c.max_tokens, at_least(1));
  v.field("verbose", c.verbose);
}

void describe(Visitor& v, DataSamplingConfig& c) {
  v.field("enabled", c.enabled);
  v.field("num_epochs", c.num_epochs, at_least(1));
  v.field("num_workers", c.num_workers, at_least(0));
  v.field("pin_memory", c.pin_memory);
  v.section("curriculum_learning", c.curriculum_learning);
  v.section("dynamic_batching", c.dynamic_batching);
}

void describe(Visitor& v, RandomLtdScheduleConfig& c) {
  v.field("seq_per_step", c.seq_per_step, at_least(1));
  v.field("require_steps", c.require_steps, at_least(1));
}

void describe(Visitor& v, RandomLtdSchedule& c) {
  v.field("min_value", c.min_value, at_least(1));
  v.field("max_value", c.max_value, at_least(1));
  v.field("schedule_type", c.schedule_type, one_of({"fixed_linear"}));
  v.section("schedule_config", c.schedule_config);
}

void describe(Visitor& v, LayerTokenLrSchedule& c) {
  v.field("enabled", c.enabled);
  v.field("total_layer_tokens", c.total_layer_tokens, at_least(1));
}

void describe(Visitor& v, RandomLtdConfig& c) {
  v.field("enabled", c.enabled);
  v.field("model_mask_name", c.model_mask_name);
  v.field("model_type", c.model_type, one_of({"decoder", "encoder"}));
  v.field("micro_batch_size", c.micro_batch_size, at_least(1));
  v.field("global_batch_size", c.global_batch_size, at_least(1));
  v.field("sample_idx", c.sample_idx);
  v.field("attention_mask", c.attention_mask);
  v.field("hidden_state_order", c.hidden_state_order, one_of({"batch_seq_dim", "seq_batch_dim"}));
  v.field("random_ltd_layer_num", c.random_ltd_layer_num, at_least(0));
  v.field("random_ltd_layer_id", c.random_ltd_layer_id, at_least(0));
  v.field("total_layer_num", c.total_layer_num, at_least(1));
  v.section("random_ltd_schedule", c.random_ltd_schedule);
  v.section("layer_token_lr_schedule", c.layer_token_lr_schedule);
}

void describe(Visitor& v, DataRoutingConfig& c) {
  v.field("enabled", c.enabled);
  v.section("random_ltd", c.random_ltd);
}

void describe(Visitor& v, DataEfficiencyConfig& c) {
  v.field("enabled", c.enabled);
  v.field("seed", c.seed);
  v.section("data_sampling", c.data_sampling);
  v.section("data_routing", c.data_routing);
}

void describe(Visitor& v, ElasticityConfig& c) {
  v.field("enabled", c.enabled);
  v.field("max_train_batch_size", c.max_train_batch_size, at_least(1));
  v.field("micro_batch_sizes", c.micro_batch_sizes, at_least(1));
  v.field("min_gpus", c.min_gpus, at_least(1));
  v.field("max_gpus", c.max_gpus, at_least(1));
  v.field("num_gpus_per_node", c.num_gpus_per_node, at_least(1));
  v.field("model_parallel_size", c.model_parallel_size, at_least(1));
  v.field("min_time", c.min_time, at_least(0));
  v.field("prefer_larger_batch", c.prefer_larger_batch);
  v.field("ignore_non_elastic_batch_info", c.ignore_non_elastic_batch_info);
  v.field("version", c.version, FieldOpts{.min = 0.1, .max = 0.2});
}

void describe(Visitor& v, AutotuningModelInfo& c) {
  v.field("profile", c.profile);
  v.field("num_params", c.num_params, at_least(1));
  v.field("hidden_size", c.hidden_size, at_least(1));
  v.field("num_layers", c.num_layers, at_least(1));
}

void describe(Visitor& v, AutotuningConfig& c) {
  v.field("enabled", c.enabled);
  v.field("fast", c.fast);
  v.field("results_dir", c.results_dir);
  v.field("exps_dir", c.exps_dir);
  v.field("overwrite", c.overwrite);
  v.field("start_profile_step", c.start_profile_step, at_least(0));
  v.field("end_profile_step", c.end_profile_step, at_least(0));
  v.field("metric_path", c.metric_path);
  v.field("tuner_type", c.tuner_type, one_of({"gridsearch", "random", "model_based"}));
  v.field("tuner_early_stopping", c.tuner_early_stopping, at_least(0));
  v.field("tuner_num_trials", c.tuner_num_trials, at_least(1));
  v.field("arg_mappings", c.arg_mappings);
  v.field("max_train_batch_size", c.max_train_batch_size, at_least(1));
  v.field("min_train_batch_size", c.min_train_batch_size, at_least(1));
  v.field("max_train_micro_batch_size_per_gpu", c.max_train_micro_batch_size_per_gpu, at_least(1));
  v.field("min_train_micro_batch_size_per_gpu", c.min_train_micro_batch_size_per_gpu, at_least(1));
  v.field("num_tuning_micro_batch_sizes", c.num_tuning_micro_batch_sizes, at_least(1));
  v.field("mp_size", c.mp_size, at_least(1));
  v.field("metric", c.metric, FieldOpts{.choices = {"throughput", "latency", "flops"}, .case_insensitive = true});
  v.section("model_info", c.model_info);
  v.field("model_info_path", c.model_info_path);
}

void describe(Visitor& v, NebulaConfig& c) {
  v.field("enabled", c.enabled);
  v.field("persistent_storage_path", c.persistent_storage_path);
  v.field("persistent_time_interval", c.persistent_time_interval, at_least(1));
  v.field("num_of_version_in_retention", c.num_of_version_in_retention, at_least(1));
  v.field("enable_nebula_load", c.enable_nebula_load);
  v.field("nebula_load_path", c.nebula_load_path);
}

void describe(Visitor& v, ExpertParallelConfig& c) {
  v.field("enabled", c.enabled);
  v.field("autoep_size", c.autoep_size, at_least(1));
  v.field("expert_tensor_parallel_size", c.expert_tensor_parallel_size, at_least(1));
  v.field("validate_folding_routing", c.validate_folding_routing);
  v.field("async_split_plan", c.async_split_plan);
  v.field("preset_model", c.preset_model);
  v.field("moe_layer_pattern", c.moe_layer_pattern);
  v.field("expert_pattern", c.expert_pattern);
  v.field("router_pattern", c.router_pattern);
  v.field("use_grouped_mm", c.use_grouped_mm);
  v.field("disable_triton_grouped_mm", c.disable_triton_grouped_mm);
  v.field("route_norm", c.route_norm);
  v.field("route_scale", c.route_scale);
  v.field("score_apply", c.score_apply, one_of({"auto", "pre", "post"}));
  v.field("combine_impl", c.combine_impl, one_of({"auto", "weighted_sum", "fused_weighted_sum", "legacy_bmm"}));
  v.field("row_weighting_impl", c.row_weighting_impl, one_of({"auto", "eager", "fused"}));
  v.field("gate_up_impl", c.gate_up_impl, one_of({"separate", "fused"}));
  v.field("comm_backend", c.comm_backend, one_of({"comm", "deepep"}));
  v.field("comm_num_sm", c.comm_num_sm, at_least(1));
  v.field("comm_qp_margin", c.comm_qp_margin, at_least(0));
  v.field("comm_max_tokens_per_rank", c.comm_max_tokens_per_rank, at_least(0));
  v.field("num_expert_groups", c.num_expert_groups, at_least(1));
  v.field("num_limited_groups", c.num_limited_groups, at_least(1));
  v.field("score_func", c.score_func, one_of({"auto", "softmax", "sigmoid"}));
  v.field("top_k", c.top_k, kAutoOk);
  v.field("load_balance_coeff", c.load_balance_coeff);
  v.field("routed_scaling_factor", c.routed_scaling_factor, kAutoOk);
  v.field("expert_w1", c.expert_w1);
  v.field("expert_w2", c.expert_w2);
  v.field("expert_w3", c.expert_w3);
  v.field("num_experts_attr", c.num_experts_attr);
  v.field("top_k_attr", c.top_k_attr);
  v.field("has_shared_experts", c.has_shared_experts);
  v.field("shared_experts_pattern", c.shared_experts_pattern);
  v.field("shared_experts_gate_pattern", c.shared_experts_gate_pattern);
  v.field("expert_activation", c.expert_activation);
}

void describe_checked_only(Visitor& v, CheckedOnlyConfig& c) {
  v.section("pipeline", c.pipeline);
  v.section("tensor_parallel", c.tensor_parallel, {.strict = true});
  v.section("hybrid_engine", c.hybrid_engine, {.strict = true});
  v.section("compile", c.compile, {.strict = true});
  v.section("weight_quantization", c.weight_quantization, {.strict = true});
  v.section("sparse_attention", c.sparse_attention);
  v.section("progressive_layer_drop", c.progressive_layer_drop);
  v.section("quantize_training", c.quantize_training);
  v.section("compression_training", c.compression_training);
  v.section("curriculum_learning", c.curriculum_learning);
  v.section("data_efficiency", c.data_efficiency);
  v.section("elasticity", c.elasticity);
  v.section("autotuning", c.autotuning);
  v.section("nebula", c.nebula);
  v.field("datastates_ckpt", c.datastates_ckpt);
  v.section("expert_parallel", c.expert_parallel);
}

}  // namespace dscpp::config
