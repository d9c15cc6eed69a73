// run_launch: from flags to running ranks, the same steps whatever the runner (resources, plan,
// runner, master address, plan printout, dry run or pre-flight, attempts); what differs per
// runner is behind launcher/runners/runner.h. Also the rank-shim that mpirun/srun start.
#include "launcher/launch.h"

#include "build_config.h"
#include "core/error.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "core/rank_discovery.h"
#include "launcher/accelerate/launch_mapping.h"
#include "launcher/env_export.h"
#include "launcher/gpu_sharing.h"
#include "launcher/hostfile.h"
#include "launcher/job_commands.h"
#include "launcher/resources.h"
#include "launcher/restart.h"
#include "launcher/runners/runner.h"
#include "launcher/slurm_env.h"
#include "launcher/supervisor/supervisor.h"

#include <fmt/core.h>
#include <glob.h>
#include <unistd.h>

#include <filesystem>

extern char** environ;

namespace dscpp::launcher {
namespace {

namespace fs = std::filesystem;

// CUDA devices this machine shows, without linking CUDA into the launcher: the driver's
// device nodes (the runtime sees the same ones).
int local_gpu_count() {
  glob_t g{};
  int n = 0;
  if (glob("/dev/nvidia[0-9]*", 0, nullptr, &g) == 0) n = static_cast<int>(g.gl_pathc);
  globfree(&g);
  return n;
}

struct Resolved {
  WorldPlan plan;
  std::string pool_source;  // "hostfile /path", "SLURM allocation (...)", "this machine (...)"
  bool from_slurm = false;
  bool from_hostfile = false;
};

Resolved resolve_resources(const LaunchArgs& args, const Environment& env) {
  Resolved r;
  ResourcePool pool;
  bool slots_are_limits = true;
  std::optional<ResourcePool> from_file =
      args.hostfile_given ? std::optional(load_hostfile(args.hostfile)) : load_hostfile_if_present(args.hostfile);
  if (args.uniform_nodes > 0) {
    // Machines named by their place: this one runs node args.node_rank, the others run theirs.
    const bool gpus = args.num_gpus > 0;
    for (int n = 0; n < args.uniform_nodes; ++n) {
      HostSlots h{"machine" + std::to_string(n), {}};
      for (int i = 0; i < (gpus ? args.num_gpus : args.num_procs); ++i) h.slots.push_back(i);
      pool.push_back(h);
    }
    r.plan.devices_are_gpus = gpus;
    r.plan.hosts = pool;
    r.pool_source = fmt::format("{} machines started one by one", args.uniform_nodes);
    return r;
  }
  if (from_file) {
    pool = *from_file;
    r.from_hostfile = true;
    r.pool_source = "hostfile " + args.hostfile;
    if (args.num_procs > 0) fail("--num_procs sizes this machine's ranks; with a hostfile use slots= or --num_gpus");
  } else if (auto alloc = slurm_allocation(env)) {
    pool = alloc->pool;
    r.from_slurm = true;
    r.plan.devices_are_gpus = alloc->devices_are_gpus;
    r.pool_source = fmt::format("SLURM allocation ({}, {})", alloc->nodes_from, alloc->slots_from);
  } else {
    int gpus = local_gpu_count();
    auto cvd = env.find("CUDA_VISIBLE_DEVICES");
    if (gpus > 0 && args.num_procs <= 0) {
      pool = local_device_pool(cvd == env.end() ? std::string_view() : std::string_view(cvd->second), gpus);
      r.plan.devices_are_gpus = true;
      r.pool_source = fmt::format("this machine ({} GPUs)", gpus);
    } else {
      int n = args.num_procs > 0 ? args.num_procs : 1;
      HostSlots h{"localhost", {}};
      for (int i = 0; i < n; ++i) h.slots.push_back(i);
      pool = {h};
      slots_are_limits = false;
      r.pool_source = fmt::format("this machine ({} CPU rank{})", n, n == 1 ? "" : "s");
    }
  }
  ResourceSelection sel;
  sel.include = args.include;
  sel.exclude = args.exclude;
  sel.num_nodes = args.num_nodes;
  sel.num_gpus = args.num_gpus;
  sel.pool_source = r.pool_source;
  sel.slots_are_limits = slots_are_limits;
  r.plan.hosts = select_resources(pool, sel);
  if (r.plan.world_size() == 0)
    fail("no ranks to start: {} {}", r.pool_source,
         args.include.empty() && args.exclude.empty() ? "has no slots (every host has slots=0)"
                                                      : "leaves no slots after --include/--exclude");
  return r;
}

// --launcher, else SLURM's runner inside an allocation, the local runner for this machine
// alone, and ssh for anything else.
std::unique_ptr<Runner> pick_runner(const LaunchArgs& args, const Resolved& r) {
  if (args.node_rank >= 0) return make_runner("local", args);  // this machine's node only
  if (!args.launcher.empty()) return make_runner(args.launcher, args);
  if (r.from_slurm) return make_runner("slurm", args);
  bool single_local = r.plan.hosts.size() == 1 && is_local_host(r.plan.hosts[0].host);
  return make_runner(single_local && !args.force_multi ? "local" : "ssh", args);
}

// Rank 0's address as every host can reach it: given, or loopback when every host is this
// machine, or what the runner finds out about the first host.
std::string choose_master_addr(const LaunchArgs& args, const WorldPlan& plan, const Runner& runner) {
  if (!args.master_addr.empty()) return args.master_addr;
  bool all_local = true;
  for (const auto& h : plan.hosts) all_local = all_local && is_local_host(h.host);
  if (all_local) return "127.0.0.1";
  return runner.master_addr(plan);
}

// The ranks placed on this machine without a GPU each (not devices_are_gpus) see all of its
// GPUs: whether they share them, and whether NCCL would refuse that (gpu_sharing.h). Other
// hosts' GPUs are not known here.
GpuSharing local_gpu_sharing(const LaunchArgs& args, const WorldPlan& plan, const EnvList& exported,
                             const Environment& env) {
  if (plan.devices_are_gpus || !runs_dscpp_runtime(args.program)) return {};
  std::optional<std::string> env_backend;
  if (auto it = env.find("DSCPP_COMM_BACKEND"); it != env.end()) env_backend = it->second;
  for (const auto& [k, v] : exported)  // --env and the env files override what ranks inherit
    if (k == "DSCPP_COMM_BACKEND") env_backend = v;
  RuntimeChoices choices = runtime_choices(args.program, env_backend);
  if (!DSCPP_HAVE_CUDA && choices.device == "auto") choices.device = "cpu";  // this build's runtime has no cuda
  for (int n = 0; n < plan.node_count(); ++n)
    if (is_local_host(plan.hosts[n].host))
      return check_gpu_sharing(plan.hosts[n].host, static_cast<int>(plan.ranks_on(n).size()), local_gpu_count(),
                               choices);
  return {};
}

void print_plan(const std::string& pool_source, const WorldPlan& plan, std::string_view runner, const EnvList& exported,
                const std::string& gpu_line) {
  std::string out =
      fmt::format("dscpp plan: {} rank{} on {} host{} from {}; runner {}; master {}:{}\n", plan.world_size(),
                  plan.world_size() == 1 ? "" : "s", plan.node_count(), plan.node_count() == 1 ? "" : "s", pool_source,
                  runner, plan.master_addr, plan.master_port);
  // "slots 0" read as "no slots": the row says how many ranks, which, and on what. GPU slots are
  // device ids; other slots only number a host's ranks.
  for (int n = 0; n < plan.node_count(); ++n) {
    auto ranks = plan.ranks_on(n);
    const size_t count = ranks.size();
    std::string which = count == 1 ? std::to_string(ranks.front().rank)
                                   : fmt::format("{}-{}", ranks.front().rank, ranks.back().rank);
    std::string noun = plan.devices_are_gpus ? "GPU" : "slot";
    out += fmt::format("  {:<20} {:<16} on {}{} {}\n", plan.hosts[n].host,
                       fmt::format("{} rank{} ({})", count, count == 1 ? " " : "s", which), noun,
                       plan.hosts[n].slots.size() == 1 ? "" : "s", format_id_ranges(plan.hosts[n].slots));
  }
  if (!gpu_line.empty()) out += gpu_line + "\n";
  if (!exported.empty()) {
    out += "  forwarded environment:";
    for (const auto& [k, v] : exported) out += " " + k;
    out += "\n";
  }
  std::fputs(out.c_str(), stderr);
}

// --dry_run: attempt 0's commands and rank 0's environment, exactly as they would run (the job's
// secret named, never shown).
std::string dry_run_text(const Runner& runner, const Job& job, const std::string& secret_source) {
  AttemptCommands c = runner.commands(job, 0);
  std::string out = runner.describe(job, c);
  const RankInfo first = job.plan.ranks_on(std::max(job.args.node_rank, 0)).front();  // this machine's first
  out += fmt::format("environment of each rank (rank {} shown; RANK/LOCAL_RANK/CROSS_RANK differ per rank):\n",
                     first.rank);
  for (const auto& [k, v] : rank_env(job.plan, first, EnvOptions{c.agent.env, false, 0}))
    out += "  " + k + "=" + shell_quote(v) + "\n";
  out += fmt::format("  {}=(not shown: {})\n", kJobSecretVar, secret_source);
  return out;
}

// The job's secret and where it came from: the one dscpp was given (every machine of a
// --node_rank job must share it), else a fresh one for this launch.
std::pair<std::string, std::string> launch_secret(const LaunchArgs& args, const WorldPlan& plan) {
  if (auto given = job_secret_from_env()) return {given->value, "from " + given->source};
  // A dry run starts nothing: it says what the real launch will need instead of refusing.
  if (args.node_rank >= 0 && plan.node_count() > 1 && args.dry_run)
    return {"", fmt::format("none yet: every machine of this --node_rank job must be given the same {} or {}",
                            kJobSecretVar, kJobSecretFileVar)};
  if (args.node_rank >= 0 && plan.node_count() > 1)
    fail(
        "--node_rank: each machine starts its own ranks, so they must share the job's secret: set {} (or {}, a "
        "file of mode 600) to the same value on every machine, e.g. from `openssl rand -hex 32`",
        kJobSecretVar, kJobSecretFileVar);
  return {make_job_secret(), "made for this launch"};
}

}  // namespace

int run_rank_shim(const std::vector<std::string>& program, int local_rank_at, bool stop_on_stdin, bool stop_on_usr1) {
  auto id = discover_rank();
  if (!id) fail("rank-shim: no rank variables (OMPI_COMM_WORLD_*, SLURM_PROCID, PMI_RANK) in the environment");
  // A plan shaped like the job (uniform nodes) lets rank_env name everything as the other
  // runners do; MASTER_ADDR/PORT and the forwarded variables arrive in the environment.
  // Blocks of local_size, the last one short when the job does not divide evenly, so that
  // WORLD_SIZE stays the job's.
  WorldPlan plan;
  for (int n = 0, placed = 0; n < id->node_count && placed < id->world_size; ++n) {
    HostSlots h{"node" + std::to_string(n), {}};
    for (int s = 0; s < id->local_size && placed < id->world_size; ++s, ++placed) h.slots.push_back(s);
    plan.hosts.push_back(h);
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr) plan.master_addr = addr;
  if (port) plan.master_port = std::atoi(port);
  RankInfo info{id->rank, id->local_rank, id->node_rank, id->local_rank, ""};
  // Named as the batch system names the node (what squeue and sacct show), else by hostname.
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  const char* slurm_node = std::getenv("SLURMD_NODENAME");
  const std::string host = slurm_node && *slurm_node ? slurm_node : hostname;
  RankLaunch rank;
  rank.rank = id->rank;
  rank.label = id->node_count > 1 ? fmt::format("[rank {} {}]", id->rank, host) : fmt::format("[rank {}]", id->rank);
  rank.env = rank_env(plan, info, {});
  ProgramSpec spec{program, local_rank_at, ""};
  rank.argv = rank_argv(spec, id->local_rank);
  SupervisorOptions options;
  options.host = host;
  options.report_exits = true;
  options.usr1_stops = stop_on_usr1;
  if (stop_on_stdin) {
    options.stop_fd = 0;
    options.stop_fd_name = "stdin (dscpp's stop request)";
  }
  return run_rank_group({rank}, options).exit_code;
}

int run_launch(const LaunchArgs& given) {
  log::init_logging(-1);
  Environment env = environment_from(::environ);
  if (given.no_ssh != (given.node_rank >= 0))
    fail("--no_ssh and --node_rank go together: this machine starts node N's ranks of the plan itself");
  LaunchArgs args = given;
  std::optional<accelerate::AccelerateLaunch> acc;
  if (accelerate::uses_accelerate(given)) {
    acc = accelerate::apply_accelerate(given, env, local_gpu_count());
    for (const auto& note : acc->notes) std::fprintf(stderr, "dscpp: accelerate: %s\n", note.c_str());
    args = acc->args;
  }
  if (args.node_rank >= 0 && !args.launcher.empty() && args.launcher != "local")
    fail("--node_rank starts this machine's ranks itself (DeepSpeed's --no_ssh); it takes no --launcher {}",
         args.launcher);
  if (auto why = launched_task_reason(env))
    fail(
        "refusing to start ranks from inside a launched job: {}. Starting dscpp once per task would multiply the "
        "ranks; run dscpp once (e.g. in the sbatch script, not under srun/mpirun), or run PROGRAM directly",
        *why);
  Resolved r = resolve_resources(args, env);
  const std::unique_ptr<Runner> runner = pick_runner(args, r);
  Job job{.args = args, .plan = r.plan, .from_hostfile = r.from_hostfile};
  job.dscpp = invoked_executable();
  job.program = resolve_program(args.program, args.no_local_rank, job.dscpp);
  job.plan.master_port = runner->first_port(args.master_port, args.master_port_given || args.node_rank >= 0);
  job.plan.master_addr = choose_master_addr(args, job.plan, *runner);
  std::error_code ec;
  job.cwd = fs::current_path(ec).string();
  // Ranks that inherit dscpp's environment need only the env files and --env on top of it.
  job.exported =
      build_exported_env(ExportInputs{runner->inherits_environment() ? Environment{} : env, job.cwd, args.env});

  if (args.max_restarts < 0) fail("--max_restarts {}: expected 0 or more", args.max_restarts);
  if (args.node_rank >= job.plan.node_count())
    fail("--node_rank {}: the plan has {} node{} ({})", args.node_rank, job.plan.node_count(),
         job.plan.node_count() == 1 ? "" : "s", r.pool_source);
  if (args.node_rank >= 0 && args.max_restarts > 0)
    fail("--max_restarts restarts the whole job from one launcher; with --node_rank each machine starts its own ranks");
  if (args.node_rank >= 0 && job.plan.node_count() > 1 && args.master_addr.empty())
    fail("--node_rank: every machine must be told rank 0's address; pass --master_addr");
  if (acc && acc->world_size && *acc->world_size != job.plan.world_size())
    fail("num_processes {} (Accelerate: ranks over all machines) but the plan has {} ranks from {}", *acc->world_size,
         job.plan.world_size(), r.pool_source);

  auto [secret, secret_source] = launch_secret(args, job.plan);
  job.secret = std::move(secret);
  const GpuSharing sharing = local_gpu_sharing(args, job.plan, job.exported, env);
  print_plan(r.pool_source, job.plan, runner->name(), runner->inherits_environment() ? EnvList{} : job.exported,
             sharing.plan_line);
  // NCCL itself would refuse only after every rank started and loaded its model.
  if (!sharing.refusal.empty()) fail("{}", sharing.refusal);
  if (acc)
    std::fprintf(args.dry_run ? stdout : stderr, "effective deepspeed config: %s\n", acc->deepspeed_json.c_str());
  if (args.dry_run) {
    std::fputs(dry_run_text(*runner, job, secret_source).c_str(), stdout);
    return 0;
  }

  if (args.save_pid) {
    std::string path = fmt::format("/tmp/{}.deepspeed", getpid());
    if (FILE* f = std::fopen(path.c_str(), "w")) std::fprintf(f, "%d\n", getpid()), std::fclose(f);
  }
  runner->preflight(job);
  return run_with_restarts(args.max_restarts, [&](int restart) {
    if (restart > 0) job.plan.master_port = runner->port_for_restart(job.plan);
    return runner->attempt(job, restart);
  });
}

}  // namespace dscpp::launcher
