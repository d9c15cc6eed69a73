// Ranks sharing a GPU (launcher/gpu_sharing.h): what the plan says and when the launcher
// refuses, for any GPU count (the test machine has none).
#include "launcher/gpu_sharing.h"

#include <catch2/catch.hpp>

using namespace dscpp::launcher;

namespace {

RuntimeChoices from_args(std::vector<std::string> args, std::optional<std::string> env_backend = std::nullopt) {
  args.insert(args.begin(), "model.so");
  return runtime_choices(args, env_backend);
}

}  // namespace

TEST_CASE("runtime_choices: --device and --comm_backend from the program's arguments", "[launcher][gpu_sharing]") {
  RuntimeChoices none = from_args({"--deepspeed_config", "ds.json"});
  CHECK(none.device == "auto");
  CHECK(none.comm_backend == "auto");
  CHECK(none.backend_source.empty());

  RuntimeChoices both = from_args({"--device", "cpu", "--comm_backend=gloo"});
  CHECK(both.device == "cpu");
  CHECK(both.comm_backend == "gloo");
  CHECK(both.backend_source == "--comm_backend gloo");
  CHECK(from_args({"--device=cuda-sim"}).device == "cuda-sim");

  // The flag wins over the environment, as in dscpp-runtime; the environment over the default.
  CHECK(from_args({"--comm_backend", "shm"}, "nccl").comm_backend == "shm");
  RuntimeChoices env = from_args({}, "gloo");
  CHECK(env.comm_backend == "gloo");
  CHECK(env.backend_source == "DSCPP_COMM_BACKEND=gloo");
  CHECK(from_args({}, "").comm_backend == "auto");

  // After `--` the arguments are the plugin's.
  RuntimeChoices plugin = from_args({"--steps", "3", "--", "--device", "cpu", "--comm_backend", "gloo"});
  CHECK(plugin.device == "auto");
  CHECK(plugin.comm_backend == "auto");

  CHECK(runs_dscpp_runtime({"build/examples/gpt/libgpt.so", "--steps", "1"}));
  CHECK(runs_dscpp_runtime({"/opt/dscpp/bin/dscpp-runtime", "--model", "m.so"}));
  CHECK_FALSE(runs_dscpp_runtime({"hostname"}));
  CHECK_FALSE(runs_dscpp_runtime({"train.py", "--device", "cuda"}));
  CHECK_FALSE(runs_dscpp_runtime({}));
}

TEST_CASE("check_gpu_sharing: one GPU, two ranks", "[launcher][gpu_sharing]") {
  const std::string line = "  GPUs: 2 ranks share 1 GPU on localhost (more ranks than GPUs)";

  GpuSharing by_default = check_gpu_sharing("localhost", 2, 1, from_args({}));
  CHECK(by_default.plan_line == line);
  CHECK(by_default.refusal ==
        "2 ranks on localhost would share its 1 GPU, but the default backend (no --comm_backend: auto picks nccl "
        "for ranks on GPUs) needs one GPU per rank (NCCL refuses two ranks on one device); start at most 1 rank "
        "there (--num_procs 1 / --num_gpus 1), or pass --comm_backend shm or --comm_backend gloo to the program "
        "to let ranks share the GPU (or --device cpu to train on the CPU)");

  GpuSharing nccl = check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend", "nccl"}));
  CHECK(nccl.plan_line == line);
  CHECK_THAT(nccl.refusal, Catch::Contains("but the nccl backend (--comm_backend nccl) needs one GPU per rank") &&
                               Catch::Contains("--num_procs 1 / --num_gpus 1") &&
                               Catch::Contains("pass --comm_backend shm or --comm_backend gloo"));
  CHECK_THAT(check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend=auto"})).refusal,
             Catch::Contains("the auto backend (--comm_backend auto: nccl for ranks on GPUs)"));
  CHECK_THAT(check_gpu_sharing("localhost", 2, 1, from_args({}, "nccl")).refusal,
             Catch::Contains("the nccl backend (DSCPP_COMM_BACKEND=nccl)"));
  CHECK(check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend", "hierarchical"})).refusal.empty());
  CHECK_FALSE(check_gpu_sharing("localhost", 2, 1, from_args({"--device", "cuda"})).refusal.empty());

  // The host-memory engines let the ranks share; the plan still says they do.
  for (const char* backend : {"shm", "gloo", "mpi", "hierarchical"}) {
    INFO(backend);
    GpuSharing shared = check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend", backend}));
    CHECK(shared.plan_line == line);
    CHECK(shared.refusal.empty());
  }
  GpuSharing eq = check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend=gloo"}));
  CHECK(eq.plan_line == line);
  CHECK(eq.refusal.empty());
  CHECK(check_gpu_sharing("localhost", 2, 1, from_args({}, "shm")).refusal.empty());
  // A misspelt backend is dscpp-runtime's to report (it lists the names).
  CHECK(check_gpu_sharing("localhost", 2, 1, from_args({"--comm_backend", "glo"})).refusal.empty());
}

TEST_CASE("check_gpu_sharing: a GPU per rank, CPU ranks, no GPU", "[launcher][gpu_sharing]") {
  GpuSharing own = check_gpu_sharing("localhost", 2, 2, from_args({}));
  CHECK(own.plan_line.empty());
  CHECK(own.refusal.empty());
  CHECK(check_gpu_sharing("localhost", 1, 8, from_args({"--comm_backend", "nccl"})).plan_line.empty());

  // Ranks that do not train on the GPU neither share it nor meet NCCL.
  for (const char* device : {"cpu", "cuda-sim"}) {
    INFO(device);
    GpuSharing off = check_gpu_sharing("localhost", 4, 1, from_args({"--device", device}));
    CHECK(off.plan_line.empty());
    CHECK(off.refusal.empty());
    CHECK(check_gpu_sharing("localhost", 4, 1, from_args({std::string("--device=") + device})).plan_line.empty());
  }
  CHECK(check_gpu_sharing("localhost", 4, 0, from_args({})).plan_line.empty());

  GpuSharing three = check_gpu_sharing("node7", 3, 2, from_args({"--comm_backend", "nccl"}));
  CHECK(three.plan_line == "  GPUs: 3 ranks share 2 GPUs on node7 (more ranks than GPUs)");
  CHECK_THAT(three.refusal, Catch::StartsWith("3 ranks on node7 would share its 2 GPUs, but the nccl backend") &&
                                Catch::Contains("start at most 2 ranks there (--num_procs 2 / --num_gpus 2)") &&
                                Catch::Contains("to let ranks share the GPUs"));
}
