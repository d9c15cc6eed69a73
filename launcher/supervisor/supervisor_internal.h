// What the supervisor's files share, private to launcher/supervisor/: the signal scope (its
// pipe wakes the loop; a forked child restores the caller's dispositions through it) and the
// fork side (a rank's exec plan, the child up to exec, the death watchdog), declared here
// because supervisor.cpp drives them from another file.
#pragma once

#include "core/error.h"
#include "launcher/supervisor/supervisor.h"

#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace dscpp::launcher::supervisor_internal {

inline constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE};

// The handler both signal scopes install, and what it writes to (supervisor_signals.cpp).
extern int g_wake_write_fd;
extern volatile sig_atomic_t g_pending[NSIG];
extern "C" void on_signal(int sig);

[[noreturn]] inline void fail_errno(const char* what) {
  fail("{}: {}", what, std::strerror(errno));
}

// Installs the self-pipe handlers, ignores SIGPIPE (a vanished reader of our output must not
// kill the supervisor before it stops the ranks) and becomes a child subreaper; undoes all
// of it on destruction.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  int read_fd() const { return wake_[0]; }
  // In a forked child, before exec: what exec would make of the caller's dispositions — a
  // handler becomes SIG_DFL, an ignored signal stays ignored (but SIGPIPE is always reset, as
  // Python's subprocess does). Never the caller's handler itself: a TERM arriving before exec
  // would run it in the child. Async-signal-safe.
  void restore_in_child() const;
  void drain() const;
  static bool take(int sig);

 private:
  int wake_[2] = {-1, -1};
  struct sigaction old_[std::size(kHandledSignals)]{};
  int old_subreaper_ = 0;
};

// Everything a forked child needs, built before fork.
struct ExecPlan {
  std::vector<std::string> strings;  // owns what the pointers below point into
  std::vector<char*> argv, envp;
  std::vector<std::string> candidates;  // full paths to try in order
  std::string cannot_run;               // "cannot run PROGRAM: "
  std::string cannot_pin;               // "cannot pin to cores ...: "
  cpu_set_t cpus;
  bool pin = false;
  int log_fd = -1;  // owned until the rank is started
  ExecPlan() = default;
  ExecPlan(const ExecPlan&) = delete;
  ExecPlan& operator=(const ExecPlan&) = delete;
  ~ExecPlan() {
    if (log_fd >= 0) close(log_fd);
  }
};

void build_plan(const RankLaunch& launch, ExecPlan& plan);

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void exec_child(const ExecPlan& plan, int in_fd, int out_fd, int err_fd, pid_t parent,
                             const SignalScope& signals);

// fork() with every signal blocked, so that the child runs none of our handlers before it set
// up its own; the parent's mask comes back, the child's stays blocked.
pid_t fork_blocked();

// For the one failure the supervisor cannot handle itself, its own death (crash, SIGKILL):
// PR_SET_PDEATHSIG kills the rank leaders but not their children. This helper, forked once the
// ranks run, waits on a pipe: EOF without the "done" byte means the supervisor died, and it
// SIGKILLs every rank's process group. Only async-signal-safe calls in the helper.
class Watchdog {
 public:
  explicit Watchdog(const std::vector<pid_t>& groups);
  // Unwinding from an exception counts as dying: the helper kills the groups.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  pid_t pid() const { return pid_; }

 private:
  [[noreturn]] static void watch(int fd, const std::vector<pid_t>& groups);
  int fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace dscpp::launcher::supervisor_internal
