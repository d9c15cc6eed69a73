// The slurm runner: one srun starts `dscpp rank-shim` per task inside the allocation (srun_argv
// in launcher/job_commands.h); the shim turns SLURM_PROCID & co into the rank variables. The
// environment travels with srun's --export=ALL.
#include "core/log.h"
#include "launcher/runners/runner_internal.h"

namespace dscpp::launcher::runner_internal {
namespace {

class SlurmRunner final : public BackendRunner {
 public:
  std::string_view name() const override { return "slurm"; }

  // SLURM knows the node's address even when its name does not resolve here.
  std::string master_addr(const WorldPlan& plan) const override {
    const std::string& first = plan.hosts.front().host;
    std::string out = first_line_of("scontrol show node " + shell_quote(first) + " -o 2>/dev/null");
    size_t at = out.find("NodeAddr=");
    if (at != std::string::npos) {
      std::string ip = resolve_ipv4(out.substr(at + 9, out.find(' ', at + 9) - at - 9));
      if (!ip.empty()) {
        log::info("master address {} (SLURM's NodeAddr of {})", ip, first);
        return ip;
      }
    }
    if (std::string addr = master_addr_by_name(first); !addr.empty()) return addr;
    fail_no_master_addr(first);
  }

  RankLaunch::Stop stop_request() const override { return RankLaunch::Stop::close_stdin; }

  AttemptCommands commands(const Job& job, int restart) const override {
    AttemptCommands c = common_commands(job, restart);
    // Unfiltered, srun spreads the tasks over the whole allocation; a hostfile or
    // --include/--exclude picks nodes, which srun must then be told (--nodelist).
    const bool filtered = job.from_hostfile || !job.args.include.empty() || !job.args.exclude.empty();
    c.backend = srun_argv(job.plan, filtered, job.args.launcher_args, job.dscpp, job.program, job.args.no_local_rank);
    return c;
  }
};

}  // namespace

std::unique_ptr<Runner> slurm_runner() {
  return std::make_unique<SlurmRunner>();
}

}  // namespace dscpp::launcher::runner_internal
