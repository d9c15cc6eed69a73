// The openmpi runner: one mpirun starts `dscpp rank-shim` once per rank on the plan's hosts
// (mpirun_argv in launcher/job_commands.h); the shim turns OMPI_COMM_WORLD_* into the rank
// variables. mpirun's own environment carries the ranks' variables, named with -x.
#include "launcher/runners/runner_internal.h"

#include <unistd.h>

namespace dscpp::launcher::runner_internal {
namespace {

class OpenMpiRunner final : public BackendRunner {
 public:
  std::string_view name() const override { return "openmpi"; }

  std::string master_addr(const WorldPlan& plan) const override {
    const std::string& first = plan.hosts.front().host;
    if (std::string addr = master_addr_by_name(first); !addr.empty()) return addr;
    fail_no_master_addr(first);
  }

  // mpirun forwards SIGUSR1 to every task (its stdin reaches rank 0 only).
  RankLaunch::Stop stop_request() const override { return RankLaunch::Stop::usr1; }

  AttemptCommands commands(const Job& job, int restart) const override {
    AttemptCommands c = common_commands(job, restart);
    std::vector<std::string> names;
    for (const auto& [k, v] : c.backend_env) names.push_back(k);
    // mpirun refuses to run as root unless told that it is meant to.
    c.backend = mpirun_argv(job.plan, names, job.args.launcher_args, job.dscpp, job.program, job.args.no_local_rank,
                            geteuid() == 0);
    return c;
  }
};

}  // namespace

std::unique_ptr<Runner> openmpi_runner() {
  return std::make_unique<OpenMpiRunner>();
}

}  // namespace dscpp::launcher::runner_internal
