// Running one host's ranks as child processes and watching them: output prefixed per line,
// the first failure stops the others (TERM, then KILL after a grace period), a stop request
// (signal or stop_fd) tears everything down, and nothing outlives the supervisor.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/world.h"

namespace dscpp::launcher {

struct RankLaunch {
  int rank = 0;
  std::string label;              // output prefix, e.g. "[rank 3]" or "[rank 3 node2]"
  std::vector<std::string> argv;  // argv[0] is looked up in PATH if it has no '/'
  EnvList env;                    // set on top of the supervisor's own environment
  std::string log_file;           // non-empty: stdout+stderr go here, not to the console
  std::vector<int> cpus;          // non-empty: the rank is pinned to these cores
};

struct SupervisorOptions {
  double grace_seconds = 5.0;  // TERM -> KILL
  int stop_fd = -1;            // readable or EOF = stop everything (a node agent's stdin)
  int out_fd = 1;              // where prefixed stdout lines go
  int err_fd = 2;              // where prefixed stderr lines and supervisor messages go
  std::string host;            // named in failure messages
};

struct RankExit {
  int rank = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // killed by this signal
  std::string describe(const std::string& host) const;  // "rank 3 on node2 exited with code 3"
};

struct GroupResult {
  int exit_code = 0;                      // 0, the first failing rank's code, 128+signal, or 130/143 when stopped
  std::optional<RankExit> first_failure;  // the rank that failed first, if any
  bool stopped = false;                   // torn down by a signal or stop_fd, not by a rank failure
};

GroupResult run_rank_group(const std::vector<RankLaunch>& ranks, const SupervisorOptions& options);

}  // namespace dscpp::launcher
