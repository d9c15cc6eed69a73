// The local runner: every rank is a child of this process, supervised here as the node agent
// supervises one host's ranks (this process is that agent), so the ranks inherit dscpp's whole
// environment and rank 0's port can be checked and chosen directly.
#include "core/error.h"
#include "core/log.h"
#include "launcher/runners/runner_internal.h"

#include <fmt/core.h>

#include <algorithm>

namespace dscpp::launcher::runner_internal {
namespace {

class LocalRunner final : public Runner {
 public:
  std::string_view name() const override { return "local"; }

  // Every rank runs here, whatever the hosts are called.
  std::string master_addr(const WorldPlan& /*plan*/) const override { return "127.0.0.1"; }

  int port_for_restart(const WorldPlan& plan) const override { return free_local_port_for_restart(plan.master_port); }

  // Every rank is here, so any free port does; another job on the default port is no reason to fail.
  int first_port(int port, bool chosen) const override {
    if (chosen || local_port_free(port)) return port;
    for (int p = port + 1; p <= std::min(port + 100, 65535); ++p)
      if (local_port_free(p)) {
        log::info("port {} is taken on this machine: rank 0 listens on {} (--master_port chooses)", port, p);
        return p;
      }
    return port;  // attempt() says that it is taken
  }

  bool inherits_environment() const override { return true; }

  AttemptCommands commands(const Job& job, int restart) const override {
    AttemptCommands c = common_commands(job, restart);
    c.agent.stop_on_stdin_eof = false;  // this process is the agent: its stdin is the user's
    c.agent.report_exits = false;       // and it says itself which rank failed
    c.agent.node_rank = std::max(job.args.node_rank, 0);
    return c;
  }

  std::string describe(const Job& job, const AttemptCommands& /*commands*/) const override {
    return "command (each rank, in this process group): " + join_words(rank_argv(job.program, 0)) + "\n";
  }

  AttemptResult attempt(const Job& job, int restart) const override {
    AttemptCommands c = commands(job, restart);
    // Only the first attempt: a restart already moved to a free port (port_for_restart).
    if (restart == 0 && job.args.node_rank <= 0 && !local_port_free(job.plan.master_port))
      fail("port {} is already in use on this machine (rank 0 listens there); pass --master_port with a free port",
           job.plan.master_port);
    GroupResult g = run_node_agent_group(c.agent);
    return {g.exit_code, g.stopped, g.failure};
  }
};

}  // namespace

std::unique_ptr<Runner> local_runner() {
  return std::make_unique<LocalRunner>();
}

}  // namespace dscpp::launcher::runner_internal
