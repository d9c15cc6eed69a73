// zero_optimization, its offload blocks, and aio.
#include "configs/ds_config.h"

namespace dscpp::config {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

void describe(Visitor& v, OffloadParamConfig& c) {
  v.field("device", c.device, {.choices = {"none", "cpu", "nvme"}});
  v.field("nvme_path", c.nvme_path);
  v.field("buffer_count", c.buffer_count, kNonNegative);
  v.field("buffer_size", c.buffer_size, kNonNegative);
  v.field("max_in_cpu", c.max_in_cpu, kNonNegative);
  v.field("pin_memory", c.pin_memory);
}

void describe(Visitor& v, OffloadOptimizerConfig& c) {
  v.field("device", c.device, {.choices = {"none", "cpu", "nvme"}});
  v.field("nvme_path", c.nvme_path);
  v.field("buffer_count", c.buffer_count, kNonNegative);
  v.field("pin_memory", c.pin_memory);
  v.field("pipeline_read", c.pipeline_read);
  v.field("pipeline_write", c.pipeline_write);
  v.field("fast_init", c.fast_init);
  v.field("ratio", c.ratio, {.min = 0, .max = 1});
  v.field("super_offload", c.super_offload);
  v.field("cpuadam_cores_perc", c.cpuadam_cores_perc, {.min = 0, .max = 1});
}

void describe(Visitor& v, ZenFlowConfig& c) {
  v.field("topk_ratio", c.topk_ratio, {.min = 0, .max = 1});
  v.field("select_strategy", c.select_strategy, {.choices = {"auto", "step", "epoch"}});
  v.field("select_interval", c.select_interval);
  v.field("update_interval", c.update_interval);
  v.field("overlap_step", c.overlap_step);
  v.field("offload", c.offload);
  v.field("auto_ratio", c.auto_ratio, {.min = 0, .max = 1});
  v.field("full_warm_up_rounds", c.full_warm_up_rounds, kNonNegative);
  v.field("pt_reserved_cores_perc", c.pt_reserved_cores_perc, {.min = 0, .max = 1});
  v.field("steps_per_epoch", c.steps_per_epoch, kNonNegative);
}

void describe(Visitor& v, LocoConfig& c) {
  v.field("err_beta", c.err_beta, {.min = 0, .max = 1});
  v.field("reset_T", c.reset_T, kNonNegative);
}

void describe(Visitor& v, LeafModuleConfig& c) {
  v.field("classes", c.classes);
  v.field("names", c.names);
  v.field("name_suffixes", c.name_suffixes);
}

void describe(Visitor& v, ReflowConfig& c) {
  v.field("enable_cpu_affinity", c.enable_cpu_affinity);
  v.field("main_thread_cores", c.main_thread_cores, {.min = 1});
  v.field("bucketwise_cores_per_worker", c.bucketwise_cores_per_worker, {.min = 1});
  v.field("state_update_cores", c.state_update_cores, {.min = 1});
}

void describe(Visitor& v, ZeroConfig& c) {
  v.field("stage", c.stage, {.min = 0, .max = 3});
  v.field("contiguous_gradients", c.contiguous_gradients);
  v.field("reduce_scatter", c.reduce_scatter);
  v.field("reduce_bucket_size", c.reduce_bucket_size, kNonNegative);
  v.field("use_multi_rank_bucket_allreduce", c.use_multi_rank_bucket_allreduce);
  v.field("allgather_partitions", c.allgather_partitions);
  v.field("allgather_bucket_size", c.allgather_bucket_size, kNonNegative);
  v.field("overlap_comm", c.overlap_comm);
  v.field("load_from_fp32_weights", c.load_from_fp32_weights);
  v.field("elastic_checkpoint", c.elastic_checkpoint);
  v.section("offload_param", c.offload_param);
  v.section("offload_optimizer", c.offload_optimizer);
  v.field("sub_group_size", c.sub_group_size, kNonNegative);
  v.field("stage3_prefetch_bucket_size", c.prefetch_bucket_size, {.alias = "prefetch_bucket_size", .min = 0});
  v.field("stage3_param_persistence_threshold", c.param_persistence_threshold,
          {.alias = "param_persistence_threshold", .min = 0});
  v.field("stage3_model_persistence_threshold", c.model_persistence_threshold,
          {.alias = "model_persistence_threshold", .min = 0});
  v.field("stage3_max_live_parameters", c.max_live_parameters, {.alias = "max_live_parameters", .min = 0});
  v.field("stage3_max_reuse_distance", c.max_reuse_distance, {.alias = "max_reuse_distance", .min = 0});
  v.field("stage3_gather_16bit_weights_on_model_save", c.gather_16bit_weights_on_model_save,
          {.alias = "gather_16bit_weights_on_model_save"});
  v.field("stage3_module_granularity_threshold", c.module_granularity_threshold,
          {.alias = "module_granularity_threshold", .min = 0});
  v.field("stage3_use_all_reduce_for_fetch_params", c.use_all_reduce_for_fetch_params,
          {.alias = "use_all_reduce_for_fetch_params"});
  v.field("stage3_allgather_sequential", c.allgather_sequential, {.alias = "allgather_sequential"});
  v.field("ignore_unused_parameters", c.ignore_unused_parameters);
  v.field("legacy_stage1", c.legacy_stage1);
  v.field("round_robin_gradients", c.round_robin_gradients);
  v.field("zero_hpz_partition_size", c.zero_hpz_partition_size, {.min = 1});
  v.field("zero_quantized_weights", c.zero_quantized_weights);
  v.field("zero_quantized_nontrainable_weights", c.zero_quantized_nontrainable_weights);
  v.field("zero_quantized_gradients", c.zero_quantized_gradients);
  v.section("zeropp_loco_param", c.zeropp_loco_param);
  v.field("mics_shard_size", c.mics_shard_size, {.min = -1, .max = kInf});
  v.field("mics_hierarchical_params_gather", c.mics_hierarchical_params_gather);
  v.field("memory_efficient_linear", c.memory_efficient_linear);
  v.field("pipeline_loading_checkpoint", c.pipeline_loading_checkpoint);
  v.field("override_module_apply", c.override_module_apply);
  v.field("log_trace_cache_warnings", c.log_trace_cache_warnings);
  v.field("enable_sanity_checks", c.enable_sanity_checks);
  v.field("save_muon_momentum_buffer_in_memory", c.save_muon_momentum_buffer_in_memory);
  v.section("zenflow", c.zenflow);
  v.section("leaf_module", c.leaf_module);
  v.section("reflow", c.reflow);
  v.field("compute_grad_norm", c.compute_grad_norm,
          {.ignored = "it appears in DeepSpeed's documented template, but no DeepSpeed release reads it"});
  v.field("parameter_alignment", c.parameter_alignment,
          {.ignored = "it appears in DeepSpeed's documented template, but no DeepSpeed release reads it"});
  v.field("cpu_offload", c.cpu_offload, {.deprecated = "use \"offload_optimizer\": {\"device\": \"cpu\"}"});
  v.field("cpu_offload_param", c.cpu_offload_param, {.deprecated = "use \"offload_param\": {\"device\": \"cpu\"}"});
  v.field("cpu_offload_use_pin_memory", c.cpu_offload_use_pin_memory,
          {.deprecated = "use \"pin_memory\" inside offload_optimizer / offload_param",
           .ignored = "DeepSpeed maps it to nothing"});
  v.field("stage3_gather_fp16_weights_on_model_save", c.gather_fp16_weights_on_model_save,
          {.deprecated = "use \"stage3_gather_16bit_weights_on_model_save\""});
}

void describe(Visitor& v, AioConfig& c) {
  v.field("block_size", c.block_size, {.min = 1});
  v.field("queue_depth", c.queue_depth, {.min = 1});
  v.field("intra_op_parallelism", c.intra_op_parallelism, {.alias = "thread_count", .min = 1});
  v.field("single_submit", c.single_submit);
  v.field("overlap_events", c.overlap_events);
  v.field("use_gds", c.use_gds);
}

}  // namespace dscpp::config
