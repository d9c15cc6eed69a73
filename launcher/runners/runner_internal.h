// What the runners share, private to launcher/runners/: the constructors make_runner picks from,
// the part of an attempt's commands that is the same for every runner, and the pieces of
// choosing rank 0's address and port that more than one runner uses (runner.cpp).
#pragma once

#include "launcher/runners/runner.h"
#include "launcher/ssh/ssh.h"
#include "launcher/supervisor/supervisor.h"

#include <memory>
#include <string>
#include <vector>

namespace dscpp::launcher::runner_internal {

std::unique_ptr<Runner> local_runner();                     // local.cpp
std::unique_ptr<Runner> ssh_runner(const SshOptions& ssh);  // ssh.cpp
std::unique_ptr<Runner> openmpi_runner();                   // openmpi.cpp
std::unique_ptr<Runner> slurm_runner();                     // slurm.cpp

// Attempt `restart`'s commands up to what is the runner's own: the agent's arguments (node
// rank 0, stopping on stdin EOF) with every rank's environment, and the variables mpirun/srun
// carry to the ranks. `remote` and `backend` are left empty.
AttemptCommands common_commands(const Job& job, int restart);

// The runners that start one local child (mpirun, srun) whose tasks become the ranks through
// `dscpp rank-shim`: the child is supervised like a rank, and the ranks prefix their own output.
class BackendRunner : public Runner {
 public:
  int port_for_restart(const WorldPlan& plan) const override;
  std::string describe(const Job& job, const AttemptCommands& commands) const override;
  AttemptResult attempt(const Job& job, int restart) const override;

 protected:
  // How this backend hands a stop to its shims (supervisor.h says why not SIGTERM).
  virtual RankLaunch::Stop stop_request() const = 0;
};

// Whether nothing on this machine listens on `port` (what rank 0's store needs).
bool local_port_free(int port);
// `port` once it is free on this machine (waiting up to 10 s), else the next free port above it.
int free_local_port_for_restart(int port);

// The first IPv4 address `host` resolves to here, or "" when it does not resolve.
std::string resolve_ipv4(const std::string& host);
// `host`'s address as this machine resolves it, logged as the master address; "" when it does
// not resolve or resolves to loopback (which other hosts cannot reach).
std::string master_addr_by_name(const std::string& host);
[[noreturn]] void fail_no_master_addr(const std::string& host);

// `argv` as one shell line (each word quoted where needed).
std::string join_words(const std::vector<std::string>& argv);

}  // namespace dscpp::launcher::runner_internal
