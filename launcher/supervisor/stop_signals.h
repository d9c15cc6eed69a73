// SIGINT, SIGTERM, SIGHUP and SIGUSR1 as a readable file descriptor, for a launcher whose
// ranks are not its children (the ssh runner supervises sessions, not processes): while a
// StopSignals lives they no longer kill this process, so it can stop every host, say why and
// exit with 128+N. As in run_rank_group, a SIGINT or SIGHUP that was ignored stays ignored.
// Not at the same time as run_rank_group in one process (both own these signals).
#pragma once

namespace dscpp::launcher {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int fd() const { return wake_[0]; }  // readable once one of the signals arrived
  int received() const;                // the first signal that arrived, 0 while none did

 private:
  int wake_[2] = {-1, -1};
};

}  // namespace dscpp::launcher
