#include "launcher/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <glob.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

extern char** environ;

#include <fmt/core.h>
#include <filesystem>
#include <sstream>

#include "build_config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rank_discovery.h"
#include "launcher/env_export.h"
#include "launcher/gpu_sharing.h"
#include "launcher/hostfile.h"
#include "launcher/job_commands.h"
#include "launcher/node_agent.h"
#include "launcher/resources.h"
#include "launcher/restart.h"
#include "launcher/slurm_env.h"
#include "launcher/ssh.h"
#include "launcher/supervisor.h"

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

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == name;
}

// The first IPv4 address `host` resolves to here, or "" when it does not resolve.
std::string resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text, sizeof text);
  freeaddrinfo(res);
  return text;
}

// Whether something on this machine already listens on `port` (what rank 0's store needs).
bool local_port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

namespace {

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
  if (r.plan.world_size() == 0) fail("no ranks to start: {} leaves no slots after --include/--exclude", r.pool_source);
  return r;
}

std::string choose_runner(const LaunchArgs& args, const Resolved& r) {
  if (!args.launcher.empty()) {
    static const char* known[] = {"local", "ssh", "openmpi", "slurm", "pdsh"};
    for (const char* k : known)
      if (args.launcher == k) return args.launcher == "pdsh" ? "ssh" : args.launcher;
    fail("--launcher {}: expected local, ssh, openmpi or slurm (pdsh's role is dscpp's ssh runner)", args.launcher);
  }
  if (r.from_slurm) return "slurm";
  bool single_local = r.plan.hosts.size() == 1 && is_local_host(r.plan.hosts[0].host);
  if (single_local && !args.force_multi) return "local";
  return "ssh";
}

// Rank 0's address as every host can reach it: given, or loopback for one local host, or
// the first host's address as this machine resolves it, or as that host reports it.
std::string choose_master_addr(const LaunchArgs& args, const WorldPlan& plan, const std::string& runner,
                               const SshOptions& ssh) {
  if (!args.master_addr.empty()) return args.master_addr;
  const std::string& first = plan.hosts.front().host;
  bool all_local = true;
  for (const auto& h : plan.hosts) all_local = all_local && is_local_host(h.host);
  if (runner == "local" || all_local) return "127.0.0.1";
  if (runner == "slurm") {
    // SLURM knows the node's address even when its name does not resolve here.
    std::string out = first_line_of("scontrol show node " + shell_quote(first) + " -o 2>/dev/null");
    size_t at = out.find("NodeAddr=");
    if (at != std::string::npos) {
      std::string ip = resolve_ipv4(out.substr(at + 9, out.find(' ', at + 9) - at - 9));
      if (!ip.empty()) {
        log::info("master address {} (SLURM's NodeAddr of {})", ip, first);
        return ip;
      }
    }
  }
  std::string addr = resolve_ipv4(first);
  if (!addr.empty() && addr.rfind("127.", 0) != 0) {
    log::info("master address {} (how this host resolves {}); pass --master_addr to choose another", addr, first);
    return addr;
  }
  if (runner == "ssh") {
    std::string out = ssh_capture(first, "hostname -I", ssh);
    std::string token = out.substr(0, out.find_first_of(" \t\n"));
    if (!token.empty()) {
      log::info("master address {} (first address `hostname -I` reports on {}); pass --master_addr to choose another",
                token, first);
      return token;
    }
  }
  fail("cannot work out the address of {} (rank 0's host); pass --master_addr with an address every host can reach",
       first);
}

std::string sha256_of(const std::string& path) {
  std::string out = first_line_of("sha256sum " + shell_quote(path) + " 2>/dev/null");
  return out.substr(0, out.find(' '));
}

// Before any rank starts: every host answers, runs the same dscpp build and sees the same
// program file, and rank 0's port is free. Each failure names the host and what to do.
void preflight_ssh(const WorldPlan& plan, const std::string& dscpp, const ProgramSpec& program, const SshOptions& ssh) {
  // Files every host must have identical: dscpp itself (it runs the agent), the runtime a
  // plugin runs under, and the program file.
  std::vector<std::string> files = {dscpp};
  const std::string& exe = program.argv.front();
  if (exe.front() == '/' && exe != program.file) files.push_back(exe);
  if (!program.file.empty()) files.push_back(program.file);
  std::vector<std::string> hashes;
  std::string cmd = "sha256sum";
  for (const auto& f : files) hashes.push_back(sha256_of(f)), cmd += " " + shell_quote(f);
  // Rank 0's host also reports whether the master port is taken.
  std::vector<RemoteCommand> checks;
  for (const auto& h : plan.hosts) {
    std::string c = cmd;
    if (&h == &plan.hosts.front())
      c += fmt::format("; echo PORT; ss -Htln 'sport = :{}' 2>/dev/null | head -1", plan.master_port);
    checks.push_back({h.host, c, {}, false});
  }
  std::vector<RemoteCapture> results = ssh_capture_all(checks, ssh);
  std::string problems;
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string& host = plan.hosts[i].host;
    const RemoteCapture& r = results[i];
    if (std::string why = r.failure(cmd); !why.empty()) {
      problems += fmt::format("\n  {}: {}", host, why);
      continue;
    }
    std::istringstream lines(r.out);
    for (size_t f = 0; f < files.size(); ++f) {
      std::string line;
      std::getline(lines, line);
      if (line.substr(0, 64) != hashes[f])
        problems += fmt::format(
            "\n  {}: {} differs from this host's copy (sha256 {}... here); the same file must be "
            "at the same path on every host",
            host, files[f], hashes[f].substr(0, 12));
    }
    std::string marker, port_line;
    if (i == 0 && std::getline(lines, marker) && std::getline(lines, port_line) && !port_line.empty())
      problems += fmt::format(
          "\n  {}: port {} (rank 0's rendezvous) is already in use; pass --master_port with a "
          "free port",
          host, plan.master_port);
  }
  if (!problems.empty())
    fail("pre-flight found problems before starting any rank (--no_ssh_check skips these checks):{}", problems);
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

void print_plan(const Resolved& r, const std::string& runner, const EnvList& exported, const std::string& gpu_line) {
  const WorldPlan& plan = r.plan;
  std::string out =
      fmt::format("dscpp plan: {} rank{} on {} host{} from {}; runner {}; master {}:{}\n", plan.world_size(),
                  plan.world_size() == 1 ? "" : "s", plan.node_count(), plan.node_count() == 1 ? "" : "s",
                  r.pool_source, runner, plan.master_addr, plan.master_port);
  for (int n = 0; n < plan.node_count(); ++n) {
    auto ranks = plan.ranks_on(n);
    out += fmt::format("  {:<20} slots {:<12} ranks {}-{}\n", plan.hosts[n].host, format_id_ranges(plan.hosts[n].slots),
                       ranks.front().rank, ranks.back().rank);
  }
  if (!gpu_line.empty()) out += gpu_line + "\n";
  if (!exported.empty()) {
    out += "  forwarded environment:";
    for (const auto& [k, v] : exported) out += " " + k;
    out += "\n";
  }
  std::fputs(out.c_str(), stderr);
}

}  // namespace

namespace {

// Runs one local child (mpirun, srun) whose ranks print their own prefixes, under the same
// supervision as ranks: signals to dscpp tear it down, nothing outlives dscpp.
AttemptResult run_backend(const std::vector<std::string>& argv, const EnvList& env) {
  RankLaunch child;
  child.rank = -1;
  child.argv = argv;
  child.env = env;
  SupervisorOptions options;
  options.host = argv.front();  // failure messages name the backend; the ranks' shims name the rank
  GroupResult g = run_rank_group({child}, options);
  return {g.exit_code, g.stopped, g.first_failure ? g.first_failure->describe(options.host) : ""};
}

// The rendezvous port of a restarted job. The previous attempt's rank 0 (the store) has exited,
// so its port is normally free at once (TIME_WAIT does not matter: the store binds with
// SO_REUSEADDR). When rank 0 runs here, wait up to 10 s for it, then take the next free port
// above it; on an ssh host, wait the same 10 s and warn if it stays taken.
int port_for_restart(const WorldPlan& plan, const std::string& runner, const SshOptions& ssh) {
  const int port = plan.master_port;
  const std::string& host = plan.hosts.front().host;
  if (runner == "local" || is_local_host(host)) {
    for (int i = 0; i < 100; ++i) {
      if (local_port_free(port)) return port;
      usleep(100'000);
    }
    for (int p = port + 1; p <= std::min(port + 100, 65535); ++p)
      if (local_port_free(p)) {
        log::warn("port {} is still taken on this machine; the restarted job's rendezvous uses port {}", port, p);
        return p;
      }
    fail("port {} and the 100 ports above it are taken on this machine; cannot restart the job", port);
  }
  if (runner == "ssh") {
    std::string wait = fmt::format(
        "for i in $(seq 1 50); do ss -Htln 'sport = :{}' 2>/dev/null | grep -q . || exit 0; sleep 0.2; done; "
        "echo taken",
        port);
    try {
      if (ssh_capture(host, wait, ssh).find("taken") != std::string::npos)
        log::warn("port {} on {} is still taken 10 s after the job stopped; restarting anyway", port, host);
    } catch (const Error& e) {
      log::warn("could not check port {} on {} before restarting: {}", port, host, e.what());
    }
  }
  return port;  // mpirun/srun return only after their tasks exited
}

std::string join_words(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

}  // namespace

int run_rank_shim(const std::vector<std::string>& program, int local_rank_at) {
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
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  RankLaunch rank;
  rank.rank = id->rank;
  rank.label = id->node_count > 1 ? fmt::format("[rank {} {}]", id->rank, host) : fmt::format("[rank {}]", id->rank);
  rank.env = rank_env(plan, info, {});
  ProgramSpec spec{program, local_rank_at, ""};
  rank.argv = rank_argv(spec, id->local_rank);
  SupervisorOptions options;
  options.host = host;
  return run_rank_group({rank}, options).exit_code;
}

int run_launch(const LaunchArgs& args) {
  log::init_logging(-1);
  Environment env = environment_from(::environ);
  if (auto why = launched_task_reason(env))
    fail(
        "refusing to start ranks from inside a launched job: {}. Starting dscpp once per task would multiply the "
        "ranks; run dscpp once (e.g. in the sbatch script, not under srun/mpirun), or run PROGRAM directly",
        *why);
  Resolved r = resolve_resources(args, env);
  const std::string runner = choose_runner(args, r);
  const std::string dscpp = self_executable();
  const ProgramSpec program = resolve_program(args.program, args.no_local_rank, dscpp);
  SshOptions ssh;
  ssh.port = args.ssh_port;
  r.plan.master_port = args.master_port;
  r.plan.master_addr = choose_master_addr(args, r.plan, runner, ssh);
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  ExportInputs inputs;
  inputs.environment = env;
  inputs.cwd = cwd;
  inputs.cli_env = args.env;
  // Locally every rank inherits dscpp's whole environment; other hosts get the forwarded set.
  const EnvList exported =
      runner == "local" ? build_exported_env(ExportInputs{{}, cwd, args.env}) : build_exported_env(inputs);

  if (args.max_restarts < 0) fail("--max_restarts {}: expected 0 or more", args.max_restarts);

  // The exact commands of attempt `restart` (0 = the first): only the restart variables and,
  // rarely, the rendezvous port differ between attempts. --dry_run prints attempt 0's.
  struct Commands {
    NodeAgentArgs agent;                // local: run here; ssh: the agent on each host
    std::vector<RemoteCommand> remote;  // ssh
    EnvList backend_env;                // openmpi, slurm: set on mpirun/srun, forwarded to the ranks
    std::vector<std::string> backend;   // openmpi, slurm: the mpirun/srun command line
  };
  auto build = [&](int restart) {
    Commands c;
    EnvList env = exported;
    for (auto& kv : restart_env(restart, args.max_restarts)) env.push_back(kv);
    // Every runner prefixes each output line with "[rank R]", so programs that prefix their own
    // logs (dscpp-runtime) can leave it out.
    env.push_back({"DSCPP_PREFIXED_OUTPUT", "1"});
    NodeAgentArgs& agent = c.agent;
    agent.world_info = encode_world_info(r.plan.hosts);
    agent.master_addr = r.plan.master_addr;
    agent.master_port = r.plan.master_port;
    agent.devices_are_gpus = r.plan.devices_are_gpus;
    agent.env = env;
    agent.program = program.argv;
    agent.local_rank_at = program.local_rank_at;
    agent.bind_cores_to_rank = args.bind_cores_to_rank;
    agent.bind_core_list = args.bind_core_list;
    agent.each_rank_log_dir = args.each_rank_log_dir;
    c.backend_env = {{"MASTER_ADDR", r.plan.master_addr}, {"MASTER_PORT", std::to_string(r.plan.master_port)}};
    c.backend_env.insert(c.backend_env.end(), env.begin(), env.end());
    std::vector<std::string> backend_names;
    for (const auto& [k, v] : c.backend_env) backend_names.push_back(k);
    if (runner == "ssh") {
      for (int n = 0; n < r.plan.node_count(); ++n) {
        agent.node_rank = n;
        // The agent stops its ranks when its stdin closes: that is how teardown reaches it.
        c.remote.push_back({r.plan.hosts[n].host, agent_command(cwd, dscpp, node_agent_argv(agent)), {}, true});
      }
    } else if (runner == "openmpi") {
      c.backend =
          mpirun_argv(r.plan, backend_names, args.launcher_args, dscpp, program, args.no_local_rank, geteuid() == 0);
    } else if (runner == "slurm") {
      const bool filtered = r.from_hostfile || !args.include.empty() || !args.exclude.empty();
      c.backend = srun_argv(r.plan, filtered, args.launcher_args, dscpp, program, args.no_local_rank);
    }
    agent.node_rank = 0;
    agent.stop_on_stdin_eof = false;  // the local runner's agent is this process
    return c;
  };

  const GpuSharing sharing = local_gpu_sharing(args, r.plan, exported, env);
  print_plan(r, runner, runner == "local" ? EnvList{} : exported, sharing.plan_line);
  // NCCL itself would refuse only after every rank started and loaded its model.
  if (!sharing.refusal.empty()) fail("{}", sharing.refusal);
  if (args.dry_run) {
    Commands c = build(0);
    std::string out;
    if (runner == "local")
      out += "command (each rank, in this process group): " + join_words(rank_argv(program, 0)) + "\n";
    for (const auto& rc : c.remote) out += fmt::format("command on {}: {}\n", rc.host, rc.command);
    if (!c.backend.empty()) out += "command: " + join_words(c.backend) + "\n";
    out += "environment of each rank (rank 0 shown; RANK/LOCAL_RANK/CROSS_RANK differ per rank):\n";
    for (const auto& [k, v] : rank_env(r.plan, r.plan.ranks().front(), EnvOptions{c.agent.env, false, 0}))
      out += "  " + k + "=" + shell_quote(v) + "\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  if (args.save_pid) {
    std::string path = fmt::format("/tmp/{}.deepspeed", getpid());
    if (FILE* f = std::fopen(path.c_str(), "w")) std::fprintf(f, "%d\n", getpid()), std::fclose(f);
  }
  if (runner == "ssh" && !args.no_ssh_check) preflight_ssh(r.plan, dscpp, program, ssh);
  return run_with_restarts(args.max_restarts, [&](int restart) -> AttemptResult {
    if (restart > 0) r.plan.master_port = port_for_restart(r.plan, runner, ssh);
    Commands c = build(restart);
    if (runner == "local") {
      if (restart == 0 && !local_port_free(r.plan.master_port))
        fail("port {} is already in use on this machine (rank 0 listens there); pass --master_port with a free port",
             r.plan.master_port);
      GroupResult g = run_node_agent_group(c.agent);
      return {g.exit_code, g.stopped, g.first_failure ? g.first_failure->describe(r.plan.hosts[0].host) : ""};
    }
    if (runner == "ssh") {
      RemoteRunResult rr = run_remote(c.remote, ssh, RemoteRunOptions{});
      return {rr.exit_code, rr.stopped, rr.first_failure ? rr.first_failure->describe() : ""};
    }
    return run_backend(c.backend, c.backend_env);
  });
}

}  // namespace dscpp::launcher
