// The sections dscpp validates but does not run (configs/ds_checked_only.h): realistic blocks from
// DeepSpeed's documentation load into the typed fields, mistakes anywhere in them are errors
// with the full dotted path, and `unsupported_enabled_features` names what is switched on.
#include "configs/load.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace dscpp::config;
using Catch::Matchers::Contains;

namespace {

// `members` are extra top-level members; every config needs a batch size.
LoadedConfig load(const std::string& members) {
  std::string text = "{\"train_micro_batch_size_per_gpu\": 4";
  if (!members.empty()) text += ",\n" + members;
  text += "\n}";
  return load_config_text(text, "t.json", RunFacts{});
}

std::string report(const LoadedConfig& c) {
  return c.diagnostics.format("t.json");
}

bool lists(const std::vector<std::string>& features, const std::string& prefix) {
  return std::any_of(features.begin(), features.end(), [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
}

bool has_warning_for(const LoadedConfig& c, const std::string& path) {
  for (const auto& d : c.diagnostics.all())
    if (d.severity == Diagnostic::Severity::warning && d.path == path) return true;
  return false;
}

}  // namespace

TEST_CASE("checked-only sections: a config without the sections keeps DeepSpeed's defaults and enables nothing",
          "[config][checked_only]") {
  auto c = load("");
  INFO(report(c));
  REQUIRE(c.ok());
  const CheckedOnlyConfig& x = c.config.checked_only;
  REQUIRE(x.pipeline.stages);
  CHECK(x.pipeline.stages->is_string("auto"));
  CHECK_FALSE(x.pipeline.stage_count());
  CHECK(x.pipeline.pipe_partitioned);
  CHECK(x.tensor_parallel.autotp_size == 0);
  CHECK(x.tensor_parallel.tp.tp_size == 1);
  CHECK(x.hybrid_engine.max_out_tokens == 512);
  CHECK(x.compile.free_activation_threshold == 10 * 1024 * 1024);
  CHECK_FALSE(x.weight_quantization.has_value());
  CHECK_FALSE(x.sparse_attention.has_value());
  CHECK(x.progressive_layer_drop.gamma == Approx(0.001));
  CHECK(x.compression_training.activation_quantization.shared_parameters.schedule_offset == 1000);
  CHECK(x.data_efficiency.seed == 1234);
  CHECK(x.data_efficiency.data_sampling.num_epochs == 1000);
  CHECK(x.elasticity.micro_batch_sizes == std::vector<i64>{2, 4, 6});
  CHECK(x.elasticity.effective_max_train_batch_size() == 2000);
  CHECK(x.autotuning.results_dir == "autotuning_results");
  CHECK(x.nebula.persistent_time_interval == 100);
  CHECK_FALSE(x.datastates_enabled());
  CHECK(x.expert_parallel.comm_num_sm == 12);
  CHECK(unsupported_enabled_features(x).empty());
}

TEST_CASE("checked-only sections: the data efficiency example from DeepSpeed's docs", "[config][checked_only]") {
  auto c = load(R"("data_efficiency": {
    "enabled": true,
    "seed": 1234,
    "data_routing": {
      "enabled": true,
      "random_ltd": {
        "enabled": true,
        "total_layer_num": 24,
        "random_ltd_layer_num": 22,
        "random_ltd_layer_id": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22],
        "model_mask_name": "attention_mask",
        "model_type": "decoder",
        "hidden_state_order": "seq_batch_dim",
        "random_ltd_schedule": {
          "min_value": 128,
          "max_value": 2048,
          "schedule_type": "fixed_linear",
          "schedule_config": {"require_steps": 200000, "seq_per_step": 16}
        }
      }
    },
    "data_sampling": {
      "enabled": true,
      "num_epochs": 1,
      "num_workers": 0,
      "curriculum_learning": {
        "enabled": true,
        "data_cluster_path": "/path/to/data_clusters",
        "curriculum_metrics": {
          "vocabularyrarity": {
            "index_to_sample_path": "/path/to/index_to_sample",
            "index_to_metric_path": "/path/to/index_to_metric",
            "difficulty_type": "percentile",
            "clustering_type": "schedule_based",
            "min_difficulty": 1,
            "max_difficulty": 100,
            "schedule_type": "fixed_root",
            "schedule_config": {"total_curriculum_step": 110000, "difficulty_step": 1, "root_degree": 2}
          }
        }
      }
    }
  })");
  INFO(report(c));
  REQUIRE(c.ok());
  const DataEfficiencyConfig& de = c.config.checked_only.data_efficiency;
  CHECK(de.enabled);
  const RandomLtdConfig& r = de.data_routing.random_ltd;
  CHECK(r.enabled);
  CHECK(r.total_layer_num == 24);
  CHECK(r.random_ltd_layer_id.size() == 22);
  CHECK(r.model_type == "decoder");
  CHECK(r.hidden_state_order == "seq_batch_dim");
  CHECK(r.random_ltd_schedule.max_value == 2048);
  CHECK(r.random_ltd_schedule.schedule_config.require_steps == 200000);
  const DataCurriculumConfig& cl = de.data_sampling.curriculum_learning;
  CHECK(de.data_sampling.num_epochs == 1);
  CHECK(cl.data_cluster_path == "/path/to/data_clusters");
  REQUIRE(cl.curriculum_metrics.count("vocabularyrarity") == 1);
  const CurriculumMetricConfig& m = cl.curriculum_metrics.at("vocabularyrarity");
  CHECK(m.difficulty_type == "percentile");
  CHECK(m.max_difficulty == 100);
  CHECK(m.schedule_type == "fixed_root");
  CHECK(m.schedule_config.total_curriculum_step == 110000);
  CHECK(m.schedule_config.root_degree == 2);

  auto features = unsupported_enabled_features(c.config.checked_only);
  CHECK(lists(features, "data_efficiency.enabled"));
  CHECK(lists(features, "data_efficiency.data_sampling.curriculum_learning.enabled"));
  CHECK(lists(features, "data_efficiency.data_routing.random_ltd.enabled"));
}

TEST_CASE("checked-only sections: a misspelled key deep inside a curriculum metric names the full path",
          "[config][checked_only]") {
  auto c = load(R"("data_efficiency": {
    "enabled": true,
    "data_sampling": {
      "enabled": true,
      "curriculum_learning": {
        "enabled": true,
        "curriculum_metrics": {
          "seqlen": {
            "min_difficulty": 8, "max_difficulty": 1024, "schedule_type": "fixed_linear",
            "schedule_config": {"total_curiculum_step": 1000, "difficulty_step": 8}
          }
        }
      }
    }
  })");
  REQUIRE_FALSE(c.ok());
  std::string text = report(c);
  INFO(text);
  CHECK_THAT(text, Contains("data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.seqlen."
                            "schedule_config.total_curiculum_step"));
  CHECK_THAT(text, Contains("did you mean total_curriculum_step"));
  CHECK_THAT(text, Contains("t.json:11:"));  // the line of the misspelled key
}

TEST_CASE("checked-only sections: curriculum learning enabled without metrics is an error", "[config][checked_only]") {
  auto c = load(R"("data_efficiency": {"enabled": true,
    "data_sampling": {"enabled": true, "curriculum_learning": {"enabled": true}}})");
  REQUIRE_FALSE(c.ok());
  std::string text = report(c);
  INFO(text);
  CHECK_THAT(text, Contains("data_efficiency.data_sampling.curriculum_learning.curriculum_metrics"));
}

TEST_CASE("checked-only sections: a curriculum schedule missing what its type needs", "[config][checked_only]") {
  auto c = load(R"("curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
    "min_difficulty": 8, "max_difficulty": 1024, "schedule_type": "fixed_discrete",
    "schedule_config": {"difficulty": [8, 64, 1024], "max_step": [100]}})");
  REQUIRE_FALSE(c.ok());
  std::string text = report(c);
  INFO(text);
  CHECK_THAT(text, Contains("curriculum_learning.schedule_config.difficulty"));
  CHECK_THAT(text, Contains("one element more than max_step"));
}

TEST_CASE("checked-only sections: the legacy curriculum learning example from the docs", "[config][checked_only]") {
  auto c = load(R"("curriculum_learning": {
    "enabled": true,
    "curriculum_type": "seqlen",
    "min_difficulty": 8,
    "max_difficulty": 1024,
    "schedule_type": "fixed_linear",
    "schedule_config": {"total_curriculum_step": 40000, "difficulty_step": 8}
  })");
  INFO(report(c));
  REQUIRE(c.ok());
  const auto& cl = c.config.checked_only.curriculum_learning;
  CHECK(cl.min_difficulty == 8);
  CHECK(cl.schedule_config.total_curriculum_step == 40000);
  CHECK(lists(unsupported_enabled_features(c.config.checked_only), "curriculum_learning.enabled"));
}

TEST_CASE("checked-only sections: compression examples from the docs", "[config][checked_only]") {
  auto c = load(R"("compression_training": {
    "layer_reduction": {
      "enabled": true,
      "keep_number_layer": 5,
      "module_name_prefix": "bert.encoder.layer",
      "teacher_layer": [2, 4, 6, 8, 10],
      "other_module_name": ["bert.pooler", "bert.embeddings", "classifier"]
    },
    "weight_quantization": {
      "shared_parameters": {
        "enabled": true, "quantizer_kernel": false, "schedule_offset": 0, "quantize_groups": 1,
        "quantize_verbose": false, "quantization_type": "symmetric", "rounding": "nearest",
        "quantize_weight_in_forward": false,
        "fp16_mixed_quantize": {"enabled": false, "quantize_change_ratio": 0.001}
      },
      "different_groups": {
        "wq1": {"params": {"start_bits": 8, "target_bits": 8, "quantization_period": 50},
                "modules": ["attention.self", "intermediate"]},
        "wq2": {"params": {"start_bits": 4, "target_bits": 4, "quantization_period": 50},
                "modules": ["attention.output"]}
      }
    },
    "activation_quantization": {
      "shared_parameters": {"enabled": true, "quantization_type": "asymmetric",
                            "range_calibration": "dynamic", "schedule_offset": 50},
      "different_groups": {"aq1": {"params": {"bits": 8}, "modules": ["attention.output"]}}
    },
    "sparse_pruning": {
      "shared_parameters": {"enabled": true, "schedule_offset": 30, "schedule_offset_end": 90,
                            "schedule_offset_stride": 15, "method": "snip_momentum",
                            "block_pattern": "4x1", "dense_ratio": 0.4,
                            "excluded_modules": ["classifier", "pooler"]},
      "different_groups": {}
    },
    "row_pruning": {
      "shared_parameters": {"enabled": true, "schedule_offset": 20, "method": "topk"},
      "different_groups": {"rp1": {"params": {"dense_ratio": 0.5}, "modules": ["intermediate.dense"],
                                   "related_modules": [["layer.\\w+.output.dense"]]}}
    },
    "head_pruning": {
      "shared_parameters": {"enabled": true, "schedule_offset": 10, "method": "topk", "num_heads": 12},
      "different_groups": {"rp1": {"params": {"dense_ratio": 0.5}, "modules": ["attention.output.dense"],
                                   "related_modules": [["self.query", "self.key", "self.value"]]}}
    },
    "channel_pruning": {
      "shared_parameters": {"enabled": true, "schedule_offset": 0, "method": "topk"},
      "different_groups": {"cp1": {"params": {"dense_ratio": 0.5}, "modules": ["layer....conv1"],
                                   "related_modules": [["layer....conv2", "layer....bn1"]]}}
    }
  })");
  INFO(report(c));
  REQUIRE(c.ok());
  const CompressionConfig& ct = c.config.checked_only.compression_training;
  CHECK(ct.layer_reduction.teacher_layer == std::vector<i64>{2, 4, 6, 8, 10});
  REQUIRE(ct.weight_quantization.different_groups.size() == 2);
  const auto& wq1 = ct.weight_quantization.different_groups.at("wq1");
  REQUIRE(wq1.params);
  CHECK(wq1.params->start_bits == 8);
  CHECK(wq1.params->quantization_period == 50);
  CHECK(wq1.modules == std::vector<std::string>{"attention.self", "intermediate"});
  CHECK(ct.activation_quantization.shared_parameters.quantization_type == "asymmetric");
  CHECK(ct.sparse_pruning.shared_parameters.method == "snip_momentum");
  CHECK(ct.sparse_pruning.shared_parameters.schedule_offset_end == 90);
  CHECK(ct.sparse_pruning.shared_parameters.dense_ratio == Approx(0.4));
  CHECK(ct.head_pruning.shared_parameters.num_heads == 12);
  REQUIRE(ct.channel_pruning.different_groups.at("cp1").related_modules);
  CHECK(ct.channel_pruning.different_groups.at("cp1").related_modules->items.size() == 1);

  auto features = unsupported_enabled_features(c.config.checked_only);
  for (const char* t : {"weight_quantization", "activation_quantization", "sparse_pruning", "row_pruning",
                        "head_pruning", "channel_pruning", "layer_reduction"})
    CHECK(lists(features, std::string("compression_training.") + t));
}

TEST_CASE("checked-only sections: compression mistakes", "[config][checked_only]") {
  SECTION("a group without its required params keys") {
    auto c = load(R"("compression_training": {"weight_quantization": {
      "shared_parameters": {"enabled": true},
      "different_groups": {"wq1": {"params": {"start_bits": 8}, "modules": ["attention"]}}}})");
    REQUIRE_FALSE(c.ok());
    std::string text = report(c);
    INFO(text);
    CHECK_THAT(text, Contains("compression_training.weight_quantization.different_groups.wq1.params.target_bits"));
  }
  SECTION("a misspelled key in a group's params") {
    auto c = load(R"("compression_training": {"row_pruning": {
      "shared_parameters": {"enabled": true, "method": "topk"},
      "different_groups": {"rp1": {"params": {"dense_ration": 0.5}}}}})");
    REQUIRE_FALSE(c.ok());
    std::string text = report(c);
    INFO(text);
    CHECK_THAT(text, Contains("compression_training.row_pruning.different_groups.rp1.params.dense_ration"));
    CHECK_THAT(text, Contains("did you mean dense_ratio"));
  }
  SECTION("an unknown method") {
    auto c = load(R"("compression_training": {"row_pruning": {"shared_parameters": {"method": "snip_momentum"},
      "different_groups": {}}})");
    REQUIRE_FALSE(c.ok());
    INFO(report(c));
    CHECK_THAT(report(c), Contains("compression_training.row_pruning.shared_parameters.method"));
  }
  SECTION("head pruning without num_heads") {
    auto c = load(R"("compression_training": {"head_pruning": {"shared_parameters": {"enabled": true},
      "different_groups": {"hp": {"params": {"dense_ratio": 0.5}}}}})");
    REQUIRE_FALSE(c.ok());
    INFO(report(c));
    CHECK_THAT(report(c), Contains("compression_training.head_pruning.shared_parameters.num_heads"));
  }
  SECTION("dense_ratio out of range") {
    auto c = load(R"("compression_training": {"sparse_pruning": {"shared_parameters": {"enabled": true},
      "different_groups": {"sp1": {"params": {"dense_ratio": 1.5}}}}})");
    REQUIRE_FALSE(c.ok());
    INFO(report(c));
    CHECK_THAT(report(c), Contains("sparse_pruning.different_groups.sp1.params.dense_ratio"));
  }
}

TEST_CASE("checked-only sections: parallelism sections", "[config][checked_only]") {
  auto c = load(R"("pipeline": {"stages": 4, "partition": "parameters", "activation_checkpoint_interval": 1,
                                "pipe_partitioned": false, "use_reentrant": false},
    "tensor_parallel": {"autotp_size": 4, "tp_overlap_comm": true, "tp": {"tp_size": 4},
                        "preset_model": "llama", "kernel_inject": false},
    "expert_parallel": {"enabled": true, "autoep_size": 8, "preset_model": "mixtral", "top_k": "auto",
                        "routed_scaling_factor": 2.5, "score_func": "softmax"})");
  INFO(report(c));
  REQUIRE(c.ok());
  const CheckedOnlyConfig& x = c.config.checked_only;
  CHECK(x.pipeline.stage_count() == 4);
  CHECK_FALSE(x.pipeline.pipe_partitioned);
  CHECK(x.pipeline.use_reentrant == false);
  CHECK(x.tensor_parallel.autotp_size == 4);
  CHECK(x.tensor_parallel.tp.tp_size == 4);
  CHECK(x.tensor_parallel.preset_model == "llama");
  CHECK(x.expert_parallel.autoep_size == 8);
  REQUIRE(x.expert_parallel.top_k);
  CHECK(x.expert_parallel.top_k->is_string("auto"));
  auto features = unsupported_enabled_features(x);
  CHECK(lists(features, "pipeline.stages = 4"));
  CHECK(lists(features, "tensor_parallel.autotp_size = 4"));
  CHECK(lists(features, "expert_parallel.enabled"));

  SECTION("pipeline.stages auto is accepted and is not pipeline parallelism") {
    auto a = load(R"("pipeline": {"stages": "auto"})");
    INFO(report(a));
    REQUIRE(a.ok());
    CHECK_FALSE(a.config.checked_only.pipeline.stage_count());
    CHECK(unsupported_enabled_features(a.config.checked_only).empty());
  }
  SECTION("pipeline.stages must be auto or a positive count") {
    auto a = load(R"("pipeline": {"stages": "two"})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("pipeline.stages"));
  }
  SECTION("pipeline flags must be booleans") {
    auto a = load(R"("pipeline": {"grad_partitioned": 2})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("pipeline.grad_partitioned"));
  }
  SECTION("tp is also accepted as tensor_parallel, but not both") {
    auto a = load(R"("tensor_parallel": {"tensor_parallel": {"tp_size": 2}})");
    INFO(report(a));
    REQUIRE(a.ok());
    CHECK(a.config.checked_only.tensor_parallel.tp.tp_size == 2);
    auto b = load(R"("tensor_parallel": {"tp": {"tp_size": 2}, "tensor_parallel": {"tp_size": 2}})");
    CHECK_FALSE(b.ok());
  }
  SECTION("a misspelled key in the strict tensor_parallel block") {
    auto a = load(R"("tensor_parallel": {"autotp_sise": 2})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("tensor_parallel.autotp_sise"));
    CHECK_THAT(report(a), Contains("did you mean autotp_size"));
  }
  SECTION("expert parallel cross-key rules") {
    auto a = load(R"("expert_parallel": {"enabled": true, "autoep_size": 4, "comm_backend": "deepep",
                                         "load_balance_coeff": 0.01})");
    REQUIRE_FALSE(a.ok());
    std::string text = report(a);
    INFO(text);
    CHECK_THAT(text, Contains("expert_parallel.comm_max_tokens_per_rank"));
    CHECK_THAT(text, Contains("expert_parallel.load_balance_coeff"));
  }
}

TEST_CASE("checked-only sections: strict pydantic blocks take DeepSpeed's default for \"auto\"; loose ones do not",
          "[config][checked_only]") {
  auto c = load(R"("hybrid_engine": {"enabled": true, "max_out_tokens": "auto", "inference_tp_size": 2})");
  INFO(report(c));
  REQUIRE(c.ok());
  CHECK(c.config.checked_only.hybrid_engine.max_out_tokens == 512);
  CHECK(c.config.checked_only.hybrid_engine.inference_tp_size == 2);
  CHECK(lists(unsupported_enabled_features(c.config.checked_only), "hybrid_engine.enabled"));

  auto loose = load(R"("progressive_layer_drop": {"enabled": true, "theta": "auto"})");
  REQUIRE_FALSE(loose.ok());
  INFO(report(loose));
  CHECK_THAT(report(loose), Contains("progressive_layer_drop.theta"));
}

TEST_CASE("checked-only sections: compile, weight_quantization, sparse attention, PLD", "[config][checked_only]") {
  auto c = load(R"("compile": {"deepcompile": true, "offload_activation": true, "passes": ["z3"]},
    "weight_quantization": {"quantized_initialization": {"num_bits": 4, "group_size": 64, "group_dim": 1,
                                                         "symmetric": false}},
    "sparse_attention": {"mode": "fixed", "block": 16, "different_layout_per_head": true,
                         "num_local_blocks": 4, "num_global_blocks": 1, "attention": "bidirectional",
                         "horizontal_global_attention": false, "num_different_global_patterns": 4,
                         "num_random_blocks": 0, "local_window_blocks": [4], "global_block_indices": [0],
                         "global_block_end_indices": null, "num_sliding_window_blocks": 3},
    "progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.001})");
  INFO(report(c));
  REQUIRE(c.ok());
  const CheckedOnlyConfig& x = c.config.checked_only;
  CHECK(x.compile.passes == std::vector<std::string>{"z3"});
  REQUIRE(x.weight_quantization);
  CHECK(x.weight_quantization->enabled);  // present = on
  REQUIRE(x.weight_quantization->quantized_initialization);
  CHECK(x.weight_quantization->quantized_initialization->find("group_size")->integer == 64);
  REQUIRE(x.sparse_attention);
  CHECK(x.sparse_attention->num_different_global_patterns == 4);
  CHECK(x.progressive_layer_drop.theta == Approx(0.5));
  auto features = unsupported_enabled_features(x);
  CHECK(lists(features, "compile.deepcompile"));
  CHECK(lists(features, "weight_quantization"));
  CHECK(lists(features, "sparse_attention"));
  CHECK(lists(features, "progressive_layer_drop.enabled (progressive layer dropping)"));

  SECTION("wrong values") {
    auto a = load(R"("sparse_attention": {"mode": "bigbrid"}, "compile": {"passes": ["z2"]},
                     "hybrid_engine": {"max_out_tokens": 0})");
    REQUIRE_FALSE(a.ok());
    std::string text = report(a);
    INFO(text);
    CHECK_THAT(text, Contains("sparse_attention.mode"));
    CHECK_THAT(text, Contains("did you mean \"bigbird\""));
    CHECK_THAT(text, Contains("compile.passes"));
    CHECK_THAT(text, Contains("hybrid_engine.max_out_tokens"));
  }
  SECTION("DeepCompile offload modes exclude each other") {
    auto a = load(R"("compile": {"deepcompile": true, "offload_activation": true, "offload_parameters": true})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("compile.offload_activation"));
  }
}

TEST_CASE("checked-only sections: the MoQ tutorial's quantize_training block loads with warnings",
          "[config][checked_only]") {
  // The tutorial's eigenvalue example without its top-level "quantize_type" (not a DeepSpeed key).
  auto c = load(R"("quantize_training": {
      "enabled": true,
      "quantize_verbose": true,
      "quantizer_kernel": true,
      "quantize_bits": {"start_bits": 12, "target_bits": 8},
      "quantize_schedule": {"quantize_period": 10, "schedule_offset": 0},
      "quantize_groups": 8,
      "quantize_algo": {"q_type": "symmetric", "rounding": "nearest"},
      "fp16_mixed_quantize": {"enabled": false, "quantize_change_ratio": 0.001},
      "eigenvalue": {"enabled": true, "verbose": true, "max_iter": 50, "tol": 1e-2, "stability": 0,
                     "gas_boundary_resolution": 1, "layer_name": "bert.encoder.layer", "layer_num": 12}
  })");
  INFO(report(c));
  REQUIRE(c.ok());
  const QuantizeTrainingConfig& q = c.config.checked_only.quantize_training;
  CHECK(q.quantize_bits.start_bits == 12);
  CHECK(q.eigenvalue.layer_num == 12);
  CHECK(q.eigenvalue.max_iter == 50);
  CHECK(has_warning_for(c, "quantize_training.quantize_bits"));
  CHECK_FALSE(has_warning_for(c, "quantize_training.eigenvalue"));

  SECTION("the tutorial's quantize-algo and quantize_type are not DeepSpeed keys") {
    auto a = load(R"("quantize_training": {"enabled": true, "quantize-algo": {"q_type": "symmetric"},
                                          "quantize_type": "symmetric"})");
    REQUIRE_FALSE(a.ok());
    std::string text = report(a);
    INFO(text);
    CHECK_THAT(text, Contains("quantize_training.quantize-algo: unknown key; did you mean quantize_algo"));
    CHECK_THAT(text, Contains("quantize_training.quantize_type: unknown key"));
  }
  SECTION("eigenvalue MoQ is refused alongside compression weight quantization") {
    auto a = load(R"("quantize_training": {"eigenvalue": {"enabled": true}},
      "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true},
        "different_groups": {"wq": {"params": {"start_bits": 8, "target_bits": 8}}}}})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("quantize_training.eigenvalue.enabled"));
  }
}

TEST_CASE("checked-only sections: elasticity, autotuning, nebula, datastates", "[config][checked_only]") {
  auto c = load(R"("elasticity": {"enabled": true, "max_train_batch_size": 2000, "micro_batch_sizes": [2, 4, 6],
                   "min_gpus": 1, "max_gpus": 10000, "min_time": 20, "prefer_larger_batch": true,
                   "ignore_non_elastic_batch_info": true, "version": 0.2, "num_gpus_per_node": 8,
                   "model_parallel_size": 2},
    "autotuning": {"enabled": true, "fast": true, "results_dir": "autotuning_results",
                   "exps_dir": "autotuning_exps", "overwrite": false, "metric": "FLOPS",
                   "start_profile_step": 3, "end_profile_step": 5, "tuner_type": "model_based",
                   "tuner_early_stopping": 5, "tuner_num_trials": 50, "max_train_batch_size": 1024,
                   "arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"},
                   "model_info": {"profile": false, "num_params": 1000000000, "hidden_size": 1024,
                                  "num_layers": 24}},
    "nebula": {"enabled": true, "persistent_storage_path": "/foo/bar", "persistent_time_interval": 100,
               "num_of_version_in_retention": 2, "enable_nebula_load": true},
    "datastates_ckpt": {"host_cache_size": 16})");
  INFO(report(c));
  REQUIRE(c.ok());
  const CheckedOnlyConfig& x = c.config.checked_only;
  CHECK(x.elasticity.num_gpus_per_node == 8);
  CHECK(x.elasticity.min_time == Approx(20));
  CHECK(x.autotuning.metric == "flops");  // canonical spelling
  REQUIRE(x.autotuning.model_info);
  CHECK(x.autotuning.model_info->hidden_size == 1024);
  CHECK(x.nebula.persistent_storage_path == "/foo/bar");
  CHECK(x.datastates_enabled());
  auto features = unsupported_enabled_features(x);
  for (const char* f : {"elasticity.enabled", "autotuning.enabled", "nebula.enabled", "datastates_ckpt"})
    CHECK(lists(features, f));

  SECTION("elasticity ranges") {
    auto a = load(R"("elasticity": {"model_parallel_size": 0, "num_gpus_per_node": 0})");
    REQUIRE_FALSE(a.ok());
    std::string text = report(a);
    INFO(text);
    CHECK_THAT(text, Contains("elasticity.model_parallel_size"));
    CHECK_THAT(text, Contains("elasticity.num_gpus_per_node"));
  }
  SECTION("the docs' spelling prefer_large_batch is not DeepSpeed's key") {
    auto a = load(R"("elasticity": {"prefer_large_batch": true})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("did you mean prefer_larger_batch"));
  }
  SECTION("elasticity enabled needs max_train_batch_size") {
    auto a = load(R"("elasticity": {"enabled": true, "ignore_non_elastic_batch_info": true})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("elasticity.max_train_batch_size"));
  }
  SECTION("only elasticity versions 0.1 and 0.2 exist") {
    auto a = load(R"("elasticity": {"enabled": true, "max_train_batch_size": 64, "version": 0.15,
                                    "ignore_non_elastic_batch_info": true})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("elasticity.version"));
  }
  SECTION("autotuning profile window") {
    auto a = load(R"("autotuning": {"start_profile_step": 6, "end_profile_step": 5})");
    REQUIRE_FALSE(a.ok());
    INFO(report(a));
    CHECK_THAT(report(a), Contains("autotuning.end_profile_step"));
  }
  SECTION("datastates_ckpt false is off") {
    auto a = load(R"("datastates_ckpt": false)");
    INFO(report(a));
    REQUIRE(a.ok());
    CHECK_FALSE(a.config.checked_only.datastates_enabled());
  }
}

TEST_CASE("checked-only sections: dynamic batching needs max_tokens", "[config][checked_only]") {
  auto c = load(R"("data_efficiency": {"enabled": true, "data_sampling": {"enabled": true,
    "dynamic_batching": {"enabled": true, "lr_scaling_method": "sqrt", "sequence_picking_order": "seqlen"}}})");
  REQUIRE_FALSE(c.ok());
  INFO(report(c));
  CHECK_THAT(report(c), Contains("data_efficiency.data_sampling.dynamic_batching.max_tokens"));

  auto ok = load(R"("data_efficiency": {"enabled": true, "data_sampling": {"enabled": true,
    "dynamic_batching": {"enabled": true, "max_tokens": 8192, "min_batch_size": 2, "max_batch_size": 64}}})");
  INFO(report(ok));
  REQUIRE(ok.ok());
  CHECK(ok.config.checked_only.data_efficiency.data_sampling.dynamic_batching.max_tokens == 8192);
  CHECK(lists(unsupported_enabled_features(ok.config.checked_only), "data_efficiency.data_sampling.dynamic_batching"));
}
