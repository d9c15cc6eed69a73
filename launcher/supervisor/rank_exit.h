// How a rank ended, how that travels to the launcher, and which rank a job blames.
//
// A launcher that does not run the ranks itself (over ssh, mpirun or srun) learns of them from
// the supervisor that does (a node agent or a rank shim): that supervisor writes one report line
// per rank exit on its stderr, which reaches the launcher through the same stream as the ranks'
// output, and the launcher takes the line out of that stream. Every rank output line on that
// stream carries the "[rank R]" prefix, so a line that starts with the report's marker can only
// be the supervisor's own.
//
// Blame is the rule every level applies to the exits it sees, so that a job ends naming the rank
// that failed on its own: a rank that exits with kExitPeerFailed stopped because another failed
// (its communicator saw the peer go), so it is blamed only if no rank fails on its own within
// the bystander wait (or no rank is left that could). A rank its supervisor stopped (a signal to
// that supervisor from outside the job: scancel of one step, a batch system's warning signal) is
// blamed last: only when no rank failed at all and none is left.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace dscpp::launcher {

struct RankExit {
  int rank = 0;          // < 0: not a rank but a backend (mpirun, srun) run for its ranks
  std::string host;      // where it ran; "" when there is one host only
  int exit_code = 0;     // valid when signal == 0
  int signal = 0;        // killed by this signal
  bool stopped = false;  // its supervisor was stopping it (a failure elsewhere, a stop request)

  bool failed() const { return exit_code != 0 || signal != 0; }
  // The job's exit status for this exit: the code, or 128+N for signal N (what a shell shows).
  int status() const { return signal != 0 ? 128 + signal : exit_code; }
  // "rank 3 on node2 exited with code 3", "rank 1 killed by signal KILL", "srun exited with code 1"
  std::string describe() const;
};

// "TERM", "KILL", ...: a signal's name without "SIG" (its number when it has none).
std::string signal_name(int sig);

// The report line for `exit` (ends in '\n'): "dscpp-rank-exit rank=R code=C signal=S stopped=0|1 host=H".
std::string exit_report_line(const RankExit& exit);
// The exit a report line carries (with or without its '\n', after a tag mpirun --tag-output or
// srun --label may add); nullopt for any other line.
std::optional<RankExit> parse_exit_report(std::string_view line);

class Blame {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kBystanderWaitSeconds = 3.0;

  struct Verdict {
    RankExit exit;
    std::string note;  // why this one, when a bystander was seen: " (rank 0 had stopped because ...)"
    std::string describe() const { return exit.describe() + note; }
  };

  explicit Blame(double bystander_seconds = kBystanderWaitSeconds) : wait_seconds_(bystander_seconds) {}

  // One exit, in the order they were seen. Returns the verdict when this exit decides it: the
  // first failure of its own. Exits after the verdict, stopped ones and successes decide nothing
  // here (a stopped one may be due() at the end).
  std::optional<Verdict> exited(const RankExit& exit, Clock::time_point now = Clock::now());
  // The bystander's verdict once its wait is over, or at once when `nothing_left` (no rank is
  // left that could still fail on its own); with no bystander and nothing left, the first rank
  // that was stopped.
  std::optional<Verdict> due(bool nothing_left, Clock::time_point now = Clock::now());
  // When due() will decide, while a bystander waits; nullopt otherwise.
  std::optional<Clock::time_point> deadline() const;
  bool decided() const { return decided_; }

 private:
  double wait_seconds_;
  bool decided_ = false;
  std::optional<RankExit> bystander_;
  std::optional<RankExit> first_stopped_;
  Clock::time_point bystander_deadline_{};
};

}  // namespace dscpp::launcher
