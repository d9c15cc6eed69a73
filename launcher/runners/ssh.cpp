// The ssh runner (DeepSpeed's pdsh runner): `dscpp node-agent` on every host over libssh2
// (launcher/ssh/), each starting and supervising that host's ranks. Other hosts are reached
// only through ssh, so the rendezvous port, rank 0's address and the pre-flight checks are
// asked of them with short remote commands.
#include "core/error.h"
#include "core/log.h"
#include "launcher/runners/runner_internal.h"

#include <fmt/core.h>

#include <sstream>

namespace dscpp::launcher::runner_internal {
namespace {

std::string sha256_of(const std::string& path) {
  std::string out = first_line_of("sha256sum " + shell_quote(path) + " 2>/dev/null");
  return out.substr(0, out.find(' '));
}

class SshRunner final : public Runner {
 public:
  explicit SshRunner(const SshOptions& ssh) : ssh_(ssh) {}

  std::string_view name() const override { return "ssh"; }

  // As this machine resolves the first host, else the first address that host reports.
  std::string master_addr(const WorldPlan& plan) const override {
    const std::string& first = plan.hosts.front().host;
    if (std::string addr = master_addr_by_name(first); !addr.empty()) return addr;
    std::string out = ssh_capture(first, "hostname -I", ssh_);
    std::string token = out.substr(0, out.find_first_of(" \t\n"));
    if (!token.empty()) {
      log::info("master address {} (first address `hostname -I` reports on {}); pass --master_addr to choose another",
                token, first);
      return token;
    }
    fail_no_master_addr(first);
  }

  // Rank 0's host waits the same 10 s a local one would, but a taken port there cannot be
  // swapped for another without asking that host again: warn and keep it.
  int port_for_restart(const WorldPlan& plan) const override {
    const int port = plan.master_port;
    const std::string& host = plan.hosts.front().host;
    if (is_local_host(host)) return free_local_port_for_restart(port);
    std::string wait = fmt::format(
        "for i in $(seq 1 50); do ss -Htln 'sport = :{}' 2>/dev/null | grep -q . || exit 0; sleep 0.2; done; "
        "echo taken",
        port);
    try {
      if (ssh_capture(host, wait, ssh_).find("taken") != std::string::npos)
        log::warn("port {} on {} is still taken 10 s after the job stopped; restarting anyway", port, host);
    } catch (const Error& e) {
      log::warn("could not check port {} on {} before restarting: {}", port, host, e.what());
    }
    return port;
  }

  AttemptCommands commands(const Job& job, int restart) const override {
    AttemptCommands c = common_commands(job, restart);
    NodeAgentArgs agent = c.agent;
    for (int n = 0; n < job.plan.node_count(); ++n) {
      agent.node_rank = n;
      // The agent stops its ranks when its stdin closes: that is how teardown reaches it.
      c.remote.push_back({job.plan.hosts[n].host, agent_command(job.cwd, job.dscpp, node_agent_argv(agent)), {}, true});
    }
    return c;
  }

  std::string describe(const Job& /*job*/, const AttemptCommands& c) const override {
    std::string out;
    for (const auto& rc : c.remote) out += fmt::format("command on {}: {}\n", rc.host, rc.command);
    return out;
  }

  void preflight(const Job& job) const override {
    if (!job.args.no_ssh_check) check_hosts(job.plan, job.dscpp, job.program);
  }

  AttemptResult attempt(const Job& job, int restart) const override {
    AttemptCommands c = commands(job, restart);
    RemoteRunResult rr = run_remote(c.remote, ssh_, RemoteRunOptions{});
    return {rr.exit_code, rr.stopped, rr.first_failure ? rr.first_failure->describe() : ""};
  }

 private:
  // Every host answers, runs the same dscpp build and sees the same program file, and rank 0's
  // port is free. Each failure names the host and what to do; all of them are reported at once.
  void check_hosts(const WorldPlan& plan, const std::string& dscpp, const ProgramSpec& program) const {
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
    std::vector<RemoteCapture> results = ssh_capture_all(checks, ssh_);
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

  SshOptions ssh_;
};

}  // namespace

std::unique_ptr<Runner> ssh_runner(const SshOptions& ssh) {
  return std::make_unique<SshRunner>(ssh);
}

}  // namespace dscpp::launcher::runner_internal
