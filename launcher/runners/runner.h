// How ranks get started: one interface, four runners (in the spirit of PRRTE's `plm` modules).
// run_launch (launcher/launch.cpp) does what is the same for every runner (resources, plan,
// program, restarts) and asks the runner only what differs: rank 0's address, the port of a
// restarted job, which environment the ranks get, the commands of one attempt and their
// --dry_run text, a pre-flight check, and running an attempt.
//   local    every rank a child of dscpp, which acts as the node agent of this machine
//   ssh      `dscpp node-agent` on every host over libssh2 (launcher/ssh/)
//   openmpi  one mpirun running `dscpp rank-shim` per rank
//   slurm    one srun running `dscpp rank-shim` per task
#pragma once

#include "launcher/job_commands.h"
#include "launcher/launch.h"
#include "launcher/launch_plan.h"
#include "launcher/restart.h"
#include "launcher/ssh/ssh.h"
#include "launcher/supervisor/node_agent.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher {

// One launch as the runners see it. run_launch fills it in order (the master address once the
// runner is known, `exported` once the runner said what ranks inherit); after that only
// plan.master_port changes, when a restart has to move the rendezvous.
struct Job {
  const LaunchArgs& args;
  WorldPlan plan{};
  bool from_hostfile = false;  // srun must then be told which of the allocation's nodes to use
  std::string dscpp{};         // this executable: the agent and the rank-shim every runner starts
  ProgramSpec program{};
  std::string cwd{};   // the launch directory; remote ranks start in the same path
  EnvList exported{};  // what every rank gets on top of the plan's variables
  // The job's secret (core/job_secret.h), which each runner hands to every rank on a channel of
  // its own, never on a command line: the local runner in the rank's environment, ssh on the
  // channel's stdin, openmpi and slurm in mpirun's/srun's environment.
  std::string secret{};
};

// The exact commands of one attempt. Attempts differ only in the restart variables and,
// rarely, the rendezvous port, so --dry_run prints attempt 0's.
struct AttemptCommands {
  NodeAgentArgs agent;                // every rank's program and environment; local: run here
  std::vector<RemoteCommand> remote;  // ssh: the agent on each host
  EnvList backend_env;                // openmpi, slurm: set on mpirun/srun, forwarded to the ranks
                                      // (the job's secret included: never print it)
  std::vector<std::string> backend;   // openmpi, slurm: the mpirun/srun command line
};

class Runner {
 public:
  virtual ~Runner() = default;

  // As the plan line prints it ("runner ssh").
  virtual std::string_view name() const = 0;

  // Rank 0's address as every host can reach it. Asked only when --master_addr is not given and
  // some host is not this machine; says where the address came from, throws when none is found.
  virtual std::string master_addr(const WorldPlan& plan) const = 0;

  // The rendezvous port of a restarted job. The previous attempt's rank 0 has exited, so its
  // port is normally free again at once; where it is not, a runner waits for it or moves on.
  virtual int port_for_restart(const WorldPlan& plan) const = 0;

  // The rendezvous port of the first attempt: `port`, unless the runner can see it is taken and
  // the user did not choose it (`chosen`), when it may take a free one instead.
  virtual int first_port(int port, bool /*chosen*/) const { return port; }

  // True when the ranks inherit dscpp's whole environment (they run here): then only the env
  // files and --env are exported, and the plan lists no forwarded set.
  virtual bool inherits_environment() const { return false; }

  // The commands of attempt `restart` (0 = the first).
  virtual AttemptCommands commands(const Job& job, int restart) const = 0;

  // --dry_run: the command lines of `commands`, "command...: ..." each, newline-terminated.
  virtual std::string describe(const Job& job, const AttemptCommands& commands) const = 0;

  // Checks made before any rank starts (none by default); throws naming each problem.
  virtual void preflight(const Job& /*job*/) const {}

  // Runs attempt `restart` to its end under supervision.
  virtual AttemptResult attempt(const Job& job, int restart) const = 0;
};

// The runner --launcher names ("pdsh" is the ssh runner, whose role it plays); throws for any
// other name.
std::unique_ptr<Runner> make_runner(std::string_view name, const LaunchArgs& args);

// Whether `host` names this machine (localhost, a loopback address or the hostname).
bool is_local_host(const std::string& host);

}  // namespace dscpp::launcher
