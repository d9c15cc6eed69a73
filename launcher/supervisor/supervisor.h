// Running one host's ranks as child processes and watching them: output prefixed per line,
// the first failure stops the others (TERM, then KILL after a grace period), a stop request
// (signal or stop_fd) tears everything down, and nothing outlives the supervisor.
#pragma once

#include "launcher/launch_plan.h"
#include "launcher/supervisor/rank_exit.h"

#include <optional>
#include <string>
#include <vector>

namespace dscpp::launcher {

struct RankLaunch {
  int rank = 0;                   // < 0: not a rank but a backend (mpirun, srun); messages use options.host
  std::string label;              // output prefix, e.g. "[rank 3]" or "[rank 3 node2]"
  std::vector<std::string> argv;  // argv[0] is looked up in PATH if it has no '/'
  EnvList env;                    // set on top of the supervisor's own environment
  std::string log_file;           // non-empty: stdout+stderr go here, not to the console
  std::vector<int> cpus;          // non-empty: the rank is pinned to these cores
  // > 0: this child supervises that many ranks elsewhere (mpirun or srun running rank shims)
  // and its stderr carries their exit reports (rank_exit.h). Those reports decide the blame;
  // the child's own exit counts as a failure only when some of its ranks never reported.
  int reported_ranks = 0;
  // How a stop reaches this child first. SIGTERM to mpirun or srun kills their tasks at once
  // (srun sends SIGKILL), leaving the ranks no grace and the shims no time to report; instead
  // srun gets EOF on its stdin, which it hands to every task, and mpirun gets SIGUSR1, which it
  // forwards to every task. The shims stop their ranks as the supervisor does. SIGTERM follows
  // only if the child is still running 2 grace periods (+2 s) later.
  enum class Stop { terminate, close_stdin, usr1 };
  Stop stop = Stop::terminate;
};

struct SupervisorOptions {
  double grace_seconds = 5.0;  // TERM -> KILL
  int stop_fd = -1;            // readable or EOF = stop everything (a node agent's stdin)
  int out_fd = 1;              // where prefixed stdout lines go
  int err_fd = 2;              // where prefixed stderr lines and supervisor messages go
  std::string host;            // named in failure messages
  std::string stop_fd_name = "stop_fd";  // what stop_fd is, for the message when it fires
  // This supervisor runs ranks for a launcher elsewhere (a node agent over ssh, a rank shim under
  // mpirun/srun): each rank exit is written to err_fd as a report line, and the verdicts and
  // stop messages the launcher prints itself are left out.
  bool report_exits = false;
  // SIGUSR1 is a stop request (mpirun forwards dscpp's to every rank shim). Off for a shim under
  // srun, where SLURM signals every process of the step and a USR1 (a time-limit warning, say)
  // is the rank's to handle, not a reason to stop it.
  bool usr1_stops = true;
};

struct GroupResult {
  int exit_code = 0;                      // 0, the blamed rank's status(), or 128+N when stopped by signal N
  std::optional<RankExit> first_failure;  // the rank blamed (Blame's rule), if any
  std::string failure;                    // its description with Blame's note, when first_failure is set
  bool stopped = false;                   // torn down by a signal or stop_fd, not by a rank failure
};

// Starts every rank and supervises them until all have exited and none of their processes is
// left. Contract details:
// - Each rank leads its own process group (its children die with it), gets
//   PR_SET_PDEATHSIG(SIGKILL) and stdin = /dev/null; it inherits this process's environment
//   plus `env` (a key given twice keeps its last value). An exec failure prints
//   "cannot run PROGRAM: REASON" on the rank's stderr and counts as exit code 127.
// - This process is a child subreaper while the group runs: descendants that leave a rank's
//   process group (setsid daemons) are still found, signalled and reaped.
// - The first rank to exit non-zero or by a signal (Blame's rule: one that exits with
//   kExitPeerFailed is blamed only if no other fails on its own within 3 s): "dscpp: rank R on
//   HOST exited with code C; stopping the other ranks" on err_fd, SIGTERM (+SIGCONT) to every
//   rank's group (RankLaunch::stop says what a backend gets first), SIGKILL after
//   grace_seconds. SIGINT/SIGTERM/SIGHUP/SIGUSR1 (exit code 128+N) or stop_fd do the same with
//   stopped = true; a second request during the grace period escalates at once. A SIGINT or
//   SIGHUP that was ignored when the call began stays ignored (nohup, `&` in scripts).
// - When every rank exited 0 but left processes running, those are stopped the same way and
//   the result stays 0. Processes that survive SIGKILL for 5 s are named and abandoned.
// - Signal handlers, the signal mask and the subreaper flag are restored on return; SIGPIPE
//   is ignored meanwhile (a closed out_fd just drops output). One call at a time per process
//   (a second concurrent call throws). Throws dscpp::Error before starting anything for an
//   empty argv, an out-of-range core or an unopenable log file.
// - Not covered: a rank's grandchildren survive a SIGKILL of the supervisor itself (only the
//   rank leaders have PDEATHSIG); output is relayed by this thread, so a consumer that stops
//   reading out_fd/err_fd also stalls supervision.
GroupResult run_rank_group(const std::vector<RankLaunch>& ranks, const SupervisorOptions& options);

}  // namespace dscpp::launcher
