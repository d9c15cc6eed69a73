// Accelerate's launch settings as dscpp's launch flags. Where `accelerate launch` would hand
// the job to a launcher (torchrun on one machine, `deepspeed` with pdsh/openmpi/slurm across
// machines, torchrun on each machine for `standard`), the same plan is made with dscpp's
// runners; where Accelerate would not run DeepSpeed (use_cpu), the log says what dscpp does.
#include "launcher/accelerate/launch_mapping.h"

#include "core/error.h"
#include "launcher/accelerate/deepspeed_config.h"
#include "launcher/accelerate/settings.h"
#include "launcher/gpu_sharing.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>

namespace dscpp::launcher::accelerate {
namespace {

// A dscpp flag the user gave and the Accelerate setting that says the same must agree.
template <typename T>
void agree(const char* flag, bool given, const T& flag_value, const Settings& s, std::string_view name,
           const T& value) {
  if (given && flag_value != value) fail("{} {} and {} disagree: give one of them", flag, flag_value, s.describe(name));
}

Settings read_and_merge(const std::string& config_file, const std::map<std::string, std::string>& flags,
                        const Environment& env, std::vector<std::string>& notes) {
  Settings file;
  std::string path = config_file;
  if (path.empty()) {
    const std::string fallback = default_config_path(env);
    if (std::filesystem::exists(fallback)) {
      path = fallback;
      notes.push_back(fmt::format("no --config_file: using Accelerate's default config {}", fallback));
    }
  }
  if (!path.empty()) file = read_config_file(path);
  Settings merged = merge(file, settings_from_flags(flags));
  if (!merged.not_applicable.empty()) {
    std::string list;
    for (const auto& n : merged.not_applicable) list += (list.empty() ? "" : ", ") + n;
    notes.push_back(fmt::format("not used by dscpp (settings of other backends, of Python or of TPUs): {}", list));
  }
  if (auto env_kind = merged.string("compute_environment"); env_kind && *env_kind != "LOCAL_MACHINE")
    fail("{}: dscpp launches on machines it can reach (LOCAL_MACHINE), not through SageMaker",
         merged.describe("compute_environment"));
  const std::string type = merged.string("distributed_type").value_or("NO");
  const std::vector<std::string> known = {"DEEPSPEED", "MULTI_CPU", "MULTI_GPU", "NO"};
  if (std::ranges::find(known, type) == known.end())
    fail("{}: dscpp runs DEEPSPEED (ZeRO), and MULTI_CPU, MULTI_GPU and NO as ZeRO stage 0; {}",
         merged.describe("distributed_type"),
         type == "FSDP" ? "FSDP's full sharding is ZeRO stage 3: distributed_type: DEEPSPEED with zero_stage: 3"
                        : "set one of those");
  return merged;
}

// The ACCELERATE_* variables `accelerate launch` sets for the program (an Accelerate script
// run by dscpp builds the same DeepSpeedPlugin from them), plus the NVMe paths, which
// Accelerate's launcher forgets to pass on.
std::vector<std::string> accelerate_env(const Settings& s, bool deepspeed) {
  std::vector<std::string> env;
  auto set = [&](const char* name, const std::string& value) { env.push_back(fmt::format("{}={}", name, value)); };
  if (auto threads = s.integer("num_cpu_threads_per_process")) set("OMP_NUM_THREADS", std::to_string(*threads));
  set("ACCELERATE_MIXED_PRECISION", s.string("mixed_precision").value_or("no"));
  if (s.boolean("use_cpu").value_or(false)) set("ACCELERATE_USE_CPU", "true");
  if (!deepspeed) return env;
  std::string fields;
  std::vector<std::string> names = s.deepspeed_fields_in_file;
  if (s.mixed_precision_from_file) names.push_back("mixed_precision");
  for (const auto& n : names) fields += (fields.empty() ? "" : ",") + n;
  set("ACCELERATE_CONFIG_DS_FIELDS", fields);
  set("ACCELERATE_USE_DEEPSPEED", "true");
  const std::pair<const char*, const char*> vars[] = {
      {"zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE"},
      {"gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
      {"gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING"},
      {"offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"},
      {"offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"},
      {"offload_optimizer_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"},
      {"offload_param_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"},
      {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT"},
      {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"},
      {"deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE"}};
  for (const auto& [name, var] : vars)
    if (const Value* v = s.find(name))
      set(var, v->type == Value::Type::boolean ? (v->boolean ? "true" : "false") : v->text);
  return env;
}

// The program's arguments with the DeepSpeed config handed to dscpp-runtime.
std::vector<std::string> with_config(const std::vector<std::string>& program, const std::string& json, bool cpu,
                                     std::optional<long long> threads) {
  const auto end = std::ranges::find(program, "--");
  for (auto it = program.begin() + 1; it != end; ++it)
    if (*it == "--deepspeed_config" || it->starts_with("--deepspeed_config="))
      fail(
          "the program's {} and the Accelerate settings both give a DeepSpeed config: name the JSON as "
          "deepspeed_config_file (or --deepspeed_config_file) instead, and Accelerate's settings fill its \"auto\" "
          "values",
          *it);
  std::vector<std::string> out = {program.front(), "--deepspeed_config", base64url_encode(json)};
  if (cpu) out.insert(out.end(), {"--device", "cpu"});
  if (threads) out.insert(out.end(), {"--threads", std::to_string(*threads)});
  out.insert(out.end(), program.begin() + 1, program.end());
  return out;
}

// Launch flags for one machine, or for the machines of a multi-machine job.
void map_resources(const Settings& s, LaunchArgs& a, int local_gpus, std::vector<std::string>& notes) {
  a.no_local_rank = true;  // torchrun and `deepspeed --no_local_rank`: Accelerate's programs read LOCAL_RANK
  const bool use_cpu = s.boolean("use_cpu").value_or(false);
  const bool gpus = local_gpus > 0 && !use_cpu;
  if (auto threads = s.integer("num_cpu_threads_per_process"); threads && *threads < 1)
    fail("{}: expected 1 or more", s.describe("num_cpu_threads_per_process"));
  const std::string type = s.string("distributed_type").value_or("NO");
  const long long machines = s.integer("num_machines").value_or(1);
  std::optional<long long> processes = s.integer("num_processes");
  if (!processes && type == "NO") processes = 1;
  if (processes && *processes < 1) fail("{}: expected 1 or more", s.describe("num_processes"));
  if (machines < 1) fail("{}: expected 1 or more", s.describe("num_machines"));
  if (processes && *processes % machines != 0)
    fail("{} over {}: Accelerate starts num_processes / num_machines ranks on each machine; give a multiple",
         s.describe("num_processes"), s.describe("num_machines"));
  const std::optional<int> per_machine =
      processes ? std::optional<int>(static_cast<int>(*processes / machines)) : std::nullopt;
  // 0 on one machine: any free port, which is what an unchosen port already gets there (the
  // local runner moves off a taken one, as Accelerate does); across machines a port must be named.
  if (auto port = s.integer("main_process_port"); port && !(*port == 0 && machines == 1)) {
    const int p = static_cast<int>(*port);
    if (p < 1 || p > 65535)
      fail("{}: expected a port 1-65535 (or 0 on one machine: any free one)", s.describe("main_process_port"));
    agree("--master_port", a.master_port_given, a.master_port, s, "main_process_port", p);
    a.master_port = p;
    if (machines > 1) a.master_port_given = true;
  }
  if (auto cpu_affinity = s.boolean("enable_cpu_affinity"); cpu_affinity && *cpu_affinity) a.bind_cores_to_rank = true;
  if (auto backend = s.string("rdzv_backend"); backend && *backend != "static")
    notes.push_back(fmt::format("{}: dscpp's ranks meet at rank 0's own store (static), whatever the backend",
                                s.describe("rdzv_backend")));
  if (use_cpu && type == "DEEPSPEED")
    notes.push_back(
        fmt::format("{}: Accelerate would launch without DeepSpeed (its CPU launcher); dscpp runs the "
                    "DeepSpeed config below on CPU ranks",
                    s.describe("use_cpu")));
  if (machines == 1) {
    if (per_machine) {
      if (gpus) {
        agree("--num_gpus", a.num_gpus >= 0, a.num_gpus, s, "num_processes", *per_machine);
        a.num_gpus = *per_machine;
      } else if (!a.hostfile_given) {
        agree("--num_procs", a.num_procs >= 0, a.num_procs, s, "num_processes", *per_machine);
        a.num_procs = *per_machine;
      }
    }
    if (auto ids = s.string("gpu_ids"); ids && *ids != "all") {
      if (gpus) {
        agree<std::string>("--include", !a.include.empty(), a.include, s, "gpu_ids", "localhost:" + *ids);
        a.include = "localhost:" + *ids;
      } else {
        notes.push_back(fmt::format("{}: this machine's ranks run on its CPUs", s.describe("gpu_ids")));
      }
    }
    return;
  }
  // Across machines: DeepSpeed's launcher (pdsh, openmpi, slurm), or each machine on its own.
  const std::string launcher = s.string("deepspeed_multinode_launcher").value_or("pdsh");
  if (auto ip = s.string("main_process_ip")) {
    agree("--master_addr", !a.master_addr.empty(), a.master_addr, s, "main_process_ip", *ip);
    a.master_addr = *ip;
  }
  if (launcher == "standard" || launcher == "nossh") {
    if (a.master_addr.empty())
      fail("{} with {}: every machine must know rank 0's address; set main_process_ip",
           s.describe("deepspeed_multinode_launcher"), s.describe("num_machines"));
    a.node_rank = static_cast<int>(s.integer("machine_rank").value_or(0));
    a.no_ssh = true;
    if (a.node_rank < 0 || a.node_rank >= machines)
      fail("{}: expected 0 to {}", s.describe("machine_rank"), machines - 1);
    if (auto hostfile = s.string("deepspeed_hostfile"); hostfile && launcher == "nossh") {
      a.hostfile = *hostfile;
      a.hostfile_given = true;
      a.num_nodes = static_cast<int>(machines);
    } else {
      if (!per_machine) fail("{} needs num_processes (ranks over all machines)", s.describe("num_machines"));
      a.uniform_nodes = static_cast<int>(machines);
      (gpus ? a.num_gpus : a.num_procs) = *per_machine;
    }
    notes.push_back(
        fmt::format("{}: this machine starts node {} of {} itself, as torchrun would; run the same "
                    "command with each machine_rank",
                    s.describe("deepspeed_multinode_launcher"), a.node_rank, machines));
    return;
  }
  if (launcher == "mvapich" || launcher == "mpich")
    fail("{}: dscpp starts MPI jobs with Open MPI's mpirun (openmpi), over ssh (pdsh) or with srun (slurm)",
         s.describe("deepspeed_multinode_launcher"));
  const std::vector<std::string> runners = {"pdsh", "openmpi", "slurm"};
  if (std::ranges::find(runners, launcher) == runners.end())
    fail("{}: expected pdsh, standard, openmpi, mvapich, mpich, nossh or slurm",
         s.describe("deepspeed_multinode_launcher"));
  const std::string runner = launcher == "pdsh" ? "ssh" : launcher;
  agree<std::string>("--launcher", !a.launcher.empty(), a.launcher, s, "deepspeed_multinode_launcher", runner);
  a.launcher = runner;
  if (auto hostfile = s.string("deepspeed_hostfile")) {
    agree<std::string>("--hostfile", a.hostfile_given, a.hostfile, s, "deepspeed_hostfile", *hostfile);
    a.hostfile = *hostfile;
    a.hostfile_given = true;
  }
  if (auto exclude = s.string("deepspeed_exclusion_filter")) {
    a.exclude = *exclude;  // Accelerate passes the exclusion filter alone when both are set
  } else if (auto include = s.string("deepspeed_inclusion_filter")) {
    a.include = *include;
  } else if (per_machine) {
    agree("--num_gpus", a.num_gpus >= 0, a.num_gpus, s, "num_processes", *per_machine);
    a.num_gpus = *per_machine;
  }
  agree("--num_nodes", a.num_nodes >= 0, a.num_nodes, s, "num_machines", static_cast<int>(machines));
  a.num_nodes = static_cast<int>(machines);
}

}  // namespace

bool uses_accelerate(const LaunchArgs& args) {
  return !args.accelerate_config_file.empty() || !args.accelerate_flags.empty();
}

AccelerateLaunch derive_for_check(const std::string& config_file, const std::map<std::string, std::string>& flags,
                                  const Environment& env) {
  AccelerateLaunch out;
  Settings s = read_and_merge(config_file, flags, env, out.notes);
  DerivedConfig d = derive_deepspeed_config(s);
  out.deepspeed_json = d.json;
  out.config_source = d.source;
  return out;
}

AccelerateLaunch apply_accelerate(const LaunchArgs& args, const Environment& env, int local_gpus) {
  AccelerateLaunch out;
  out.args = args;
  Settings s = read_and_merge(args.accelerate_config_file, args.accelerate_flags, env, out.notes);
  DerivedConfig d = derive_deepspeed_config(s);
  out.deepspeed_json = d.json;
  out.config_source = d.source;
  map_resources(s, out.args, local_gpus, out.notes);
  if (auto n = s.integer("num_processes")) out.world_size = static_cast<int>(*n);
  const bool deepspeed = s.string("distributed_type").value_or("NO") == "DEEPSPEED";
  for (std::string& kv : accelerate_env(s, deepspeed)) out.args.env.push_back(std::move(kv));
  if (runs_dscpp_runtime(args.program))
    out.args.program = with_config(args.program, d.json, s.boolean("use_cpu").value_or(false),
                                   s.integer("num_cpu_threads_per_process"));
  return out;
}

}  // namespace dscpp::launcher::accelerate
