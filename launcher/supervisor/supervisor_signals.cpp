// The supervisor's signal handling: a self-pipe that turns SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGUSR1
// into poll() wake-ups, and the scope that installs it (with SIGPIPE ignored and the subreaper
// flag) and undoes it. Separate because it is process-wide state behind a handler, while the
// rest of the supervisor is ordinary code.
#include "launcher/supervisor/stop_signals.h"
#include "launcher/supervisor/supervisor_internal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

namespace dscpp::launcher::supervisor_internal {

// Shared by SignalScope and StopSignals (never both alive): the handler records the signal and
// wakes the owner's poll() through its pipe.
int g_wake_write_fd = -1;
volatile sig_atomic_t g_pending[NSIG];

extern "C" void on_signal(int sig) {
  int saved = errno;
  g_pending[sig] = 1;
  char byte = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = write(g_wake_write_fd, &byte, 1);
  errno = saved;
}

namespace {

// The self-pipe on_signal writes to, owned by whichever scope is alive.
void open_wake_pipe(int (&fds)[2]) {
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) fail_errno("supervisor: pipe");
  g_wake_write_fd = fds[1];
}

void close_wake_pipe(int (&fds)[2]) {
  g_wake_write_fd = -1;
  close(fds[0]);
  close(fds[1]);
}

// Saves `sig`'s disposition in `old` and routes `sig` to on_signal (SIGPIPE: ignored). An
// ignored SIGINT/SIGHUP stays ignored: `nohup dscpp ...`, `dscpp ... &` in a script.
void catch_signal(int sig, struct sigaction& old) {
  g_pending[sig] = 0;
  sigaction(sig, nullptr, &old);
  if ((sig == SIGINT || sig == SIGHUP) && old.sa_handler == SIG_IGN) return;
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  action.sa_handler = sig == SIGPIPE ? SIG_IGN : on_signal;
  action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  sigaction(sig, &action, nullptr);
}

}  // namespace

SignalScope::SignalScope() {
  open_wake_pipe(wake_);
  for (size_t i = 0; i < std::size(kHandledSignals); ++i) catch_signal(kHandledSignals[i], old_[i]);
  prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper_);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

SignalScope::~SignalScope() {
  prctl(PR_SET_CHILD_SUBREAPER, old_subreaper_);
  for (size_t i = 0; i < std::size(kHandledSignals); ++i) sigaction(kHandledSignals[i], &old_[i], nullptr);
  close_wake_pipe(wake_);
}

void SignalScope::restore_in_child() const {
  for (size_t i = 0; i < std::size(kHandledSignals); ++i) {
    struct sigaction action = old_[i];
    if (action.sa_handler != SIG_IGN || kHandledSignals[i] == SIGPIPE) action.sa_handler = SIG_DFL;
    action.sa_flags &= ~SA_SIGINFO;
    sigaction(kHandledSignals[i], &action, nullptr);
  }
}

void SignalScope::drain() const {
  char buffer[256];
  while (read(wake_[0], buffer, sizeof buffer) > 0) continue;
}

bool SignalScope::take(int sig) {
  return g_pending[sig] ? (g_pending[sig] = 0, true) : false;
}

}  // namespace dscpp::launcher::supervisor_internal

namespace dscpp::launcher {

namespace {
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
struct sigaction g_stop_old[std::size(kStopSignals)];
}  // namespace

using supervisor_internal::fail_errno;

StopSignals::StopSignals() {
  supervisor_internal::open_wake_pipe(wake_);
  for (size_t i = 0; i < std::size(kStopSignals); ++i)
    supervisor_internal::catch_signal(kStopSignals[i], g_stop_old[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_stop_old[i], nullptr);
  supervisor_internal::close_wake_pipe(wake_);
}

int StopSignals::received() const {
  for (int sig : kStopSignals)
    if (supervisor_internal::g_pending[sig]) return sig;
  return 0;
}

}  // namespace dscpp::launcher
