// The ssh runner (DeepSpeed's pdsh runner): `dscpp node-agent` on every host over libssh2
// (launcher/ssh/), each starting and supervising that host's ranks. Other hosts are reached
// only through ssh, so rank 0's address and the rendezvous port of a restart are asked of them
// with short remote commands, and the pre-flight check runs in the agents' own sessions.
#include "core/error.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "launcher/file_identity.h"
#include "launcher/hostfile.h"  // host_name_of: "user@host" entries
#include "launcher/runners/runner_internal.h"
#include "launcher/supervisor/stop_signals.h"

#include <fmt/core.h>

#include <optional>
#include <sstream>

namespace dscpp::launcher::runner_internal {
namespace {

// A file every host must have identical, as this host has it.
struct CheckedFile {
  FileIdentity local;
  std::string what;  // what it is, for the messages; "" for dscpp itself
};

// What is wrong with `host`'s copy of `f`, with the remedy; "" when it is the same file.
std::string file_problem(const std::string& host, const CheckedFile& f, const ProbeVerdict& v) {
  const std::string& path = f.local.path;
  const std::string name = f.what.empty() ? path : fmt::format("{} ({})", path, f.what);
  constexpr const char* kShare =
      "every host needs it at the same path as this one: copy it there, or put it on a filesystem every host "
      "shares";
  switch (v.kind) {
    case ProbeVerdict::same:
      return "";
    case ProbeVerdict::missing:
      if (f.what.empty())
        return fmt::format("{}: no dscpp at {} (it starts that host's ranks): install this dscpp build there at the "
                           "same path, or put it on a filesystem every host shares",
                           host, path);
      return fmt::format("{}: {} does not exist there; {}", host, name, kShare);
    case ProbeVerdict::not_regular:
      return fmt::format("{}: {} is not a regular file there; {}", host, name, kShare);
    case ProbeVerdict::unreadable:
      return fmt::format("{}: {} is not readable there by the ssh user: make it readable (chmod a+r)", host, name);
    case ProbeVerdict::different:
      if (f.what.empty())
        return fmt::format("{}: {} is a different dscpp build than this host's ({}): install the same build on "
                           "every host (--no_ssh_check skips this check if you know the two builds work together)",
                           host, path, v.detail);
      return fmt::format("{}: {} differs from this host's copy ({}): the same file must be at the same path on "
                         "every host (--no_ssh_check skips this check if the difference is intended)",
                         host, name, v.detail);
    case ProbeVerdict::no_answer:
      break;
  }
  return fmt::format("{}: could not compare {} with this host's copy: {} (--no_ssh_check skips this check)", host,
                     name, v.detail);
}

// The pre-flight: every host answers, runs the same dscpp build and sees the same program files
// at the same paths, and rank 0's port is free there. Files are compared by identity
// (file_identity.h: the ELF build id and size, else the SHA-256), not hashed in full on every
// host: dscpp, dscpp-runtime and a plugin are 50 to 156 MB depending on the build, and hashing
// them on every host and here added 0.3 to 2.3 s to each launch. The check runs in the sessions
// that start the agents (RemoteCommand::check), which wait for it on every host before any
// starts: a separate round of logins cost 0.3 to 0.5 s per launch where the login shell's
// startup files are slow. Every problem is reported together, naming host and remedy;
// --no_ssh_check is offered only where skipping can be right (copies that differ but may work
// together), not for a host that cannot be reached, a missing file or a taken port, which would
// only fail later.
class HostCheck {
 public:
  HostCheck(const WorldPlan& plan, const std::string& dscpp, const ProgramSpec& program) : plan_(plan) {
    files_.push_back({identify_file(dscpp), ""});
    const std::string& exe = program.argv.front();
    if (exe.front() == '/' && exe != program.file)
      files_.push_back({identify_file(exe), "the runtime that runs the program"});
    if (!program.file.empty()) files_.push_back({identify_file(program.file), "the program"});
    for (const auto& f : files_) {
      if (f.local.ok()) {
        probe_ += (probe_.empty() ? "" : "; ") + identity_probe(f.local);
        probed_.push_back(&f);
      } else {
        // Reported with the other hosts' problems, which the sessions are still asked for.
        local_problems_.push_back(fmt::format(
            "this host: {} {}, so the other hosts' copies cannot be compared with it: put it here at the same path "
            "(--no_ssh_check skips the check if it exists only on the other hosts)",
            f.local.path, f.local.problem));
      }
    }
    if (probe_.empty()) probe_ = "true";
  }
  HostCheck(const HostCheck&) = delete;  // probed_ points into files_
  HostCheck& operator=(const HostCheck&) = delete;

  // What host `n` runs: one line per probed file, then (rank 0's host) PORT and the first
  // listening socket on the port, if any.
  std::string command(int n) const {
    if (n != 0) return probe_;
    return probe_ + fmt::format("; echo PORT; ss -Htln 'sport = :{}' 2>/dev/null | head -1", plan_.master_port);
  }

  // "" when every host passed; else the error listing every problem (RemoteRunOptions::gate).
  std::string problems(const std::vector<RemoteCapture>& results) const {
    std::vector<std::string> problems = local_problems_;
    for (size_t i = 0; i < results.size(); ++i) {
      const std::string& host = plan_.hosts[i].host;
      const RemoteCapture& r = results[i];
      if (std::string why = r.failure(command(static_cast<int>(i))); !why.empty()) {
        problems.push_back(fmt::format("{}: {}", host, why));
        continue;
      }
      std::istringstream lines(r.out);
      for (const CheckedFile* f : probed_) {
        std::string line;
        std::getline(lines, line);
        if (std::string p = file_problem(host, *f, compare_probe(f->local, line)); !p.empty()) problems.push_back(p);
      }
      std::string marker, port_line;
      if (i == 0 && std::getline(lines, marker) && std::getline(lines, port_line) && !port_line.empty())
        problems.push_back(fmt::format(
            "{}: port {} (rank 0's rendezvous) is already in use there: pass --master_port with a free port, or "
            "stop what listens on it (`ss -tlnp 'sport = :{}'` on {} names it)",
            host, plan_.master_port, plan_.master_port, host));
    }
    if (problems.empty()) return "";
    std::string text = fmt::format("pre-flight found {} problem{} before starting any rank:", problems.size(),
                                   problems.size() == 1 ? "" : "s");
    for (const auto& p : problems) text += "\n  " + p;
    return text;
  }

 private:
  const WorldPlan& plan_;
  std::vector<CheckedFile> files_;
  std::vector<const CheckedFile*> probed_;
  std::vector<std::string> local_problems_;
  std::string probe_;
};

class SshRunner final : public Runner {
 public:
  explicit SshRunner(const SshOptions& ssh) : ssh_(ssh) {}

  std::string_view name() const override { return "ssh"; }

  // As this machine resolves the first host, else the first address that host reports.
  std::string master_addr(const WorldPlan& plan) const override {
    const std::string& first = plan.hosts.front().host;
    if (std::string addr = master_addr_by_name(host_name_of(first)); !addr.empty()) return addr;
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
    if (!checks(job, restart)) return agent_commands(job, restart, nullptr);
    HostCheck check(job.plan, job.dscpp, job.program);
    return agent_commands(job, restart, &check);
  }

  std::string describe(const Job& /*job*/, const AttemptCommands& c) const override {
    std::string out;
    for (const auto& rc : c.remote)
      out += fmt::format("command on {}: {}{}{}\n", rc.host, stdin_env_prefix(rc.stdin_env),
                         rc.check.empty() ? "" : gate_prefix(rc.check), rc.command);
    return out;
  }

  AttemptResult attempt(const Job& job, int restart) const override {
    std::optional<HostCheck> check;
    if (checks(job, restart)) check.emplace(job.plan, job.dscpp, job.program);
    AttemptCommands c = agent_commands(job, restart, check ? &*check : nullptr);
    // Ctrl-C, kill and a batch system's SIGTERM stop every host in order and say so, instead of
    // killing dscpp and leaving each host's watchdog to notice the lost connection.
    StopSignals signals;
    RemoteRunOptions options;
    options.stop_fd = signals.fd();
    options.stop_reason = [&signals] {
      int sig = signals.received();
      return std::pair<int, std::string>{128 + sig, "received SIG" + signal_name(sig)};
    };
    if (check) options.gate = [&check](const std::vector<RemoteCapture>& got) { return check->problems(got); };
    RemoteRunResult rr = run_remote(c.remote, ssh_, options);
    // As any launch error: no rank ran, and a restart would find the same problems.
    if (!rr.refused.empty()) throw Error(rr.refused);
    return {rr.exit_code, rr.stopped, rr.failure};
  }

 private:
  // The first attempt only: a restart runs the same files on the same hosts, and its port has
  // been waited for by port_for_restart, whose rule (warn and go on) a port check would overrule.
  static bool checks(const Job& job, int restart) { return !job.args.no_ssh_check && restart == 0; }

  AttemptCommands agent_commands(const Job& job, int restart, const HostCheck* check) const {
    AttemptCommands c = common_commands(job, restart);
    NodeAgentArgs agent = c.agent;
    for (int n = 0; n < job.plan.node_count(); ++n) {
      agent.node_rank = n;
      // The agent stops its ranks when its stdin closes: that is how teardown reaches it. It
      // reports each rank's exit, so the job blames the right rank across hosts.
      c.remote.push_back({job.plan.hosts[n].host, agent_command(job.cwd, job.dscpp, node_agent_argv(agent)), {}, true,
                          static_cast<int>(job.plan.ranks_on(n).size())});
      if (check) c.remote.back().check = check->command(n);
      // On the channel's stdin: the agent inherits it and hands it to its ranks.
      if (!job.secret.empty()) c.remote.back().stdin_env = {{kJobSecretVar, job.secret}};
    }
    return c;
  }

  SshOptions ssh_;
};

}  // namespace

std::unique_ptr<Runner> ssh_runner(const SshOptions& ssh) {
  return std::make_unique<SshRunner>(ssh);
}

}  // namespace dscpp::launcher::runner_internal
