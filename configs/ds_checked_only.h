// DeepSpeed config sections dscpp validates but whose features its runtime does not run:
// pipeline/tensor/expert parallelism, the hybrid engine, DeepCompile, quantization and
// compression, sparse attention, progressive layer drop, curriculum learning and the data
// efficiency library, elasticity, autotuning and the alternative checkpoint engines.
// They are read with the same strict key checking as everything else, so a typo in them is
// caught; `unsupported_enabled_features` names the ones a config switches on.
//
// Defaults are those of DeepSpeed's code (current release); where its documentation says
// otherwise the field says so. Keys and meanings: DeepSpeed's configuration documentation.
#pragma once

#include "configs/schema.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::config {

using i64 = std::int64_t;

class Diagnostics;

// The JSON string "auto": the default of keys that take "auto" or a number.
inline JsonValue auto_json() {
  JsonValue v;
  v.kind = JsonValue::Kind::string;
  v.text = "auto";
  return v;
}

// ---- pipeline (loose) ----------------------------------------------------------------
struct PipelineConfig {
  std::optional<JsonValue> stages = auto_json();  // "auto" or a stage count (null = "auto")
  std::string partition = "best";
  bool seed_layers = false;
  i64 activation_checkpoint_interval = 0;
  bool pipe_partitioned = true;
  bool grad_partitioned = true;
  std::optional<bool> use_reentrant;  // null = true
  // The stage count when given as a number.
  std::optional<i64> stage_count() const;
};

// ---- tensor_parallel (strict: pydantic TPTrainingConfig) -----------------------------
struct TpConfig {
  i64 tp_size = 1;
  i64 tp_grain_size = 1;
  // Python objects (a model-parallel unit, a process group); only null makes sense in a file.
  std::optional<JsonValue> mpu;
  std::optional<JsonValue> tp_group;
};

struct TensorParallelConfig {
  // A torch.dtype in DeepSpeed; accepted here by any of DeepSpeed's dtype spellings.
  std::string dtype = "fp16";
  i64 autotp_size = 0;  // > 0 = AutoTP training with this many ranks per group
  bool tp_overlap_comm = false;
  TpConfig tp;  // key "tp", or "tensor_parallel"
  std::optional<JsonValue> injection_policy_tuple;
  std::optional<JsonValue> partition_config;  // {use_default_specs, layer_specs: [...]}
  std::optional<std::string> preset_model;    // llama, bloom, chatglm, mixtral, qwen2, ...
  bool keep_module_on_host = false;
  bool replace_with_kernel_inject = false;  // alias kernel_inject
  bool vocab_parallel_lm_head = false;      // shard lm_head over the vocabulary (newer than config.md)
};

// ---- hybrid_engine (strict) ----------------------------------------------------------
struct HybridEngineConfig {
  bool enabled = false;
  i64 max_out_tokens = 512;
  i64 inference_tp_size = 1;
  bool release_inference_cache = false;
  bool pin_parameters = true;
  i64 tp_gather_partition_size = 8;
  bool enable_cuda_graph = false;
};

// ---- compile (strict: DeepCompile) ---------------------------------------------------
struct CompileConfig {
  bool deepcompile = false;
  bool autoep_non_moe = false;  // compile AutoEP layers' parents only (newer than config.md)
  bool free_activation = false;
  i64 free_activation_threshold = 10 * 1024 * 1024;  // bytes
  bool offload_activation = false;
  bool offload_activation_pin_memory = true;
  bool offload_opt_states = false;
  bool double_buffer = true;
  bool symmetric_memory = false;
  bool debug_log = false;
  bool offload_parameters = false;
  bool sync_before_reduce = false;
  bool sync_after_reduce = false;
  bool sync_before_allgather = false;
  bool sync_after_allgather = false;
  bool keep_int_input_tensors = true;
  bool keep_all_input_tensors = false;
  std::vector<std::string> passes;  // z1 | z3 | autosp | autotp; empty = null
};

// ---- weight_quantization (strict: inference WeightQuantConfig) -----------------------
// Present = on (its `enabled` defaults to true).
struct WeightQuantizationConfig {
  bool enabled = true;
  i64 num_bits = 8;
  std::string q_type = "symmetric";
  i64 q_groups = 1;
  std::optional<JsonValue> quantized_initialization;  // {num_bits, group_size, group_dim, symmetric}
  std::optional<JsonValue> post_init_quant;           // {module name: {num_bits, ...}}
};

// ---- sparse_attention (loose; present = sparse attention layers are built) ------------
struct SparseAttentionConfig {
  std::string mode = "fixed";  // dense | fixed | variable | bigbird | bslongformer
  i64 block = 16;
  bool different_layout_per_head = false;
  i64 num_local_blocks = 4;
  i64 num_global_blocks = 1;
  std::string attention = "bidirectional";
  bool horizontal_global_attention = false;
  i64 num_different_global_patterns = 1;  // the docs' table says 4
  i64 num_random_blocks = 0;
  std::vector<i64> local_window_blocks = {4};
  std::vector<i64> global_block_indices = {0};
  std::optional<JsonValue> global_block_end_indices;  // null or a list like global_block_indices
  i64 num_sliding_window_blocks = 3;
};

// ---- progressive_layer_drop (loose) --------------------------------------------------
struct ProgressiveLayerDropConfig {
  bool enabled = false;
  double theta = 1.0;
  double gamma = 0.001;
};

// ---- quantize_training (legacy MoQ; DeepSpeed now reads only `eigenvalue`) -----------
struct QuantizeBitsConfig {
  i64 start_bits = 16;
  i64 target_bits = 8;
};

struct QuantizeScheduleConfig {
  i64 quantize_period = 1000;
  i64 schedule_offset = 1000;
};

struct QuantizeAlgoConfig {
  std::string q_type = "symmetric";
  std::string rounding = "nearest";
};

struct Fp16MixedQuantizeConfig {  // also compression weight_quantization's
  bool enabled = false;
  double quantize_change_ratio = 0.001;
};

struct EigenvalueConfig {
  bool enabled = false;
  bool verbose = false;
  i64 max_iter = 100;
  double tol = 1e-2;
  double stability = 1e-6;
  i64 gas_boundary_resolution = 1;
  std::string layer_name = "bert.encoder.layer";
  i64 layer_num = 0;
};

struct QuantizeTrainingConfig {
  bool enabled = false;
  bool quantize_verbose = false;
  bool quantizer_kernel = false;
  i64 quantize_groups = 1;
  QuantizeBitsConfig quantize_bits;
  QuantizeScheduleConfig quantize_schedule;
  // The MoQ tutorial's "quantize-algo" and top-level "quantize_type" are not DeepSpeed keys
  // (silently ignored there), so they are errors here.
  QuantizeAlgoConfig quantize_algo;
  Fp16MixedQuantizeConfig fp16_mixed_quantize;
  EigenvalueConfig eigenvalue;
};

// ---- compression_training (loose) ----------------------------------------------------
// Each technique has `shared_parameters` and `different_groups` {name: group}; a group's
// `modules` are name patterns ("*" = all Linear/Conv2d layers), `related_modules` a list of
// pattern lists. schedule_offset defaults are the code's (the docs' tables say 0 for all).
struct CompressionWeightQuantParams {
  std::optional<i64> start_bits;   // required
  std::optional<i64> target_bits;  // required, <= start_bits
  i64 quantization_period = 1;
};

struct CompressionWeightQuantGroup {
  std::optional<CompressionWeightQuantParams> params;  // required
  std::vector<std::string> modules = {"*"};
  std::optional<JsonValue> related_modules;
};

struct CompressionWeightQuantShared {
  bool enabled = false;
  bool quantizer_kernel = false;
  i64 schedule_offset = 0;
  i64 quantize_groups = 1;
  bool quantize_verbose = false;
  std::string quantization_type = "symmetric";
  std::string rounding = "nearest";
  bool quantize_weight_in_forward = false;
  Fp16MixedQuantizeConfig fp16_mixed_quantize;
};

struct CompressionWeightQuant {
  CompressionWeightQuantShared shared_parameters;
  std::map<std::string, CompressionWeightQuantGroup> different_groups;
};

struct CompressionActQuantParams {
  std::optional<i64> bits;  // required
};

struct CompressionActQuantGroup {
  std::optional<CompressionActQuantParams> params;  // required
  std::vector<std::string> modules = {"*"};
  std::optional<JsonValue> related_modules;
};

struct CompressionActQuantShared {
  bool enabled = false;
  std::string quantization_type = "symmetric";
  std::string range_calibration = "dynamic";  // the docs' table says static
  i64 schedule_offset = 1000;
};

struct CompressionActQuant {
  CompressionActQuantShared shared_parameters;
  std::map<std::string, CompressionActQuantGroup> different_groups;
};

struct CompressionPruneParams {
  std::optional<double> dense_ratio;  // required: fraction of weights kept
};

struct CompressionPruneGroup {
  std::optional<CompressionPruneParams> params;  // required
  std::vector<std::string> modules = {"*"};
  std::optional<JsonValue> related_modules;
};

struct CompressionSparsePruneShared {
  bool enabled = false;
  std::string method = "l1";  // l1 | topk | snip_momentum
  i64 schedule_offset = 1000;
  // The rest is read only with snip_momentum.
  std::optional<i64> schedule_offset_end;  // null = schedule_offset
  i64 schedule_offset_stride = 1;
  std::string block_pattern = "4x1";
  double dense_ratio = 0.1;
  std::vector<std::string> excluded_modules;
};

struct CompressionSparsePrune {
  CompressionSparsePruneShared shared_parameters;
  std::map<std::string, CompressionPruneGroup> different_groups;
};

struct CompressionPruneShared {  // row_pruning, channel_pruning
  bool enabled = false;
  std::string method = "l1";  // l1 | topk
  i64 schedule_offset = 1000;
};

struct CompressionPrune {
  CompressionPruneShared shared_parameters;
  std::map<std::string, CompressionPruneGroup> different_groups;
};

struct CompressionHeadPruneShared {
  bool enabled = false;
  std::string method = "topk";
  i64 schedule_offset = 1000;
  std::optional<i64> num_heads;  // required when enabled
};

struct CompressionHeadPrune {
  CompressionHeadPruneShared shared_parameters;
  std::map<std::string, CompressionPruneGroup> different_groups;
};

struct LayerReductionConfig {
  bool enabled = false;
  std::optional<i64> keep_number_layer;
  std::optional<std::string> module_name_prefix;
  std::vector<i64> teacher_layer;
  std::vector<std::string> other_module_name;
};

struct CompressionConfig {
  CompressionWeightQuant weight_quantization;
  CompressionActQuant activation_quantization;
  CompressionSparsePrune sparse_pruning;
  CompressionPrune row_pruning;
  CompressionHeadPrune head_pruning;
  CompressionPrune channel_pruning;
  LayerReductionConfig layer_reduction;
};

// ---- curriculum learning (legacy top level, and per metric in data_efficiency) -------
// Which schedule_config keys a schedule needs: fixed_linear {total_curriculum_step,
// difficulty_step}, fixed_root {+ root_degree}, fixed_discrete {difficulty, max_step with
// one element fewer}, custom {} (the schedule is a callback).
struct CurriculumScheduleConfig {
  std::vector<i64> difficulty;
  std::vector<i64> max_step;
  std::optional<i64> total_curriculum_step;
  std::optional<i64> difficulty_step;
  std::optional<i64> root_degree;
};

struct CurriculumLegacyConfig {
  bool enabled = false;
  std::optional<std::string> curriculum_type;  // "seqlen"
  std::optional<i64> min_difficulty;
  std::optional<i64> max_difficulty;
  std::optional<std::string> schedule_type;  // fixed_linear | fixed_root | fixed_discrete | custom
  CurriculumScheduleConfig schedule_config;
};

// ---- data_efficiency (loose) ---------------------------------------------------------
struct CurriculumMetricConfig {
  std::optional<std::string> index_to_sample_path;
  std::optional<std::string> index_to_metric_path;
  std::optional<std::string> difficulty_type;  // value | percentile
  std::optional<std::string> clustering_type;  // schedule_based | single_cluster
  std::optional<i64> min_difficulty;
  std::optional<i64> max_difficulty;
  std::optional<std::string> schedule_type;
  CurriculumScheduleConfig schedule_config;
};

struct DataCurriculumConfig {
  bool enabled = false;
  std::optional<std::string> data_cluster_path;
  std::map<std::string, CurriculumMetricConfig> curriculum_metrics;  // required when enabled
};

struct DynamicBatchingConfig {
  bool enabled = false;
  std::optional<std::string> metrics_path;
  std::string lr_scaling_method = "linear";  // linear | sqrt | none
  i64 min_batch_size = 1;
  std::optional<i64> max_batch_size;
  std::string sequence_picking_order = "dataloader";  // dataloader | random | seqlen
  std::optional<i64> max_tokens;                      // required when enabled
  bool verbose = false;
};

struct DataSamplingConfig {
  bool enabled = false;
  i64 num_epochs = 1000;
  i64 num_workers = 0;
  bool pin_memory = false;
  DataCurriculumConfig curriculum_learning;
  DynamicBatchingConfig dynamic_batching;
};

struct RandomLtdScheduleConfig {  // random_ltd_schedule.schedule_config
  std::optional<i64> seq_per_step;
  std::optional<i64> require_steps;
};

struct RandomLtdSchedule {
  std::optional<i64> min_value;  // effective sequence length at step 0
  std::optional<i64> max_value;
  std::optional<std::string> schedule_type;  // fixed_linear
  RandomLtdScheduleConfig schedule_config;
};

struct LayerTokenLrSchedule {
  bool enabled = false;  // DeepSpeed refuses it when enabled
  std::optional<i64> total_layer_tokens;
};

struct RandomLtdConfig {
  bool enabled = false;
  std::optional<std::string> model_mask_name;
  std::optional<std::string> model_type;  // decoder | encoder
  // Overwritten by DeepSpeed with the run's micro/global batch size.
  std::optional<i64> micro_batch_size;
  std::optional<i64> global_batch_size;
  std::optional<JsonValue> sample_idx;
  std::optional<JsonValue> attention_mask;
  std::optional<std::string> hidden_state_order;  // batch_seq_dim | seq_batch_dim
  std::optional<i64> random_ltd_layer_num;
  std::vector<i64> random_ltd_layer_id;  // random_ltd_layer_num entries
  std::optional<i64> total_layer_num;
  RandomLtdSchedule random_ltd_schedule;
  LayerTokenLrSchedule layer_token_lr_schedule;
};

struct DataRoutingConfig {
  bool enabled = false;
  RandomLtdConfig random_ltd;
};

struct DataEfficiencyConfig {
  bool enabled = false;
  i64 seed = 1234;
  DataSamplingConfig data_sampling;
  DataRoutingConfig data_routing;
};

// ---- elasticity (loose) --------------------------------------------------------------
struct ElasticityConfig {
  bool enabled = false;
  std::optional<i64> max_train_batch_size;  // null = 2000; required when enabled
  std::vector<i64> micro_batch_sizes = {2, 4, 6};
  i64 min_gpus = 1;
  i64 max_gpus = 10000;
  i64 num_gpus_per_node = 1;        // v0.2 only
  i64 model_parallel_size = 1;      // v0.2 only
  double min_time = 0;              // minutes; v0.1 only; 0 = unknown
  bool prefer_larger_batch = true;  // the docs spell it prefer_large_batch (ignored by DeepSpeed)
  bool ignore_non_elastic_batch_info = false;
  double version = 0.2;
  i64 effective_max_train_batch_size() const { return max_train_batch_size.value_or(2000); }
};

// ---- autotuning (loose) --------------------------------------------------------------
struct AutotuningModelInfo {
  bool profile = false;
  std::optional<i64> num_params;
  std::optional<i64> hidden_size;
  std::optional<i64> num_layers;
};

struct AutotuningConfig {
  bool enabled = false;
  bool fast = true;
  std::string results_dir = "autotuning_results";
  std::string exps_dir = "autotuning_exps";
  bool overwrite = true;  // the docs say false
  i64 start_profile_step = 3;
  i64 end_profile_step = 5;
  std::optional<std::string> metric_path;
  std::string tuner_type = "gridsearch";  // gridsearch | random | model_based (docs: model_based)
  i64 tuner_early_stopping = 5;
  i64 tuner_num_trials = 50;
  std::optional<JsonValue> arg_mappings;  // {ds config key: training-script argument}
  std::optional<i64> max_train_batch_size;
  i64 min_train_batch_size = 1;
  i64 max_train_micro_batch_size_per_gpu = 1024;
  i64 min_train_micro_batch_size_per_gpu = 1;
  i64 num_tuning_micro_batch_sizes = 3;
  i64 mp_size = 1;
  std::string metric = "throughput";  // latency | throughput | flops (any case)
  std::optional<AutotuningModelInfo> model_info;
  std::optional<std::string> model_info_path;
};

// ---- nebula (loose: Azure Nebula checkpointing) --------------------------------------
struct NebulaConfig {
  bool enabled = false;
  std::optional<std::string> persistent_storage_path;
  i64 persistent_time_interval = 100;
  i64 num_of_version_in_retention = 2;
  bool enable_nebula_load = true;
  std::optional<std::string> nebula_load_path;  // null = persistent_storage_path
};

// ---- expert_parallel (loose: AutoEP) -------------------------------------------------
struct ExpertParallelConfig {
  bool enabled = false;
  i64 autoep_size = 1;
  i64 expert_tensor_parallel_size = 1;
  bool validate_folding_routing = false;
  bool async_split_plan = false;
  std::optional<std::string> preset_model;  // mixtral, qwen3_moe, deepseek_v2, deepseek_v3, llama4, ...
  std::optional<std::string> moe_layer_pattern;
  std::optional<std::string> expert_pattern;
  std::optional<std::string> router_pattern;
  bool use_grouped_mm = true;
  bool disable_triton_grouped_mm = false;
  std::optional<bool> route_norm;
  double route_scale = 1.0;
  std::string score_apply = "auto";         // auto | pre | post
  std::string combine_impl = "auto";        // auto | weighted_sum | fused_weighted_sum | legacy_bmm
  std::string row_weighting_impl = "auto";  // auto | eager | fused
  std::string gate_up_impl = "separate";    // separate | fused
  std::string comm_backend = "comm";        // comm | deepep
  i64 comm_num_sm = 12;
  i64 comm_qp_margin = 4;
  i64 comm_max_tokens_per_rank = 0;  // must be > 0 with deepep
  std::optional<i64> num_expert_groups;
  std::optional<i64> num_limited_groups;
  std::string score_func = "auto";                               // auto | softmax | sigmoid
  std::optional<JsonValue> top_k = auto_json();                  // "auto" or an integer (null = "auto")
  std::optional<JsonValue> load_balance_coeff;                   // only null is supported
  std::optional<JsonValue> routed_scaling_factor = auto_json();  // "auto" or a number
  std::optional<std::string> expert_w1;
  std::optional<std::string> expert_w2;
  std::optional<JsonValue> expert_w3;  // absent = preset's, null = fused gate/up, or a name
  std::optional<std::string> num_experts_attr;
  std::optional<std::string> top_k_attr;
  std::optional<bool> has_shared_experts;
  std::optional<std::string> shared_experts_pattern;
  std::optional<std::string> shared_experts_gate_pattern;
  std::optional<std::string> expert_activation;
};

// ---- the top-level keys --------------------------------------------------------------
struct CheckedOnlyConfig {
  PipelineConfig pipeline;
  TensorParallelConfig tensor_parallel;
  HybridEngineConfig hybrid_engine;
  CompileConfig compile;
  std::optional<WeightQuantizationConfig> weight_quantization;
  std::optional<SparseAttentionConfig> sparse_attention;
  ProgressiveLayerDropConfig progressive_layer_drop;
  QuantizeTrainingConfig quantize_training;
  CompressionConfig compression_training;
  CurriculumLegacyConfig curriculum_learning;
  DataEfficiencyConfig data_efficiency;
  ElasticityConfig elasticity;
  AutotuningConfig autotuning;
  NebulaConfig nebula;
  std::optional<JsonValue> datastates_ckpt;  // any value but false/null enables it (dict = options)
  ExpertParallelConfig expert_parallel;

  bool datastates_enabled() const;
};

void describe(Visitor& v, PipelineConfig& c);
void describe(Visitor& v, TpConfig& c);
void describe(Visitor& v, TensorParallelConfig& c);
void describe(Visitor& v, HybridEngineConfig& c);
void describe(Visitor& v, CompileConfig& c);
void describe(Visitor& v, WeightQuantizationConfig& c);
void describe(Visitor& v, SparseAttentionConfig& c);
void describe(Visitor& v, ProgressiveLayerDropConfig& c);
void describe(Visitor& v, QuantizeBitsConfig& c);
void describe(Visitor& v, QuantizeScheduleConfig& c);
void describe(Visitor& v, QuantizeAlgoConfig& c);
void describe(Visitor& v, Fp16MixedQuantizeConfig& c);
void describe(Visitor& v, EigenvalueConfig& c);
void describe(Visitor& v, QuantizeTrainingConfig& c);
void describe(Visitor& v, CompressionWeightQuantParams& c);
void describe(Visitor& v, CompressionWeightQuantGroup& c);
void describe(Visitor& v, CompressionWeightQuantShared& c);
void describe(Visitor& v, CompressionWeightQuant& c);
void describe(Visitor& v, CompressionActQuantParams& c);
void describe(Visitor& v, CompressionActQuantGroup& c);
void describe(Visitor& v, CompressionActQuantShared& c);
void describe(Visitor& v, CompressionActQuant& c);
void describe(Visitor& v, CompressionPruneParams& c);
void describe(Visitor& v, CompressionPruneGroup& c);
void describe(Visitor& v, CompressionSparsePruneShared& c);
void describe(Visitor& v, CompressionSparsePrune& c);
void describe(Visitor& v, CompressionPruneShared& c);
void describe(Visitor& v, CompressionPrune& c);
void describe(Visitor& v, CompressionHeadPruneShared& c);
void describe(Visitor& v, CompressionHeadPrune& c);
void describe(Visitor& v, LayerReductionConfig& c);
void describe(Visitor& v, CompressionConfig& c);
void describe(Visitor& v, CurriculumScheduleConfig& c);
void describe(Visitor& v, CurriculumLegacyConfig& c);
void describe(Visitor& v, CurriculumMetricConfig& c);
void describe(Visitor& v, DataCurriculumConfig& c);
void describe(Visitor& v, DynamicBatchingConfig& c);
void describe(Visitor& v, DataSamplingConfig& c);
void describe(Visitor& v, RandomLtdScheduleConfig& c);
void describe(Visitor& v, RandomLtdSchedule& c);
void describe(Visitor& v, LayerTokenLrSchedule& c);
void describe(Visitor& v, RandomLtdConfig& c);
void describe(Visitor& v, DataRoutingConfig& c);
void describe(Visitor& v, DataEfficiencyConfig& c);
void describe(Visitor& v, ElasticityConfig& c);
void describe(Visitor& v, AutotuningModelInfo& c);
void describe(Visitor& v, AutotuningConfig& c);
void describe(Visitor& v, NebulaConfig& c);
void describe(Visitor& v, ExpertParallelConfig& c);

// Registers the checked-only sections' top-level keys on `v` (called from the top-level describe).
void describe_checked_only(Visitor& v, CheckedOnlyConfig& c);
// Cross-key rules inside these sections.
void validate_checked_only(const CheckedOnlyConfig& c, Diagnostics& d);
// Names of enabled features the dscpp runtime does not implement, for `config check`.
std::vector<std::string> unsupported_enabled_features(const CheckedOnlyConfig& c);

}  // namespace dscpp::config
