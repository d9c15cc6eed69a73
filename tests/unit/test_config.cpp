// The DeepSpeed config: table-driven accepted/broken configs, defaults, "auto" resolution,
// batch derivation and the effective-config dump.
#include "build_config.h"
#include "configs/load.h"
#include "configs/plans.h"
#include "offload/aio_options.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace dscpp::config;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(DSCPP_SOURCE_ROOT) / "tests" / "data" / "configs";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "--world_size 3 --learning_rate 1e-4" -> RunFacts.
RunFacts parse_facts(const std::string& line) {
  RunFacts f;
  std::istringstream in(line);
  std::string flag, value;
  while (in >> flag >> value) {
    if (flag == "--world_size")
      f.world_size = std::stoll(value);
    else if (flag == "--hidden_size")
      f.hidden_size = std::stoll(value);
    else if (flag == "--total_steps")
      f.total_steps = std::stoll(value);
    else if (flag == "--micro_batch")
      f.micro_batch = std::stoll(value);
    else if (flag == "--learning_rate")
      f.learning_rate = std::stod(value);
    else
      FAIL("unknown fact flag in test data: " << flag);
  }
  return f;
}

LoadedConfig load(const std::string& text, RunFacts facts = {}) {
  return load_config_text(text, "t.json", facts);
}

std::string problems(const LoadedConfig& c) {
  return c.diagnostics.format(c.file_name);
}

}  // namespace

TEST_CASE("every broken config is refused with its expected message and place", "[config]") {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(kData / "broken")) {
    if (entry.path().extension() != ".json") continue;
    ++cases;
    fs::path expect_path = entry.path();
    expect_path.replace_extension(".expect");
    std::istringstream expect(slurp(expect_path));
    std::string line, message, at, facts;
    while (std::getline(expect, line)) {
      if (line.rfind("error: ", 0) == 0) message = line.substr(7);
      if (line.rfind("at: ", 0) == 0) at = line.substr(4);
      if (line.rfind("facts: ", 0) == 0) facts = line.substr(7);
    }
    INFO("case " << entry.path().filename().string());
    REQUIRE(!message.empty());
    LoadedConfig c = load_config_text(slurp(entry.path()), entry.path().filename().string(), parse_facts(facts));
    std::string report = problems(c);
    INFO("report:\n" << report);
    CHECK_FALSE(c.ok());
    CHECK(report.find(message) != std::string::npos);
    if (!at.empty()) CHECK(report.find(entry.path().filename().string() + ":" + at + ": error: ") != std::string::npos);
  }
  CHECK(cases >= 60);
}

// Valid DeepSpeed whose effect dscpp does not give: `config check` accepts the file, the runtime
// refuses it naming the key (unsupported_features), so each case must pass the schema and rules.
TEST_CASE("every config dscpp will not run is valid and names its key, its effect and the remedy", "[config]") {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(kData / "unsupported")) {
    if (entry.path().extension() != ".json") continue;
    ++cases;
    fs::path expect_path = entry.path();
    expect_path.replace_extension(".expect");
    std::istringstream expect(slurp(expect_path));
    std::string line, message;
    while (std::getline(expect, line))
      if (line.rfind("unsupported: ", 0) == 0) message = line.substr(13);
    INFO("case " << entry.path().filename().string());
    REQUIRE(!message.empty());
    LoadedConfig c = load_config_text(slurp(entry.path()), entry.path().filename().string(), {});
    INFO("report:\n" << problems(c));
    REQUIRE(c.ok());
    std::vector<std::string> listed = unsupported_features(c.config);
    std::string all;
    for (const auto& f : listed) all += f + "\n";
    INFO("unsupported:\n" << all);
    CHECK(all.find(message) != std::string::npos);
  }
  CHECK(cases >= 7);
}

TEST_CASE("the refused keys at DeepSpeed's defaults, or where they do nothing, are accepted and run", "[config]") {
  LoadedConfig c = load(R"({
    "train_micro_batch_size_per_gpu": 2,
    "bf16": {"enabled": true, "bf16_master_weights_and_grads": false, "bf16_optimizer_states": false,
             "immediate_grad_update": true},
    "zero_optimization": {"stage": 2, "load_from_fp32_weights": true, "contiguous_gradients": false,
                          "round_robin_gradients": true, "allgather_partitions": false},
    "tensorboard": {"enabled": false, "output_path": "tb/"}, "wandb": {"enabled": false},
    "comet": {"enabled": false}, "comms_logger": {"enabled": false, "debug": true},
    "checkpoint": {"load_universal": false, "use_node_local_storage": false, "tag_validation": "Fail"},
    "csv_monitor": {"enabled": true, "output_path": "csv/"}
  })");
  INFO(problems(c));
  REQUIRE(c.ok());
  std::string all;
  for (const auto& f : unsupported_features(c.config)) all += f + "\n";
  CHECK(all.empty());
  // fp32 training loads the same master either way; fp16 master weights false is the default.
  c = load(R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": false, "fp16_master_weights_and_grads": false},
               "zero_optimization": {"stage": 2, "load_from_fp32_weights": false}})");
  REQUIRE(c.ok());
  CHECK(unsupported_features(c.config).empty());
}

TEST_CASE("every template passes check at several world sizes", "[config]") {
  int templates = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(DSCPP_SOURCE_ROOT) / "configs" / "templates")) {
    ++templates;
    for (long long world : {1, 2, 8}) {
      INFO(entry.path().filename().string() << " at world size " << world);
      RunFacts f;
      f.world_size = world;
      LoadedConfig c = load_config_file(entry.path().string(), f);
      INFO(problems(c));
      CHECK(c.ok());
      CHECK(c.diagnostics.all().empty());
      CHECK(*c.config.train_batch_size == 8 * world);
    }
  }
  CHECK(templates >= 10);
}

TEST_CASE("DeepSpeed's defaults fill a minimal config", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 16})");
  REQUIRE(c.ok());
  const DsConfig& d = c.config;
  CHECK(*d.train_micro_batch_size_per_gpu == 16);
  CHECK(*d.gradient_accumulation_steps == 1);
  CHECK(d.zero_optimization.stage == 0);
  CHECK(d.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(d.zero_optimization.prefetch_bucket_size == 50000000);
  CHECK(d.zero_optimization.model_persistence_threshold == kMaxInt);
  CHECK(d.zero_optimization.contiguous_gradients);
  CHECK_FALSE(d.zero_optimization.overlap());
  CHECK(d.fp16.initial_scale_power == 16);
  CHECK(d.fp16.loss_scale_window == 1000);
  CHECK(d.fp16.hysteresis == 2);
  CHECK(d.aio.block_size == 1048576);
  CHECK(d.aio.queue_depth == 8);
  CHECK(d.aio.overlap_events);
  CHECK(d.checkpoint.tag_validation == "Warn");
  CHECK(d.gradient_clipping == 1.0);
  CHECK(d.steps_per_print == 10);
  // No optimizer block: the runtime trains with AdamW from the training arguments (HF Trainer).
  REQUIRE(d.optimizer.has_value());
  CHECK(d.optimizer->kind == OptimizerKind::adamw);
  CHECK(d.optimizer->params.lr == 5e-5);
  CHECK(d.optimizer->params.weight_decay == 0);
}

TEST_CASE("stage 3 turns overlap_comm on unless it is set", "[config]") {
  CHECK(load(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})").config.zero_optimization.overlap());
  CHECK_FALSE(load(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "overlap_comm": false}})")
                  .config.zero_optimization.overlap());
}

TEST_CASE("integers may be written as 5e8; aliases and case-insensitive values map to the canonical ones", "[config]") {
  LoadedConfig c = load(R"({
    "train_batch_size": 8,
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8, "prefetch_bucket_size": 1e7,
                          "param_persistence_threshold": 1e4},
    "checkpoint": {"tag_validation": "fail"},
    "communication_data_type": "BF16",
    "optimizer": {"type": "adamw"},
    "bfloat16": {"enabled": true}
  })");
  INFO(problems(c));
  REQUIRE(c.ok());
  CHECK(c.config.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(c.config.zero_optimization.prefetch_bucket_size == 10000000);
  CHECK(c.config.zero_optimization.param_persistence_threshold == 10000);
  CHECK(c.config.checkpoint.tag_validation == "Fail");
  CHECK(*c.config.communication_data_type == "bf16");
  CHECK(c.config.optimizer->type == "AdamW");
  CHECK(c.config.optimizer->kind == OptimizerKind::adamw);
  CHECK(c.config.bf16.enabled);
}

TEST_CASE("valid DeepSpeed optimizer settings dscpp does not run are named, not refused as invalid", "[config]") {
  auto listed = [](const std::string& text, const std::string& what) {
    LoadedConfig c = load(text);
    INFO(problems(c));
    REQUIRE(c.ok());
    for (const std::string& f : unsupported_features(c.config))
      if (f.find(what) != std::string::npos) return true;
    return false;
  };
  CHECK(listed(R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}})", "optimizer.type OneBitAdam"));
  CHECK(listed(
      R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"amsgrad": true, "torch_adam": true}}})",
      "optimizer.params.amsgrad"));
  CHECK_FALSE(listed(R"({"train_batch_size": 8, "optimizer": {"type": "Lion"}})", "optimizer"));
  CHECK(listed(R"({"train_batch_size": 8, "scheduler": {"type": "StepLR", "params": {"step_size": 3}}})",
               "scheduler.type StepLR"));
  CHECK(listed(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1, 0.2]}}})",
               "scheduler.params.warmup_max_lr with 2 values"));
  CHECK_FALSE(
      listed(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1]}}})",
             "scheduler"));
  CHECK(listed(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
                   "zeropp_loco_param": {"err_beta": 0.8}}})",
               "zeropp_loco_param"));
}

TEST_CASE("optimizer params take the type's defaults; Adam means AdamW unless adam_w_mode is off", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad"}})");
  REQUIRE(c.ok());
  CHECK(c.config.optimizer->params.lr == 1e-2);
  CHECK(c.config.optimizer->params.eps == 1e-10);
  c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})");
  REQUIRE(c.ok());
  CHECK(c.config.optimizer->decoupled_weight_decay());
  CHECK(c.config.optimizer->params.betas == std::vector<double>{0.9, 0.999});
  c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  CHECK_FALSE(c.config.optimizer->decoupled_weight_decay());
}

TEST_CASE("deprecated keys map onto their replacements with a warning", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                            "zero_optimization": {"stage": 2, "cpu_offload": true}})");
  INFO(problems(c));
  REQUIRE(c.ok());
  REQUIRE(c.config.zero_optimization.offload_optimizer);
  CHECK(c.config.zero_optimization.offload_optimizer->device == "cpu");
  CHECK(problems(c).find("warning: zero_optimization.cpu_offload: \"cpu_offload\" is deprecated") != std::string::npos);

  c = load(
      R"({"train_batch_size": 8, "allgather_size": 1000, "optimizer": {"type": "Adam"}, "zero_optimization": true})");
  INFO(problems(c));
  REQUIRE(c.ok());
  CHECK(c.config.zero_optimization.stage == 1);
  CHECK(c.config.zero_optimization.allgather_bucket_size == 1000);
}

TEST_CASE("offload_param below stage 3 is accepted with a warning (DeepSpeed ignores it silently)", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                           "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  INFO(problems(c));
  CHECK(c.ok());
  CHECK(problems(c).find("warning: zero_optimization.offload_param: parameter offload works only with ZeRO stage 3 "
                         "(stage is 2): ignored") != std::string::npos);
}

TEST_CASE("quoted booleans are taken with a warning instead of being truthy", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "fp16": {"enabled": "false"}})");
  REQUIRE(c.ok());
  CHECK_FALSE(c.config.fp16.enabled);
  CHECK(problems(c).find("\"false\" taken as false; write false") != std::string::npos);
}

TEST_CASE("the batch triple is derived as DeepSpeed does, with floor division", "[config]") {
  RunFacts four;
  four.world_size = 4;
  LoadedConfig c = load(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", four);
  REQUIRE(c.ok());
  CHECK(*c.config.gradient_accumulation_steps == 4);
  c = load(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", four);
  REQUIRE(c.ok());
  CHECK(*c.config.train_micro_batch_size_per_gpu == 8);
  c = load(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", four);
  REQUIRE(c.ok());
  CHECK(*c.config.train_batch_size == 60);
  c = load(R"({"train_micro_batch_size_per_gpu": 3})", four);
  REQUIRE(c.ok());
  CHECK(*c.config.train_batch_size == 12);
  CHECK(*c.config.gradient_accumulation_steps == 1);
  // Sequence parallelism divides the data-parallel size.
  RunFacts eight;
  eight.world_size = 8;
  c = load(R"({"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 2})", eight);
  REQUIRE(c.ok());
  CHECK(*c.config.train_batch_size == 8);
}

TEST_CASE("auto values resolve like the HF Trainer", "[config][auto]") {
  const char* text = R"({
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "sub_group_size": "auto"}
  })";
  SECTION("with the Trainer's defaults and the facts only a run knows") {
    RunFacts f;
    f.world_size = 4;
    f.hidden_size = 1000;
    f.total_steps = 500;
    LoadedConfig c = load(text, f);
    INFO(problems(c));
    REQUIRE(c.ok());
    const DsConfig& d = c.config;
    CHECK(*d.train_micro_batch_size_per_gpu == 8);
    CHECK(*d.gradient_accumulation_steps == 1);
    CHECK(*d.train_batch_size == 32);
    CHECK(d.gradient_clipping == 1.0);
    CHECK_FALSE(d.fp16.enabled);
    CHECK_FALSE(d.bf16.enabled);
    CHECK(d.optimizer->params.lr == 5e-5);
    CHECK(d.optimizer->params.betas == std::vector<double>{0.9, 0.999});
    CHECK(d.optimizer->params.eps == 1e-8);
    CHECK(d.optimizer->params.weight_decay == 0);
    CHECK(d.scheduler->params.warmup_min_lr == std::vector<double>{0});
    CHECK(d.scheduler->params.warmup_max_lr == std::vector<double>{5e-5});
    CHECK(d.scheduler->params.warmup_num_steps == 0);
    CHECK(*d.scheduler->params.total_num_steps == 500);
    CHECK(d.zero_optimization.reduce_bucket_size == 1000000);
    CHECK(d.zero_optimization.prefetch_bucket_size == 900000);  // int(0.9·h²), never a float
    CHECK(d.zero_optimization.param_persistence_threshold == 10000);
    // sub_group_size has no HF rule; zero_optimization is pydantic-strict, so DeepSpeed's default.
    CHECK(d.zero_optimization.sub_group_size == 1000000000);
    std::string table = format_effective_config_table(c);
    CHECK(table.find("auto: world_size × micro batch × accumulation = 4 × 8 × 1") != std::string::npos);
    CHECK(table.find("auto: 0.9 × hidden² = int(0.9 × 1000²)") != std::string::npos);
  }
  SECTION("with explicit training arguments") {
    RunFacts f;
    f.world_size = 2;
    f.hidden_size = 64;
    f.total_steps = 1000;
    f.micro_batch = 4;
    f.gradient_accumulation_steps = 3;
    f.learning_rate = 2e-4;
    f.adam_beta2 = 0.95;
    f.warmup_ratio = 0.1;
    f.bf16 = true;
    LoadedConfig c = load(text, f);
    INFO(problems(c));
    REQUIRE(c.ok());
    const DsConfig& d = c.config;
    CHECK(*d.train_batch_size == 24);
    CHECK(d.bf16.enabled);
    CHECK(d.optimizer->params.lr == 2e-4);
    CHECK(d.optimizer->params.betas == std::vector<double>{0.9, 0.95});
    CHECK(d.scheduler->params.warmup_num_steps == 100);  // ceil(0.1 × 1000)
    CHECK(d.scheduler->params.warmup_max_lr == std::vector<double>{2e-4});
  }
  SECTION("every unresolvable auto is reported, each naming its flag") {
    LoadedConfig c = load(text);
    CHECK_FALSE(c.ok());
    std::string report = problems(c);
    CHECK(report.find(
              "zero_optimization.reduce_bucket_size: \"auto\" needs the model's hidden size; pass --hidden_size") !=
          std::string::npos);
    CHECK(report.find("scheduler.params.total_num_steps: \"auto\" needs the number of optimizer steps of the run; pass "
                      "--total_steps") != std::string::npos);
    CHECK(c.diagnostics.errors().size() == 4);
  }
}

TEST_CASE("stage-3-only autos stay DeepSpeed's defaults below stage 3", "[config][auto]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
    "zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"}})");
  INFO(problems(c));
  REQUIRE(c.ok());
  CHECK(c.config.zero_optimization.prefetch_bucket_size == 50000000);
}

TEST_CASE("all errors are reported at once, in file order", "[config]") {
  LoadedConfig c =
      load("{\n \"train_batch_size\": 8,\n \"fp16\": {\"enabld\": true},\n \"zero_optimization\": {\"stage\": 9}\n}");
  auto errors = c.diagnostics.errors();
  REQUIRE(errors.size() == 2);
  std::string report = problems(c);
  CHECK(report.find("t.json:3:11: error: fp16.enabld: unknown key; did you mean enabled?") <
        report.find("t.json:4:32"));
}

TEST_CASE("the effective config lists every key with its source", "[config]") {
  LoadedConfig c = load("{\n \"train_micro_batch_size_per_gpu\": 4,\n \"zero_optimization\": {\"stage\": 3}\n}");
  REQUIRE(c.ok());
  std::string table = format_effective_config_table(c);
  CHECK(table.find("zero_optimization.stage") != std::string::npos);
  CHECK(table.find("config line 3") != std::string::npos);
  CHECK(table.find("derived: micro × dp = 4 × 1") != std::string::npos);
  CHECK(table.find("aio.block_size") != std::string::npos);
  // The JSON dump is itself a config that loads to the same values.
  std::string json = format_effective_config_json(c);
  LoadedConfig again = load(json);
  INFO(problems(again));
  REQUIRE(again.ok());
  CHECK(format_effective_config_json(again) == json);
}

TEST_CASE("the schema lists its keys", "[config]") {
  size_t count = 0;
  std::string keys = format_schema_keys(&count);
  CHECK(count > 300);
  CHECK(keys.find("zero_optimization.offload_optimizer.nvme_path") != std::string::npos);
  CHECK(keys.find("zero_optimization.stage3_max_live_parameters") != std::string::npos);
}

TEST_CASE("a config can be given as URL-safe base64, as DeepSpeed allows", "[config]") {
  // {"train_batch_size": 8}
  LoadedConfig c = load_config_file("eyJ0cmFpbl9iYXRjaF9zaXplIjogOH0=", {});
  INFO(problems(c));
  REQUIRE(c.ok());
  CHECK(*c.config.train_batch_size == 8);
  c = load_config_file("/nonexistent/ds.json", {});
  CHECK(problems(c).find("/nonexistent/ds.json: error: cannot read the config file: No such file or directory") !=
        std::string::npos);
}

TEST_CASE("closest_match suggests only near misses", "[config]") {
  std::vector<std::string> keys = {"offload_param", "offload_optimizer", "stage", "reduce_bucket_size"};
  CHECK(closest_match("offload_params", keys) == "offload_param");
  CHECK(closest_match("offlaod_param", keys) == "offload_param");
  CHECK(closest_match("Stage", keys) == "stage");
  CHECK(closest_match("reduce_bucket", keys) == "reduce_bucket_size");
  CHECK(closest_match("zzzz", keys).empty());
}

// Examples from DeepSpeed's documentation and the HF Transformers/Accelerate guides
// (tests/data/configs/accepted/SOURCES.md lists where each comes from). Each must be
// accepted at some world size: several fix a topology (TP/EP degree, a batch triple).
TEST_CASE("every documented DeepSpeed config example is accepted", "[config][docs]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kData / "accepted")) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    std::string text = slurp(entry.path());
    bool has_auto = text.find("\"auto\"") != std::string::npos;
    std::string last_report;
    bool accepted = false;
    for (long long world : {1, 2, 4, 8, 16, 3}) {
      RunFacts f;
      f.world_size = world;
      if (has_auto) f.hidden_size = 1024, f.total_steps = 1000;
      LoadedConfig c = load_config_text(text, entry.path().filename().string(), f);
      if (c.ok()) {
        accepted = true;
        break;
      }
      last_report = problems(c);
    }
    INFO(entry.path().filename().string() << "\n" << last_report);
    CHECK(accepted);
  }
  CHECK(files >= 100);
}

// Examples in the documentation that DeepSpeed itself rejects (doc-errata/SOURCES.md says
// why for each): dscpp must refuse them too, not silently take them.
TEST_CASE("documented examples DeepSpeed rejects are refused", "[config][docs]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kData / "doc-errata")) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    RunFacts f;
    f.world_size = 2, f.hidden_size = 1024, f.total_steps = 1000;
    LoadedConfig c = load_config_text(slurp(entry.path()), entry.path().filename().string(), f);
    INFO(entry.path().filename().string());
    CHECK_FALSE(c.ok());
  }
  CHECK(files >= 15);
}

TEST_CASE("huge values cost little and are echoed shortened", "[config]") {
  // 10 MB as optimizer.type: no suggestion search over it (it used to take a minute and 1.4 GB).
  const auto start = std::chrono::steady_clock::now();
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": ")" + std::string(10'000'000, 'A') + "\"}}");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_FALSE(c.ok());
  CHECK(s < 5.0);
  CHECK(problems(c).size() < 2000);
  CHECK_THAT(problems(c), Catch::Contains("… (10000000 characters)"));
  // 100 KB where an integer belongs: the first 80 characters, and the length.
  c = load(R"({"train_batch_size": 8, "zero_optimization": {"stage": ")" + std::string(100'000, 'x') + "\"}}");
  CHECK_THAT(problems(c), Catch::Contains("found a string \"" + std::string(80, 'x') + "\"… (100000 characters)"));
  CHECK(problems(c).size() < 1000);
  // A whole number too large for 64 bits is called that, not "not a whole number".
  c = load(R"({"train_batch_size": 8, "zero_optimization": {"stage": 12345678901234567890}})");
  CHECK_THAT(problems(c), Catch::Contains("a whole number beyond the 64-bit integer range"));
}

// The gradient accumulation dtype each accepted mix runs with. Which mixes DeepSpeed 0.19.8
// accepts is the system test ds_rules' (against DeepSpeedEngine._do_optimizer_sanity_check, run
// live); here: the defaults, and dscpp's own stage-0 choice, which DeepSpeed does not have.
TEST_CASE("gradient accumulation dtype: DeepSpeed's defaults and dscpp.stage0_grad_accum_dtype", "[config]") {
  auto grads = [](const std::string& text) {
    LoadedConfig c = load(text);
    INFO(c.diagnostics.format("t.json"));
    REQUIRE(c.ok());
    return precision_plan(c.config);
  };
  const std::string bf16 = R"("train_batch_size": 8, "bf16": {"enabled": true})";
  SECTION("bf16 at stage 0 accumulates in bf16 unless dscpp's key asks for fp32") {
    CHECK(grads("{" + bf16 + "}").grads == dscpp::DType::bf16);
    CHECK(grads("{" + bf16 + R"(, "data_types": {"grad_accum_dtype": "bfloat16"}})").grads == dscpp::DType::bf16);
    PrecisionPlan ours = grads("{" + bf16 + R"(, "dscpp": {"stage0_grad_accum_dtype": "fp32"}})");
    CHECK(ours.grads == dscpp::DType::f32);
    CHECK(ours.wire == dscpp::DType::bf16);
  }
  SECTION("fp16 at stage 0: fp16, or fp32 through dscpp's key") {
    CHECK(grads(R"({"train_batch_size": 8, "fp16": {"enabled": true}})").grads == dscpp::DType::f16);
    CHECK(grads(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "dscpp": {"stage0_grad_accum_dtype": "fp32"}})")
              .grads == dscpp::DType::f32);
  }
  SECTION("under ZeRO the DeepSpeed key decides") {
    CHECK(grads("{" + bf16 + R"(, "zero_optimization": {"stage": 2}})").grads == dscpp::DType::bf16);
    CHECK(grads("{" + bf16 + R"(, "zero_optimization": {"stage": 1}, "data_types": {"grad_accum_dtype": "fp32"}})")
              .grads == dscpp::DType::f32);
  }
  SECTION("dscpp's key is refused where it cannot apply, naming it") {
    for (const std::string& text : std::vector<std::string>{
             R"({"train_batch_size": 8, "dscpp": {"stage0_grad_accum_dtype": "fp32"}})",
          "{" + bf16 + R"(, "dscpp": {"stage0_grad_accum_dtype": "fp32"}, "data_types": {"grad_accum_dtype": "bf16"}})",
          "{" + bf16 + R"(, "dscpp": {"stage0_grad_accum_dtype": "bf16"}})"}) {
      LoadedConfig c = load(text);
      INFO(text);
      CHECK_FALSE(c.ok());
      CHECK(c.diagnostics.format("t.json").find("dscpp.stage0_grad_accum_dtype") != std::string::npos);
    }
  }
}

// The aio limits are the I/O engine's own (offload::aio_problems, which its validate throws):
// an error where a run would start that engine, a warning where nothing reads the section.
TEST_CASE("aio values the I/O engine refuses: an error with NVMe offload, else a warning", "[config]") {
  const std::string aio = R"("aio": {"block_size": 6000, "queue_depth": 5000, "thread_count": 300})";
  LoadedConfig nvme = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}, )" + aio + "}");
  CHECK_FALSE(nvme.ok());
  const std::string report = problems(nvme);
  INFO(report);
  CHECK_THAT(report, Catch::Contains("error: aio.block_size: expected a positive multiple of 4096 bytes (the O_DIRECT "
                                     "alignment) up to 1 GiB, found 6000"));
  CHECK_THAT(report,
             Catch::Contains("error: aio.queue_depth: expected 1 to 4096 requests in flight per thread, found 5000"));
  CHECK_THAT(report, Catch::Contains("error: aio.intra_op_parallelism: expected 1 to 256 I/O threads, found 300"));
  for (const dscpp::offload::AioProblem& p : dscpp::offload::aio_problems(6000, 5000, 300))
    CHECK_THAT(report, Catch::Contains(dscpp::offload::describe(p)));  // the run's words

  LoadedConfig cpu = load(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3,
    "offload_optimizer": {"device": "cpu"}}, )" + aio + "}");
  INFO(problems(cpu));
  CHECK(cpu.ok());
  CHECK_THAT(problems(cpu), Catch::Contains("warning: aio.block_size: expected a positive multiple of 4096") &&
                                Catch::Contains("(unused without NVMe offload, which would refuse it)"));
  CHECK(load(R"({"train_batch_size": 8, "aio": {"block_size": 8192}})").diagnostics.all().empty());
}

TEST_CASE("compute precision: the 16-bit type enabled, else fp32; the plan carries it", "[config]") {
  auto compute = [](const std::string& text) {
    LoadedConfig c = load(text);
    REQUIRE(c.ok());
    CHECK(precision_plan(c.config).compute == compute_precision(c.config));
    return compute_precision(c.config);
  };
  CHECK(compute(R"({"train_batch_size": 8})") == dscpp::DType::f32);
  CHECK(compute(R"({"train_batch_size": 8, "bf16": {"enabled": true}})") == dscpp::DType::bf16);
  CHECK(compute(R"({"train_batch_size": 8, "fp16": {"enabled": true}})") == dscpp::DType::f16);
  // Asked before the refusals are reported: a config the runtime refuses still answers.
  LoadedConfig refused =
      load(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "int8"})");
  CHECK(compute_precision(refused.config) == dscpp::DType::bf16);
}

TEST_CASE("wandb and comet are warned about, tensorboard is written", "[config]") {
  LoadedConfig c = load(R"({"train_batch_size": 8, "tensorboard": {"enabled": true}, "wandb": {"enabled": true},
                            "comet": {"enabled": true}, "csv_monitor": {"enabled": true}})");
  REQUIRE(c.ok());
  CHECK(unsupported_features(c.config).empty());
  auto warned = monitors_not_written(c.config);
  REQUIRE(warned.size() == 2);
  CHECK(warned[0].find("wandb.enabled: true: dscpp writes nothing to Weights & Biases") == 0);
  CHECK(warned[1].find("comet.enabled: true") == 0);
}
