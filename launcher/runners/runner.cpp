// make_runner, and what more than one runner needs (runner_internal.h).
#include "launcher/runners/runner.h"

#include "core/error.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "launcher/env_export.h"
#include "launcher/runners/runner_internal.h"
#include "launcher/supervisor/supervisor.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

namespace dscpp::launcher {

std::unique_ptr<Runner> make_runner(std::string_view name, const LaunchArgs& args) {
  using namespace runner_internal;
  if (name == "local") return local_runner();
  if (name == "ssh" || name == "pdsh") {
    SshOptions ssh;
    ssh.port = args.ssh_port;
    ssh.user = args.ssh_user;
    ssh.identity_files = args.ssh_identity;
    ssh.known_hosts = args.ssh_known_hosts;
    ssh.config_file = args.ssh_config;
    return ssh_runner(ssh);
  }
  if (name == "openmpi") return openmpi_runner();
  if (name == "slurm") return slurm_runner();
  fail("--launcher {}: expected local, ssh, openmpi or slurm (pdsh's role is dscpp's ssh runner)", name);
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == name;
}

namespace runner_internal {
namespace {

// Runs one local child (mpirun, srun) whose ranks print their own prefixes, under the same
// supervision as ranks: its shims report every rank's exit, so the job blames the rank that
// failed first on its own and exits with that rank's code; signals to dscpp tear it down,
// nothing outlives dscpp.
AttemptResult run_backend(const std::vector<std::string>& argv, const EnvList& env, int world_size,
                          RankLaunch::Stop stop) {
  RankLaunch child;
  child.rank = -1;
  child.argv = argv;
  child.env = env;
  child.reported_ranks = world_size;
  child.stop = stop;
  SupervisorOptions options;
  options.host = argv.front();  // names the backend when it fails itself (no rank reported it)
  GroupResult g = run_rank_group({child}, options);
  return {g.exit_code, g.stopped, g.failure};
}

}  // namespace

AttemptCommands common_commands(const Job& job, int restart) {
  AttemptCommands c;
  EnvList env = job.exported;
  for (auto& kv : restart_env(restart, job.args.max_restarts)) env.push_back(kv);
  // Every runner prefixes each output line with "[rank R]", so programs that prefix their own
  // logs (dscpp-runtime) can leave it out.
  env.push_back({"DSCPP_PREFIXED_OUTPUT", "1"});
  NodeAgentArgs& agent = c.agent;
  agent.world_info = encode_world_info(job.plan.hosts);
  agent.master_addr = job.plan.master_addr;
  agent.master_port = job.plan.master_port;
  agent.devices_are_gpus = job.plan.devices_are_gpus;
  agent.env = env;
  agent.program = job.program.argv;
  agent.local_rank_at = job.program.local_rank_at;
  agent.bind_cores_to_rank = job.args.bind_cores_to_rank;
  agent.bind_core_list = job.args.bind_core_list;
  agent.each_rank_log_dir = job.args.each_rank_log_dir;
  agent.job_secret = job.secret;
  c.backend_env = {{"MASTER_ADDR", job.plan.master_addr}, {"MASTER_PORT", std::to_string(job.plan.master_port)}};
  c.backend_env.insert(c.backend_env.end(), env.begin(), env.end());
  // In mpirun's and srun's environment, which they hand to every task (`-x NAME`, --export=ALL).
  if (!job.secret.empty()) c.backend_env.emplace_back(kJobSecretVar, job.secret);
  return c;
}

// mpirun/srun return only after their tasks exited, so only a rank 0 on this machine can still
// hold the port (a lingering process of the old job).
int BackendRunner::port_for_restart(const WorldPlan& plan) const {
  return is_local_host(plan.hosts.front().host) ? free_local_port_for_restart(plan.master_port) : plan.master_port;
}

std::string BackendRunner::describe(const Job& /*job*/, const AttemptCommands& c) const {
  return "command: " + join_words(c.backend) + "\n";
}

AttemptResult BackendRunner::attempt(const Job& job, int restart) const {
  AttemptCommands c = commands(job, restart);
  return run_backend(c.backend, c.backend_env, job.plan.world_size(), stop_request());
}

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

// TIME_WAIT does not matter (the store binds with SO_REUSEADDR): a taken port means a process
// of the previous attempt is still exiting, so waiting briefly usually gets the same port back.
int free_local_port_for_restart(int port) {
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

std::string master_addr_by_name(const std::string& host) {
  std::string addr = resolve_ipv4(host);
  if (addr.empty() || addr.rfind("127.", 0) == 0) return "";
  log::info("master address {} (how this host resolves {}); pass --master_addr to choose another", addr, host);
  return addr;
}

void fail_no_master_addr(const std::string& host) {
  fail("cannot work out the address of {} (rank 0's host); pass --master_addr with an address every host can reach",
       host);
}

std::string join_words(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

}  // namespace runner_internal
}  // namespace dscpp::launcher
