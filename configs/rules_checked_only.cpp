// Cross-key rules of the sections dscpp validates but does not run (ds_checked_only.h), and the
// list of their enabled features the runtime does not implement.
#include "configs/diagnostics.h"
#include "configs/ds_checked_only.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dscpp::config {

// ---- helpers on the structs ----------------------------------------------------------

std::optional<i64> PipelineConfig::stage_count() const {
  if (stages && stages->kind == JsonValue::Kind::integer) return stages->integer;
  return std::nullopt;
}

bool CheckedOnlyConfig::datastates_enabled() const {
  if (!datastates_ckpt || datastates_ckpt->is_null()) return false;
  return !(datastates_ckpt->kind == JsonValue::Kind::boolean && !datastates_ckpt->boolean);
}

// ---- validate ------------------------------------------------------------------------

namespace {

class Checker {
 public:
  explicit Checker(Diagnostics& d) : d_(d) {}
  void error(const std::string& path, const std::string& message) { d_.error(path, Location{}, message); }
  void warning(const std::string& path, const std::string& message) { d_.warning(path, Location{}, message); }
  static bool is_null(const std::optional<JsonValue>& v) { return !v || v->is_null(); }

 private:
  Diagnostics& d_;
};

std::string join(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "." + b;
}

// DeepSpeed's CurriculumScheduler checks when curriculum learning is switched on.
void check_curriculum_schedule(Checker& ck, const std::string& path, const std::optional<i64>& min_d,
                               const std::optional<i64>& max_d, const std::optional<std::string>& type,
                               const CurriculumScheduleConfig& s) {
  if (!min_d) ck.error(join(path, "min_difficulty"), "required when curriculum learning is enabled");
  if (!max_d) ck.error(join(path, "max_difficulty"), "required when curriculum learning is enabled");
  if (min_d && max_d && *min_d > *max_d)
    ck.error(join(path, "min_difficulty"), "min_difficulty (" + std::to_string(*min_d) +
                                               ") is greater than max_difficulty (" + std::to_string(*max_d) + ")");
  if (!type) {
    ck.error(join(path, "schedule_type"), "required when curriculum learning is enabled");
    return;
  }
  const std::string sc = join(path, "schedule_config");
  auto need = [&](bool present, const char* key) {
    if (!present) ck.error(join(sc, key), "required by schedule_type \"" + *type + "\"");
  };
  if (*type == "fixed_discrete") {
    need(!s.difficulty.empty(), "difficulty");
    need(!s.max_step.empty(), "max_step");
    if (!s.difficulty.empty() && !s.max_step.empty() && s.difficulty.size() != s.max_step.size() + 1)
      ck.error(join(sc, "difficulty"), "needs exactly one element more than max_step (got " +
                                           std::to_string(s.difficulty.size()) + " and " +
                                           std::to_string(s.max_step.size()) + ")");
  } else if (*type == "fixed_linear" || *type == "fixed_root") {
    need(s.total_curriculum_step.has_value(), "total_curriculum_step");
    need(s.difficulty_step.has_value(), "difficulty_step");
    if (*type == "fixed_root") need(s.root_degree.has_value(), "root_degree");
  }
}

// A group's `related_modules`: null or a list of lists of module-name patterns.
void check_related_modules(Checker& ck, const std::string& path, const std::optional<JsonValue>& v) {
  if (ck.is_null(v)) return;
  bool ok = v->kind == JsonValue::Kind::array;
  if (ok) {
    for (const auto& inner : v->items) {
      if (inner.kind != JsonValue::Kind::array)
        ok = false;
      else
        for (const auto& s : inner.items) ok = ok && s.kind == JsonValue::Kind::string;
    }
  }
  if (!ok) ck.error(path, "must be a list of lists of module names, e.g. [[\"self.query\", \"self.key\"]]");
}

template <typename Group>
void check_groups(Checker& ck, const std::string& path, bool enabled, const std::map<std::string, Group>& groups,
                  bool groups_optional = false) {
  const std::string dg = join(path, "different_groups");
  if (enabled && groups.empty() && !groups_optional)
    ck.warning(dg, "the technique is enabled but names no group, so nothing is compressed");
  for (const auto& [name, g] : groups) {
    const std::string gp = join(dg, name);
    if (!g.params) ck.error(join(gp, "params"), "required (DeepSpeed reads every group's params)");
    check_related_modules(ck, join(gp, "related_modules"), g.related_modules);
  }
}

void check_compression(Checker& ck, const CompressionConfig& c, const QuantizeTrainingConfig& qt) {
  const std::string root = "compression_training";
  const auto& wq = c.weight_quantization;
  const std::string wqp = join(root, "weight_quantization");
  check_groups(ck, wqp, wq.shared_parameters.enabled, wq.different_groups);
  for (const auto& [name, g] : wq.different_groups) {
    if (g.params && g.params->start_bits && g.params->target_bits && *g.params->target_bits > *g.params->start_bits)
      ck.error(join(wqp, "different_groups." + name + ".params.target_bits"),
               "target_bits (" + std::to_string(*g.params->target_bits) + ") must not exceed start_bits (" +
                   std::to_string(*g.params->start_bits) + ")");
  }
  if (wq.shared_parameters.enabled && qt.eigenvalue.enabled)
    ck.error("quantize_training.eigenvalue.enabled",
             "eigenvalue-based MoQ is disabled in DeepSpeed while compression weight quantization is on");

  const auto& aq = c.activation_quantization;
  check_groups(ck, join(root, "activation_quantization"), aq.shared_parameters.enabled, aq.different_groups);

  const auto& sp = c.sparse_pruning;
  const std::string spp = join(root, "sparse_pruning");
  const bool snip = sp.shared_parameters.method == "snip_momentum";
  check_groups(ck, spp, sp.shared_parameters.enabled, sp.different_groups, snip);
  if (snip && sp.shared_parameters.schedule_offset_end &&
      *sp.shared_parameters.schedule_offset_end < sp.shared_parameters.schedule_offset)
    ck.error(join(spp, "shared_parameters.schedule_offset_end"),
             "must not be less than schedule_offset (" + std::to_string(sp.shared_parameters.schedule_offset) + ")");
  if (snip && sp.shared_parameters.dense_ratio >= 1)
    ck.error(join(spp, "shared_parameters.dense_ratio"), "must be less than 1 with snip_momentum");

  check_groups(ck, join(root, "row_pruning"), c.row_pruning.shared_parameters.enabled, c.row_pruning.different_groups);
  check_groups(ck, join(root, "channel_pruning"), c.channel_pruning.shared_parameters.enabled,
               c.channel_pruning.different_groups);
  const auto& hp = c.head_pruning;
  check_groups(ck, join(root, "head_pruning"), hp.shared_parameters.enabled, hp.different_groups);
  if (hp.shared_parameters.enabled && !hp.shared_parameters.num_heads)
    ck.error(join(root, "head_pruning.shared_parameters.num_heads"), "required when head pruning is enabled");

  const auto& lr = c.layer_reduction;
  if (lr.enabled) {
    const std::string lp = join(root, "layer_reduction");
    if (!lr.keep_number_layer) ck.error(join(lp, "keep_number_layer"), "required when layer reduction is enabled");
    if (lr.keep_number_layer && !lr.teacher_layer.empty() &&
        static_cast<i64>(lr.teacher_layer.size()) != *lr.keep_number_layer)
      ck.error(join(lp, "teacher_layer"), "must list keep_number_layer (" + std::to_string(*lr.keep_number_layer) +
                                              ") layers, got " + std::to_string(lr.teacher_layer.size()));
  }
}

void check_data_efficiency(Checker& ck, const DataEfficiencyConfig& c) {
  const std::string ds = "data_efficiency.data_sampling";
  const auto& cl = c.data_sampling.curriculum_learning;
  const std::string clp = join(ds, "curriculum_learning");
  if (cl.enabled) {
    if (cl.curriculum_metrics.empty())
      ck.error(join(clp, "curriculum_metrics"),
               "curriculum learning is enabled, so curriculum_metrics must name at least one metric");
    for (const auto& [name, m] : cl.curriculum_metrics)
      check_curriculum_schedule(ck, join(clp, "curriculum_metrics." + name), m.min_difficulty, m.max_difficulty,
                                m.schedule_type, m.schedule_config);
  }
  const auto& db = c.data_sampling.dynamic_batching;
  if (db.enabled && !db.max_tokens)
    ck.error(join(ds, "dynamic_batching.max_tokens"), "required when dynamic batching is enabled");
  if (db.max_batch_size && *db.max_batch_size < db.min_batch_size)
    ck.error(join(ds, "dynamic_batching.max_batch_size"),
             "must not be less than min_batch_size (" + std::to_string(db.min_batch_size) + ")");

  const auto& r = c.data_routing.random_ltd;
  const std::string rp = "data_efficiency.data_routing.random_ltd";
  if (r.enabled) {
    for (auto [present, key] : {std::pair{r.total_layer_num.has_value(), "total_layer_num"},
                                {r.random_ltd_layer_num.has_value(), "random_ltd_layer_num"},
                                {r.random_ltd_schedule.min_value.has_value(), "random_ltd_schedule.min_value"},
                                {r.random_ltd_schedule.max_value.has_value(), "random_ltd_schedule.max_value"},
                                {r.random_ltd_schedule.schedule_type.has_value(), "random_ltd_schedule.schedule_type"},
                                {r.random_ltd_schedule.schedule_config.require_steps.has_value(),
                                 "random_ltd_schedule.schedule_config.require_steps"},
                                {r.random_ltd_schedule.schedule_config.seq_per_step.has_value(),
                                 "random_ltd_schedule.schedule_config.seq_per_step"}})
      if (!present) ck.error(join(rp, key), "required when random-LTD is enabled");
    if (r.layer_token_lr_schedule.enabled)
      ck.error(join(rp, "layer_token_lr_schedule.enabled"),
               "DeepSpeed has no layer-token LR schedule (it raises an error when enabled); set it to false");
  }
  if (r.random_ltd_layer_num && !r.random_ltd_layer_id.empty() &&
      static_cast<i64>(r.random_ltd_layer_id.size()) != *r.random_ltd_layer_num)
    ck.error(join(rp, "random_ltd_layer_id"), "must list random_ltd_layer_num (" +
                                                  std::to_string(*r.random_ltd_layer_num) + ") layer ids, got " +
                                                  std::to_string(r.random_ltd_layer_id.size()));
  if (r.total_layer_num && r.random_ltd_layer_num && *r.random_ltd_layer_num > *r.total_layer_num)
    ck.error(join(rp, "random_ltd_layer_num"), "exceeds total_layer_num (" + std::to_string(*r.total_layer_num) + ")");
  if (r.random_ltd_schedule.min_value && r.random_ltd_schedule.max_value &&
      *r.random_ltd_schedule.min_value > *r.random_ltd_schedule.max_value)
    ck.error(join(rp, "random_ltd_schedule.min_value"), "is greater than max_value");
}

bool is_attr_name(const std::string& s) {
  return !s.empty() && s.find('.') == std::string::npos;
}

void check_expert_parallel(Checker& ck, const ExpertParallelConfig& c) {
  const std::string p = "expert_parallel";
  if (!ck.is_null(c.load_balance_coeff))
    ck.error(join(p, "load_balance_coeff"), "not supported by AutoEP; leave it unset or null");
  if (c.top_k && !c.top_k->is_null() && !c.top_k->is_string("auto") &&
      !(c.top_k->kind == JsonValue::Kind::integer && c.top_k->integer >= 1))
    ck.error(join(p, "top_k"), "must be \"auto\" or a positive integer, got " + c.top_k->describe());
  if (c.routed_scaling_factor && !c.routed_scaling_factor->is_null() && !c.routed_scaling_factor->is_string("auto") &&
      !c.routed_scaling_factor->is_number())
    ck.error(join(p, "routed_scaling_factor"),
             "must be \"auto\" or a number, got " + c.routed_scaling_factor->describe());
  if (c.expert_w3 && !c.expert_w3->is_null() &&
      !(c.expert_w3->kind == JsonValue::Kind::string && is_attr_name(c.expert_w3->text)))
    ck.error(join(p, "expert_w3"), "must be null (fused gate/up) or an attribute name without dots");
  for (auto [value, key] : {std::pair{&c.expert_w1, "expert_w1"},
                            {&c.expert_w2, "expert_w2"},
                            {&c.num_experts_attr, "num_experts_attr"},
                            {&c.top_k_attr, "top_k_attr"},
                            {&c.router_pattern, "router_pattern"},
                            {&c.expert_pattern, "expert_pattern"},
                            {&c.shared_experts_pattern, "shared_experts_pattern"},
                            {&c.shared_experts_gate_pattern, "shared_experts_gate_pattern"}})
    if (*value && !is_attr_name(**value)) ck.error(join(p, key), "must be a non-empty attribute name without dots");
  if (c.num_expert_groups && c.num_limited_groups && *c.num_limited_groups > *c.num_expert_groups)
    ck.error(join(p, "num_limited_groups"),
             "must not exceed num_expert_groups (" + std::to_string(*c.num_expert_groups) + ")");
  if (!c.enabled) return;
  if (c.combine_impl == "fused_weighted_sum" && c.expert_tensor_parallel_size > 1)
    ck.error(join(p, "combine_impl"), "\"fused_weighted_sum\" requires expert_tensor_parallel_size 1");
  if (c.combine_impl == "fused_weighted_sum" && c.comm_backend == "deepep" && c.autoep_size > 1)
    ck.error(join(p, "combine_impl"), "\"fused_weighted_sum\" cannot be combined with comm_backend \"deepep\"");
  if (c.gate_up_impl == "fused" && !c.use_grouped_mm)
    ck.error(join(p, "gate_up_impl"), "\"fused\" requires use_grouped_mm: true");
  if (c.row_weighting_impl == "fused" && (c.comm_backend != "deepep" || c.autoep_size == 1))
    ck.error(join(p, "row_weighting_impl"), "\"fused\" runs only with comm_backend \"deepep\" and autoep_size > 1");
  if (c.comm_backend == "deepep" && c.comm_max_tokens_per_rank == 0)
    ck.error(join(p, "comm_max_tokens_per_rank"),
             "must be positive with comm_backend \"deepep\" (the most tokens one rank can route)");
}

}  // namespace

void validate_checked_only(const CheckedOnlyConfig& c, Diagnostics& d) {
  Checker ck(d);

  // pipeline.stages: "auto" or a positive stage count.
  const auto& st = c.pipeline.stages;
  if (st && !st->is_null() && !st->is_string("auto") && !(st->kind == JsonValue::Kind::integer && st->integer >= 1))
    ck.error("pipeline.stages", "must be \"auto\" or a positive integer, got " + st->describe());

  const auto& cc = c.compile;
  if (cc.deepcompile) {
    if (cc.offload_activation && (cc.offload_parameters || cc.offload_opt_states))
      ck.error("compile.offload_activation", "mutually exclusive with offload_parameters and offload_opt_states");
    if (cc.offload_opt_states && cc.offload_parameters)
      ck.error("compile.offload_opt_states", "mutually exclusive with offload_parameters");
  }

  if (c.sparse_attention) {
    const auto& e = c.sparse_attention->global_block_end_indices;
    if (!ck.is_null(e)) {
      bool ok = e->kind == JsonValue::Kind::array;
      if (ok)
        for (const auto& x : e->items) ok = ok && x.kind == JsonValue::Kind::integer;
      if (!ok)
        ck.error("sparse_attention.global_block_end_indices", "must be null or a list of integers");
      else if (e->items.size() != c.sparse_attention->global_block_indices.size())
        ck.error("sparse_attention.global_block_end_indices",
                 "must have as many entries as global_block_indices (" +
                     std::to_string(c.sparse_attention->global_block_indices.size()) + ")");
    }
  }

  const auto& q = c.quantize_training.quantize_bits;
  if (q.target_bits > q.start_bits)
    ck.error("quantize_training.quantize_bits.target_bits", "must not exceed start_bits");

  check_compression(ck, c.compression_training, c.quantize_training);

  if (c.curriculum_learning.enabled) {
    const auto& cl = c.curriculum_learning;
    check_curriculum_schedule(ck, "curriculum_learning", cl.min_difficulty, cl.max_difficulty, cl.schedule_type,
                              cl.schedule_config);
  }
  check_data_efficiency(ck, c.data_efficiency);

  const auto& el = c.elasticity;
  if (el.enabled && !el.max_train_batch_size)
    ck.error("elasticity.max_train_batch_size", "required when elasticity is enabled");
  if (el.max_gpus < el.min_gpus)
    ck.error("elasticity.max_gpus", "must not be less than min_gpus (" + std::to_string(el.min_gpus) + ")");
  if (el.enabled && el.micro_batch_sizes.empty())
    ck.error("elasticity.micro_batch_sizes", "must list at least one micro batch size");
  if (el.enabled && el.version != 0.1 && el.version != 0.2)
    ck.error("elasticity.version", "DeepSpeed implements elasticity versions 0.1 and 0.2 only");

  const auto& at = c.autotuning;
  if (at.results_dir.empty()) ck.error("autotuning.results_dir", "cannot be empty");
  if (at.exps_dir.empty()) ck.error("autotuning.exps_dir", "cannot be empty");
  if (at.end_profile_step < at.start_profile_step)
    ck.error("autotuning.end_profile_step",
             "must not be less than start_profile_step (" + std::to_string(at.start_profile_step) + ")");
  if (at.max_train_micro_batch_size_per_gpu < at.min_train_micro_batch_size_per_gpu)
    ck.error("autotuning.max_train_micro_batch_size_per_gpu",
             "must not be less than min_train_micro_batch_size_per_gpu");
  if (at.max_train_batch_size && *at.max_train_batch_size < at.min_train_batch_size)
    ck.error("autotuning.max_train_batch_size", "must not be less than min_train_batch_size");

  if (c.nebula.enabled && !c.nebula.persistent_storage_path)
    ck.warning("nebula.persistent_storage_path",
               "not set: Nebula falls back to the NEBULA_PERSISTENT_STORAGE_PATH "
               "environment variable");

  check_expert_parallel(ck, c.expert_parallel);
}

std::vector<std::string> unsupported_enabled_features(const CheckedOnlyConfig& c) {
  std::vector<std::string> out;
  auto add = [&](bool on, const std::string& what) {
    if (on) out.push_back(what);
  };
  if (auto n = c.pipeline.stage_count(); n && *n > 1)
    out.push_back("pipeline.stages = " + std::to_string(*n) + " (pipeline parallelism)");
  add(c.tensor_parallel.autotp_size > 0,
      "tensor_parallel.autotp_size = " + std::to_string(c.tensor_parallel.autotp_size) +
          " (AutoTP tensor parallelism)");
  add(c.hybrid_engine.enabled, "hybrid_engine.enabled (RLHF hybrid engine)");
  add(c.compile.deepcompile, "compile.deepcompile (DeepCompile)");
  add(c.weight_quantization && c.weight_quantization->enabled, "weight_quantization (inference weight quantization)");
  add(c.sparse_attention.has_value(), "sparse_attention (block-sparse attention)");
  add(c.progressive_layer_drop.enabled, "progressive_layer_drop.enabled (progressive layer dropping)");

  const auto& ct = c.compression_training;
  add(ct.weight_quantization.shared_parameters.enabled,
      "compression_training.weight_quantization (quantization-aware training)");
  add(ct.activation_quantization.shared_parameters.enabled,
      "compression_training.activation_quantization (activation quantization)");
  add(ct.sparse_pruning.shared_parameters.enabled, "compression_training.sparse_pruning (sparse pruning)");
  add(ct.row_pruning.shared_parameters.enabled, "compression_training.row_pruning (row pruning)");
  add(ct.head_pruning.shared_parameters.enabled, "compression_training.head_pruning (head pruning)");
  add(ct.channel_pruning.shared_parameters.enabled, "compression_training.channel_pruning (channel pruning)");
  add(ct.layer_reduction.enabled, "compression_training.layer_reduction (layer reduction)");

  add(c.curriculum_learning.enabled, "curriculum_learning.enabled (legacy curriculum learning)");
  const auto& de = c.data_efficiency;
  if (de.enabled) {
    out.push_back("data_efficiency.enabled (data efficiency library)");
    const auto& ds = de.data_sampling;
    add(ds.enabled && ds.curriculum_learning.enabled,
        "data_efficiency.data_sampling.curriculum_learning.enabled (curriculum learning)");
    add(ds.enabled && ds.dynamic_batching.enabled,
        "data_efficiency.data_sampling.dynamic_batching.enabled (dynamic batching)");
    add(de.data_routing.enabled && de.data_routing.random_ltd.enabled,
        "data_efficiency.data_routing.random_ltd.enabled (random layerwise token dropping)");
  }
  add(c.elasticity.enabled, "elasticity.enabled (elastic training)");
  add(c.autotuning.enabled, "autotuning.enabled (autotuning)");
  add(c.nebula.enabled, "nebula.enabled (Nebula checkpointing)");
  add(c.datastates_enabled(), "datastates_ckpt (DataStates asynchronous checkpointing)");
  add(c.expert_parallel.enabled, "expert_parallel.enabled (AutoEP expert parallelism)");
  return out;
}

}  // namespace dscpp::config
