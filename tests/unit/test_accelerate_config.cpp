// Accelerate's config files and launch flags: how they are read (and refused), merged, and what
// they become. The DeepSpeed configs themselves are compared with Accelerate's own in
// tests/system/accelerate_launch.sh; here are the rules that need no Python.
#include "core/error.h"
#include "launcher/accelerate/deepspeed_config.h"
#include "launcher/accelerate/launch_mapping.h"
#include "launcher/accelerate/settings.h"
#include "launcher_fixture.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace dscpp::launcher;
using namespace dscpp::launcher::accelerate;
using Catch::Matchers::Contains;
using launcher_test::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dscpp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kDeepSpeedYaml =
    "compute_environment: LOCAL_MACHINE\n"
    "debug: false\n"
    "deepspeed_config:\n"
    "  gradient_accumulation_steps: 2\n"
    "  offload_optimizer_device: cpu\n"
    "  zero3_init_flag: true\n"
    "  zero_stage: 3\n"
    "distributed_type: DEEPSPEED\n"
    "downcast_bf16: 'no'\n"
    "fsdp_config: {fsdp_sharding_strategy: FULL_SHARD}\n"
    "machine_rank: 0\n"
    "mixed_precision: bf16\n"
    "num_machines: 1\n"
    "num_processes: 2\n"
    "use_cpu: true\n";

}  // namespace

TEST_CASE("an Accelerate config file is read with its types and places") {
  TempDir dir;
  Settings s = read_config_file(dir.write("cfg.yaml", kDeepSpeedYaml).string());
  CHECK(s.integer("zero_stage") == 3);
  CHECK(s.integer("num_processes") == 2);
  CHECK(s.boolean("use_cpu") == true);
  CHECK(s.string("mixed_precision") == "bf16");
  CHECK(s.find("zero_stage")->where == (dir.path / "cfg.yaml").string() + ":7");
  CHECK(s.deepspeed_fields_in_file == std::vector<std::string>{"gradient_accumulation_steps",
                                                               "offload_optimizer_device", "zero3_init_flag",
                                                               "zero_stage"});
  // Only the other backends' settings that say something are mentioned.
  REQUIRE(s.not_applicable.size() == 1);
  CHECK_THAT(s.not_applicable[0], Contains("fsdp_config"));
}

TEST_CASE("what `accelerate config default` writes (JSON) reads as YAML") {
  TempDir dir;
  Settings s = read_config_file(
      dir.write("default_config.yaml",
                "{\"compute_environment\": \"LOCAL_MACHINE\", \"debug\": false, \"distributed_type\": \"NO\", "
                "\"mixed_precision\": \"no\", \"num_processes\": 1, \"use_cpu\": true}")
          .string());
  CHECK(s.string("distributed_type") == "NO");
  CHECK(s.integer("num_processes") == 1);
}

TEST_CASE("a malformed Accelerate config file is refused naming the file and line") {
  TempDir dir;
  auto refuse = [&](const std::string& text) {
    return error_of([&] { read_config_file(dir.write("bad.yaml", text).string()); });
  };
  CHECK_THAT(refuse("distributed_type: DEEPSPEED\ndeepspeed_config:\n\tzero_stage: 2\n"),
             Contains("bad.yaml:3: a tab in the indentation"));
  CHECK_THAT(refuse("distributed_type: NO\nnum_processes: 2\nnum_processes: 4\n"),
             Contains("bad.yaml:3: duplicate key 'num_processes' (first at line 2)"));
  CHECK_THAT(refuse("distributed_type: NO\nnum_processes: two\n"),
             Contains("bad.yaml:2: num_processes: expected an integer, found 'two'"));
  CHECK_THAT(refuse("distributed_type: NO\nnum_processes: \"2\"\n"),
             Contains("bad.yaml:2: num_processes: expected an integer, found '2'"));
  CHECK_THAT(refuse("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero3_init_flag: maybe\n"),
             Contains("bad.yaml:3: zero3_init_flag: expected true or false"));
  CHECK_THAT(refuse("distributed_type: NO\nnum_procesess: 2\n"),
             Contains("bad.yaml:2: unknown Accelerate setting 'num_procesess'; did you mean 'num_processes'?"));
  CHECK_THAT(refuse("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stag: 2\n"),
             Contains("in deepspeed_config; did you mean 'zero_stage'?"));
  CHECK_THAT(refuse("distributed_type: [NO\n"), Contains("bad.yaml:2:1: not valid YAML"));
  CHECK_THAT(refuse("num_processes: 2\n"), Contains("no distributed_type"));
  CHECK_THAT(refuse("- a\n- b\n"), Contains("expected a mapping"));
}

TEST_CASE("launch flags win over the file, key by key") {
  TempDir dir;
  Settings file = read_config_file(dir.write("cfg.yaml", kDeepSpeedYaml).string());
  Settings merged = merge(file, settings_from_flags({{"zero_stage", "2"}, {"zero3_save_16bit_model", "true"}}));
  CHECK(merged.integer("zero_stage") == 2);
  CHECK(merged.find("zero_stage")->where == "--zero_stage");
  CHECK(merged.boolean("zero3_save_16bit_model") == true);
  CHECK(merged.integer("gradient_accumulation_steps") == 2);
  CHECK(merged.mixed_precision_from_file);
  CHECK_FALSE(merge(file, settings_from_flags({{"mixed_precision", "fp16"}})).mixed_precision_from_file);
  CHECK(settings_from_flags({{"use_deepspeed", "true"}}).string("distributed_type") == "DEEPSPEED");
  CHECK_THAT(error_of([] {
               settings_from_flags({{"zero_stage", "three"}});
             }),
             Contains("--zero_stage: expected an integer"));
}

TEST_CASE("Accelerate's default config file is found where Accelerate looks") {
  CHECK(default_config_path({{"HF_HOME", "/h"}, {"HOME", "/u"}}) == "/h/accelerate/default_config.yaml");
  CHECK(default_config_path({{"XDG_CACHE_HOME", "/c"}, {"HOME", "/u"}}) ==
        "/c/huggingface/accelerate/default_config.yaml");
  CHECK(default_config_path({{"HOME", "/u"}}) == "/u/.cache/huggingface/accelerate/default_config.yaml");
}

TEST_CASE("a deepspeed_config_file beside plugin settings in the file is Accelerate's error") {
  TempDir dir;
  dir.write("ds.json", R"({"zero_optimization": {"stage": "auto"}, "gradient_clipping": "auto"})");
  const std::string cfg = dir.write("cfg.yaml",
                                    "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                    "  deepspeed_config_file: " +
                                        (dir.path / "ds.json").string() + "\n  zero_stage: 3\n")
                              .string();
  std::string e = error_of([&] { derive_deepspeed_config(read_config_file(cfg)); });
  CHECK_THAT(e, Contains("Accelerate ignores these config file settings: gradient_accumulation_steps, "
                         "gradient_clipping, zero_stage, offload_optimizer_device, offload_param_device, "
                         "offload_param_nvme_path, offload_optimizer_nvme_path, zero3_save_16bit_model, "
                         "mixed_precision"));
  CHECK_THAT(e, Contains("zero_stage: 3 (" + cfg + ":4)"));
  // The same settings as flags fill the JSON's "auto" values; what it states stays.
  const std::string only_json = dir.write("only.yaml",
                                          "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                          "  deepspeed_config_file: " +
                                              (dir.path / "ds.json").string() + "\n")
                                    .string();
  DerivedConfig d = derive_deepspeed_config(
      merge(read_config_file(only_json), settings_from_flags({{"zero_stage", "1"}, {"gradient_clipping", "0.5"}})));
  CHECK(d.json == R"({"zero_optimization": {"stage": 1}, "gradient_clipping": 0.5, "gradient_accumulation_steps": 1, )"
                  R"("fp16": {"enabled": false}, "bf16": {"enabled": false}})");
}

TEST_CASE("mixed precision and NVMe offload follow Accelerate's rules") {
  auto derive = [](std::map<std::string, std::string> flags) {
    flags["use_deepspeed"] = "true";
    return derive_deepspeed_config(settings_from_flags(flags)).json;
  };
  CHECK_THAT(derive({{"mixed_precision", "fp16"}}),
             Contains(R"("fp16": {"enabled": true, "auto_cast": true}, "bf16": {"enabled": false})"));
  CHECK_THAT(error_of([&] { derive({{"mixed_precision", "fp8"}}); }), Contains("no FP8"));
  CHECK_THAT(error_of([&] {
               derive({{"offload_param_device", "nvme"}, {"zero_stage", "3"}});
             }),
             Contains("offload_param_device is nvme but no offload_param_nvme_path"));
  CHECK_THAT(derive({{"offload_param_device", "nvme"}, {"offload_param_nvme_path", "/nvme"}}),
             Contains(R"("offload_param": {"device": "nvme", "nvme_path": "/nvme"})"));
  CHECK_THAT(error_of([] {
               derive_deepspeed_config(settings_from_flags({{"multi_gpu", "true"}, {"zero_stage", "2"}}));
             }),
             Contains("--zero_stage 2 needs DeepSpeed"));
  CHECK(derive_deepspeed_config(settings_from_flags({{"multi_gpu", "true"}})).json ==
        R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": )"
        R"("auto", "zero_optimization": {"stage": 0}, "fp16": {"enabled": false}, "bf16": {"enabled": false}})");
}

TEST_CASE("Accelerate's launch settings become dscpp's launch flags") {
  TempDir dir;
  LaunchArgs base;
  base.program = {"/x/libgpt.so", "--", "--steps", "3"};
  auto apply = [&](const std::string& yaml, std::map<std::string, std::string> flags = {}, int gpus = 0) {
    LaunchArgs a = base;
    a.accelerate_config_file = dir.write("cfg.yaml", yaml).string();
    a.accelerate_flags = std::move(flags);
    return apply_accelerate(a, {{"HOME", dir.path.string()}}, gpus);
  };
  AccelerateLaunch one = apply(kDeepSpeedYaml, {{"main_process_port", "29611"}});
  CHECK(one.args.num_procs == 2);
  CHECK(one.args.master_port == 29611);
  CHECK(one.args.no_local_rank);
  CHECK(one.world_size == 2);
  REQUIRE(one.args.program.size() == 8);
  CHECK(one.args.program[1] == "--deepspeed_config");
  CHECK(base64url_encode(one.deepspeed_json) == one.args.program[2]);
  CHECK(one.args.program[3] == "--device");  // use_cpu
  CHECK(std::ranges::find(one.args.env, "ACCELERATE_DEEPSPEED_ZERO_STAGE=3") != one.args.env.end());

  const std::string multi =
      "distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 8\n"
      "main_process_ip: 10.0.0.1\nmain_process_port: 29700\ndeepspeed_config:\n"
      "  deepspeed_hostfile: /job/hosts\n  deepspeed_multinode_launcher: ";
  AccelerateLaunch pdsh = apply(multi + "pdsh\n");
  CHECK(pdsh.args.launcher == "ssh");
  CHECK(pdsh.args.hostfile == "/job/hosts");
  CHECK(pdsh.args.num_gpus == 4);
  CHECK(pdsh.args.num_nodes == 2);
  CHECK(pdsh.args.master_addr == "10.0.0.1");
  CHECK(apply(multi + "slurm\n").args.launcher == "slurm");
  CHECK(apply(multi + "openmpi\n").args.launcher == "openmpi");
  CHECK_THAT(error_of([&] { apply(multi + "mvapich\n"); }), Contains("Open MPI's mpirun"));

  AccelerateLaunch standard = apply(multi + "standard\nmachine_rank: 1\n");
  CHECK(standard.args.node_rank == 1);
  CHECK(standard.args.uniform_nodes == 2);
  CHECK(standard.args.num_procs == 4);
  CHECK(standard.args.master_addr == "10.0.0.1");
  CHECK_THAT(error_of([&] { apply(multi + "standard\nmachine_rank: 2\n"); }), Contains("expected 0 to 1"));
  CHECK_THAT(error_of([&] { apply("distributed_type: MULTI_CPU\nnum_machines: 2\nnum_processes: 3\n"); }),
             Contains("give a multiple"));

  // A dscpp flag and an Accelerate setting that disagree.
  LaunchArgs both = base;
  both.num_procs = 3;
  both.accelerate_config_file = dir.write("c.yaml", kDeepSpeedYaml).string();
  CHECK_THAT(error_of([&] { apply_accelerate(both, {}, 0); }), Contains("--num_procs 3 and num_processes: 2"));
  // The program's own config and Accelerate's.
  LaunchArgs own = base;
  own.program = {"/x/libgpt.so", "--deepspeed_config", "ds.json"};
  own.accelerate_flags = {{"use_deepspeed", "true"}};
  CHECK_THAT(error_of([&] {
               apply_accelerate(own, {{"HOME", dir.path.string()}}, 0);
             }),
             Contains("both give a DeepSpeed config"));
}
