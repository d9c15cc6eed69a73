// One host's ranks as child process groups, watched from a single poll() loop.
//
// Invariants that keep teardown safe and complete:
// - Every rank is the leader of its own process group (pgid == pid). A rank's leader is
//   observed with waitid(WNOWAIT) and only reaped after teardown, so its pid — and therefore
//   its pgid — cannot be reused while we may still killpg() it: we never signal a stranger.
// - This process is a child subreaper while the group runs, so a rank's orphaned descendants
//   (even ones that left the rank's process group) are re-parented to us; they are signalled
//   by pid only while they are our unreaped children, for the same reason.
// - Signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP) reach the loop through a self-pipe: exits are
//   handled as they happen, and nothing polls on a timer except the TERM -> KILL deadline.
// - Between fork and exec the child calls only async-signal-safe functions; everything it
//   needs (argv, envp, PATH candidates, messages) is prepared before fork.
// - Should this process die anyway, a forked watchdog kills the ranks' process groups.
#include "launcher/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

extern char** environ;

namespace dscpp::launcher {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE};
constexpr size_t kMaxPartialLine = 64 * 1024;  // a longer line without '\n' is emitted in pieces
constexpr double kKillWaitSeconds = 5.0;       // after SIGKILL, how long before we stop waiting

int g_wake_write_fd = -1;
volatile sig_atomic_t g_pending[NSIG];
std::atomic<bool> g_running{false};

extern "C" void on_signal(int sig) {
  int saved = errno;
  g_pending[sig] = 1;
  char byte = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = write(g_wake_write_fd, &byte, 1);
  errno = saved;
}

[[noreturn]] void fail_errno(const char* what) {
  fail("{}: {}", what, std::strerror(errno));
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, seconds)));
}

std::string signal_name(int sig) {
  const char* name = sigabbrev_np(sig);
  return name ? name : std::to_string(sig);
}

// Installs the self-pipe handlers, ignores SIGPIPE (a vanished reader of our output must not
// kill the supervisor before it stops the ranks) and becomes a child subreaper; undoes all
// of it on destruction.
class SignalScope {
 public:
  SignalScope() {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) fail_errno("supervisor: pipe");
    g_wake_write_fd = wake_[1];
    for (int sig : kHandledSignals) g_pending[sig] = 0;
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < std::size(kHandledSignals); ++i) {
      int sig = kHandledSignals[i];
      sigaction(sig, nullptr, &old_[i]);
      // An ignored SIGINT/SIGHUP stays ignored: `nohup dscpp ...`, `dscpp ... &` in a script.
      if ((sig == SIGINT || sig == SIGHUP) && old_[i].sa_handler == SIG_IGN) continue;
      action.sa_handler = sig == SIGPIPE ? SIG_IGN : on_signal;
      action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
      sigaction(sig, &action, nullptr);
    }
    prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper_);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~SignalScope() {
    prctl(PR_SET_CHILD_SUBREAPER, old_subreaper_);
    for (size_t i = 0; i < std::size(kHandledSignals); ++i) sigaction(kHandledSignals[i], &old_[i], nullptr);
    g_wake_write_fd = -1;
    close(wake_[0]);
    close(wake_[1]);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  int read_fd() const { return wake_[0]; }
  // In a forked child, before exec: what exec would make of the caller's dispositions — a
  // handler becomes SIG_DFL, an ignored signal stays ignored (but SIGPIPE is always reset, as
  // Python's subprocess does). Never the caller's handler itself: a TERM arriving before exec
  // would run it in the child. Async-signal-safe.
  void restore_in_child() const {
    for (size_t i = 0; i < std::size(kHandledSignals); ++i) {
      struct sigaction action = old_[i];
      if (action.sa_handler != SIG_IGN || kHandledSignals[i] == SIGPIPE) action.sa_handler = SIG_DFL;
      action.sa_flags &= ~SA_SIGINFO;
      sigaction(kHandledSignals[i], &action, nullptr);
    }
  }
  void drain() const {
    char buffer[256];
    while (read(wake_[0], buffer, sizeof buffer) > 0) continue;
  }
  static bool take(int sig) { return g_pending[sig] ? (g_pending[sig] = 0, true) : false; }

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

void build_plan(const RankLaunch& launch, ExecPlan& plan) {
  if (launch.argv.empty() || launch.argv[0].empty()) fail("rank {}: no program to run", launch.rank);
  for (const auto& arg : launch.argv) plan.strings.push_back(arg);
  // Inherited variables, then the rank's own; a key given twice keeps its last value.
  std::map<std::string, std::string> overridden;
  for (const auto& [key, value] : launch.env) overridden[key] = value;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!overridden.count(entry.substr(0, entry.find('=')))) plan.strings.push_back(entry);
  }
  std::set<std::string> seen;
  for (const auto& [key, value] : launch.env)
    if (seen.insert(key).second) plan.strings.push_back(key + "=" + overridden[key]);
  for (size_t i = 0; i < plan.strings.size(); ++i)
    (i < launch.argv.size() ? plan.argv : plan.envp).push_back(plan.strings[i].data());
  plan.argv.push_back(nullptr);
  plan.envp.push_back(nullptr);

  const std::string& program = launch.argv[0];
  if (program.find('/') != std::string::npos) {
    plan.candidates.push_back(program);
  } else {  // execvp's rules: PATH (the rank's own if it sets one), empty element = cwd
    const char* inherited = std::getenv("PATH");
    std::string path = overridden.count("PATH") ? overridden["PATH"] : inherited ? inherited : "/bin:/usr/bin";
    for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
      end = path.find(':', begin);
      std::string dir = path.substr(begin, end - begin);  // end == npos: the rest
      plan.candidates.push_back(dir.empty() ? program : dir + "/" + program);
    }
  }
  plan.cannot_run = "cannot run " + program + ": ";
  CPU_ZERO(&plan.cpus);
  for (int cpu : launch.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) fail("rank {}: core {} is out of range", launch.rank, cpu);
    CPU_SET(cpu, &plan.cpus);
  }
  plan.pin = !launch.cpus.empty();
  plan.cannot_pin = fmt::format("cannot pin rank {} to cores {}: ", launch.rank, fmt::join(launch.cpus, ","));
  if (!launch.log_file.empty()) {
    plan.log_fd = open(launch.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (plan.log_fd < 0)
      fail("cannot open the log file of rank {}, {}: {}", launch.rank, launch.log_file, std::strerror(errno));
  }
}

void child_message(const std::string& prefix, int err) {
  const char* text = strerrordesc_np(err);
  struct iovec parts[3] = {{const_cast<char*>(prefix.data()), prefix.size()},
                           {const_cast<char*>(text), std::strlen(text)},
                           {const_cast<char*>("\n"), 1}};
  [[maybe_unused]] ssize_t n = writev(2, parts, 3);
}

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void exec_child(const ExecPlan& plan, int in_fd, int out_fd, int err_fd, pid_t parent,
                             const SignalScope& signals) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the supervisor died before prctl took effect
  signals.restore_in_child();
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Through fds >= 3 first, so that a source that already is 0, 1 or 2 is not clobbered.
  int in = fcntl(in_fd, F_DUPFD, 3), out = fcntl(out_fd, F_DUPFD, 3), err = fcntl(err_fd, F_DUPFD, 3);
  if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
  for (int fd : {in, out, err}) close(fd);
  if (plan.pin && sched_setaffinity(0, sizeof plan.cpus, &plan.cpus) != 0) {
    child_message(plan.cannot_pin, errno);
    _exit(127);
  }
  int error = ENOENT;
  bool denied = false;
  for (const auto& candidate : plan.candidates) {
    execve(candidate.c_str(), plan.argv.data(), plan.envp.data());
    error = errno;
    if (error == EACCES)
      denied = true;
    else if (error != ENOENT && error != ENOTDIR)
      break;
  }
  if (denied && (error == ENOENT || error == ENOTDIR)) error = EACCES;
  child_message(plan.cannot_run, error);
  _exit(127);
}

// fork() with every signal blocked, so that the child runs none of our handlers before it set
// up its own; the parent's mask comes back, the child's stays blocked.
pid_t fork_blocked() {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  int error = errno;
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = error;
  return pid;
}

// For the one failure the supervisor cannot handle itself, its own death (crash, SIGKILL):
// PR_SET_PDEATHSIG kills the rank leaders but not their children. This helper, forked once the
// ranks run, waits on a pipe: EOF without the "done" byte means the supervisor died, and it
// SIGKILLs every rank's process group. Only async-signal-safe calls in the helper.
class Watchdog {
 public:
  explicit Watchdog(const std::vector<pid_t>& groups) {
    int fds[2];
    if (groups.empty() || pipe2(fds, O_CLOEXEC) != 0) return;  // no helper: no protection
    pid_ = fork_blocked();
    if (pid_ == 0) watch(fds[0], groups);
    close(fds[0]);
    if (pid_ > 0)
      fd_ = fds[1];
    else
      close(fds[1]);
  }
  // Unwinding from an exception counts as dying: the helper kills the groups.
  ~Watchdog() {
    if (fd_ < 0) return;
    if (std::uncaught_exceptions() == 0) {
      [[maybe_unused]] ssize_t n = write(fd_, "d", 1);
    }
    close(fd_);
    waitpid(pid_, nullptr, 0);
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  pid_t pid() const { return pid_; }

 private:
  [[noreturn]] static void watch(int fd, const std::vector<pid_t>& groups) {
    setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C is for the supervisor
    struct sigaction action {};
    action.sa_handler = SIG_IGN;  // it leaves when the pipe closes, not on a stray signal
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaction(sig, &action, nullptr);
    if (fd > 0) close_range(0, fd - 1, 0);
    close_range(fd + 1, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    char byte;
    ssize_t n;
    while ((n = read(fd, &byte, 1)) < 0 && errno == EINTR) continue;
    if (n != 1)  // the supervisor died before saying "done"
      for (pid_t group : groups) killpg(group, SIGKILL);
    _exit(0);
  }
  int fd_ = -1;
  pid_t pid_ = -1;
};

struct Stream {
  int fd = -1;  // read end of the rank's pipe, -1 once closed
  std::string partial;
};

struct Rank {
  const RankLaunch* launch = nullptr;
  pid_t pid = -1;  // also its process group id; -1 if it never started
  bool exited = false;
  RankExit exit;
  Stream out, err;
};

struct ProcessInfo {
  pid_t pid = 0, ppid = 0, pgrp = 0;
  char state = '?';
};

std::vector<ProcessInfo> scan_processes() {
  std::vector<ProcessInfo> result;
  DIR* dir = opendir("/proc");
  if (!dir) return result;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char path[300], buffer[512];
    std::snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) continue;
    buffer[n] = '\0';
    const char* name_end = std::strrchr(buffer, ')');  // the command name may itself contain ')'
    ProcessInfo info;
    if (name_end && std::sscanf(name_end + 1, " %c %d %d", &info.state, &info.ppid, &info.pgrp) == 3) {
      info.pid = std::atoi(buffer);
      result.push_back(info);
    }
  }
  closedir(dir);
  return result;
}

class Supervisor {
 public:
  Supervisor(const std::vector<RankLaunch>& launches, const SupervisorOptions& options, const SignalScope& signals)
      : options_(options), signals_(signals), ranks_(launches.size()) {
    for (size_t i = 0; i < launches.size(); ++i) ranks_[i].launch = &launches[i];
  }
  GroupResult run(std::vector<ExecPlan>& plans);
  ~Supervisor() {
    for (const Rank& rank : ranks_)
      for (int fd : {rank.out.fd, rank.err.fd})
        if (fd >= 0) close(fd);
  }

 private:
  enum class Phase { running, terminating, killing };

  void start(Rank& rank, ExecPlan& plan, int null_fd);
  void loop();
  void emit(const Rank& rank, Stream& stream, bool is_err, bool closing);
  void relay(Rank& rank, Stream& stream, bool is_err, bool drain);
  void write_out(int fd, const std::string& text);
  void message(const std::string& text) { write_out(options_.err_fd, "dscpp: " + text + "\n"); }
  void check_ranks();
  void on_rank_exit(Rank& rank);
  void stop(int code, const std::string& why);
  void teardown(Phase phase);
  int phase_signal() const { return phase_ == Phase::killing ? SIGKILL : phase_ == Phase::terminating ? SIGTERM : 0; }
  void signal_groups(int sig);
  std::vector<pid_t> leftovers(int sig);
  std::vector<const Rank*> alive() const;
  std::string on_host() const { return options_.host.empty() ? "" : " on " + options_.host; }

  const SupervisorOptions& options_;
  const SignalScope& signals_;
  std::vector<Rank> ranks_;
  GroupResult result_;
  Phase phase_ = Phase::running;
  Clock::time_point deadline_{};
  std::set<pid_t> termed_;  // leftover processes already sent SIGTERM
  bool out_broken_ = false, err_broken_ = false;
  pid_t self_ = getpid();
  std::optional<Watchdog> watchdog_;  // started once the ranks are, told "done" last
};

void Supervisor::write_out(int fd, const std::string& text) {
  bool& broken = fd == options_.err_fd ? err_broken_ : out_broken_;
  size_t done = 0;
  while (!broken && done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
    } else if (n < 0 && errno != EINTR) {
      broken = true;  // our reader is gone: keep supervising, drop the output
    }
  }
}

// Writes every complete line of `stream.partial` (every line at all when `closing`, the last
// one given a newline), prefixed, in one write(): lines of different ranks never interleave.
// Closing also closes the pipe.
void Supervisor::emit(const Rank& rank, Stream& stream, bool is_err, bool closing) {
  std::string lines;
  size_t begin = 0;
  while (begin < stream.partial.size()) {
    size_t end = stream.partial.find('\n', begin), next = end + 1;
    if (end == std::string::npos) {
      if (stream.partial.size() - begin >= kMaxPartialLine)
        end = next = begin + kMaxPartialLine;
      else if (closing)
        end = next = stream.partial.size();
      else
        break;
    }
    if (!rank.launch->label.empty()) lines.append(rank.launch->label).push_back(' ');
    lines.append(stream.partial, begin, end - begin).push_back('\n');
    begin = next;
  }
  stream.partial.erase(0, begin);
  write_out(is_err ? options_.err_fd : options_.out_fd, lines);
  if (closing) close(stream.fd), stream.fd = -1;
}

// Reads what the pipe holds now and relays it: one read, or when `drain` until EAGAIN but at
// most 1 MiB (a full pipe, unless root enlarged it), so that a leftover process writing without
// pause cannot keep the loop from everything else.
void Supervisor::relay(Rank& rank, Stream& stream, bool is_err, bool drain) {
  char buffer[65536];
  for (int reads = drain ? 16 : 1; reads > 0 && stream.fd >= 0; --reads) {
    ssize_t n = read(stream.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0 && errno == EINTR && ++reads) continue;
    if (n > 0) stream.partial.append(buffer, static_cast<size_t>(n));
    emit(rank, stream, is_err, n <= 0);
  }
}

void Supervisor::start(Rank& rank, ExecPlan& plan, int null_fd) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  const char* failed = nullptr;
  if (plan.log_fd < 0 && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) failed = "pipe";
  pid_t pid = -1;
  int error = errno;
  if (!failed) {
    pid = fork_blocked();
    if (pid == 0) {
      int out_fd = plan.log_fd >= 0 ? plan.log_fd : out[1], err_fd = plan.log_fd >= 0 ? plan.log_fd : err[1];
      exec_child(plan, null_fd, out_fd, err_fd, self_, signals_);
    }
    error = errno;
    if (pid < 0) failed = "fork";
  }
  for (int fd : {out[1], err[1], std::exchange(plan.log_fd, -1)})
    if (fd >= 0) close(fd);
  if (failed) {
    for (int fd : {out[0], err[0]})
      if (fd >= 0) close(fd);
    message(fmt::format("cannot start rank {}{}: {}: {}", rank.launch->rank, on_host(), failed, std::strerror(error)));
    rank.exited = true;
    rank.exit = {rank.launch->rank, 127, 0};
    return;
  }
  setpgid(pid, pid);  // the child does it too: whichever runs first, killpg works from here on
  rank.pid = pid;
  for (int fd : {rank.out.fd = out[0], rank.err.fd = err[0]})
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::vector<const Rank*> Supervisor::alive() const {
  std::vector<const Rank*> result;
  for (const Rank& rank : ranks_)
    if (!rank.exited) result.push_back(&rank);
  return result;
}

// Rank leaders that exited stay unreaped zombies (see the invariants at the top).
void Supervisor::check_ranks() {
  for (Rank& rank : ranks_) {
    if (rank.exited || rank.pid < 0) continue;
    siginfo_t info{};
    if (waitid(P_PID, rank.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != rank.pid) continue;
    rank.exited = true;
    rank.exit.rank = rank.launch->rank;
    (info.si_code == CLD_EXITED ? rank.exit.exit_code : rank.exit.signal) = info.si_status;
    on_rank_exit(rank);
  }
}

void Supervisor::on_rank_exit(Rank& rank) {
  // Its last words come before our verdict.
  if (rank.out.fd >= 0) relay(rank, rank.out, false, true);
  if (rank.err.fd >= 0) relay(rank, rank.err, true, true);
  const RankExit& exit = rank.exit;
  if (phase_ != Phase::running || (exit.exit_code == 0 && exit.signal == 0)) return;
  result_.first_failure = exit;
  result_.exit_code = exit.signal != 0 ? 128 + exit.signal : exit.exit_code;
  message(exit.describe(options_.host) + (alive().empty() ? "" : "; stopping the other ranks"));
  teardown(Phase::terminating);
}

void Supervisor::stop(int code, const std::string& why) {
  if (phase_ == Phase::running) {
    result_.stopped = true;
    result_.exit_code = code;
    size_t n = alive().size();
    message(why + (n == 0 ? "" : fmt::format("; stopping {} rank{}{}", n, n == 1 ? "" : "s", on_host())));
    teardown(Phase::terminating);
  } else if (phase_ == Phase::terminating) {
    message(why + " while stopping; sending SIGKILL now");
    teardown(Phase::killing);
  }
}

void Supervisor::signal_groups(int sig) {
  for (const Rank& rank : ranks_)
    if (rank.pid > 0) killpg(rank.pid, sig);  // ESRCH = the group is already empty
}

// Signals every rank's process group and the orphans outside them: SIGTERM (with SIGCONT,
// as a stopped process handles TERM only once it runs) until the grace period ends, then SIGKILL.
void Supervisor::teardown(Phase phase) {
  phase_ = phase;
  signal_groups(phase_signal());
  if (phase == Phase::terminating) signal_groups(SIGCONT);
  deadline_ = after(phase == Phase::killing ? kKillWaitSeconds : options_.grace_seconds);
  leftovers(phase_signal());
}

// The processes of the job other than rank leaders: members of the ranks' process groups and
// our re-parented orphans. Reaps the orphans that are zombies; sends `sig` (0 = none) to the
// orphans outside the ranks' groups, which killpg does not reach.
std::vector<pid_t> Supervisor::leftovers(int sig) {
  std::set<pid_t> leaders;
  for (const Rank& rank : ranks_)
    if (rank.pid > 0) leaders.insert(rank.pid);
  std::vector<pid_t> result;
  for (const ProcessInfo& p : scan_processes()) {
    bool ours = p.ppid == self_, in_group = leaders.count(p.pgrp) > 0;
    if (leaders.count(p.pid) || (watchdog_ && p.pid == watchdog_->pid()) || (!ours && !in_group)) continue;
    if (p.state == 'Z' && ours) {
      waitpid(p.pid, nullptr, WNOHANG);
      continue;
    }
    result.push_back(p.pid);
    if (sig == 0 || !ours || in_group || p.state == 'Z') continue;
    if (sig == SIGKILL || termed_.insert(p.pid).second) kill(p.pid, sig);
  }
  return result;
}

void Supervisor::loop() {
  while (true) {
    if (alive().empty()) {
      std::vector<pid_t> rest = leftovers(phase_signal());
      if (rest.empty()) return;
      if (phase_ == Phase::running) {
        message(fmt::format("every rank{} has exited; stopping the {} process{} they left running", on_host(),
                            rest.size(), rest.size() == 1 ? "" : "es"));
        teardown(Phase::terminating);
      }
    }
    std::vector<pollfd> fds{{signals_.read_fd(), POLLIN, 0}};
    bool watch_stop = options_.stop_fd >= 0 && phase_ == Phase::running;
    if (watch_stop) fds.push_back({options_.stop_fd, POLLIN, 0});
    std::vector<std::pair<Rank*, bool>> streams;  // (rank, is_err), parallel to fds after the first ones
    size_t first_stream = fds.size();
    for (Rank& rank : ranks_) {
      if (rank.out.fd >= 0) fds.push_back({rank.out.fd, POLLIN, 0}), streams.emplace_back(&rank, false);
      if (rank.err.fd >= 0) fds.push_back({rank.err.fd, POLLIN, 0}), streams.emplace_back(&rank, true);
    }
    int timeout = -1;
    if (phase_ != Phase::running) {
      auto left = std::chrono::duration<double, std::milli>(deadline_ - Clock::now()).count();
      timeout = static_cast<int>(std::clamp(std::ceil(left), 0.0, 1e9));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) fail_errno("supervisor: poll");

    for (size_t i = 0; i < streams.size(); ++i) {
      auto [rank, is_err] = streams[i];
      Stream& stream = is_err ? rank->err : rank->out;
      if (fds[first_stream + i].revents != 0 && stream.fd >= 0) relay(*rank, stream, is_err, false);
    }
    signals_.drain();
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      if (SignalScope::take(sig)) stop(128 + sig, "received SIG" + signal_name(sig));
    if (watch_stop && fds[1].revents != 0) stop(143, options_.stop_fd_name + " readable or closed");
    if (SignalScope::take(SIGCHLD)) {
      check_ranks();
      if (phase_ != Phase::running) leftovers(phase_signal());
    }
    if (phase_ != Phase::running && Clock::now() >= deadline_) {
      if (phase_ == Phase::terminating) {
        std::vector<std::string> names;
        for (const Rank* rank : alive()) names.push_back(std::to_string(rank->launch->rank));
        message(fmt::format("{}{}{} still running {:g} s after SIGTERM; sending SIGKILL",
                            names.empty()       ? "processes left by the ranks"
                            : names.size() == 1 ? "rank "
                                                : "ranks ",
                            fmt::join(names, ", "), on_host(), options_.grace_seconds));
        teardown(Phase::killing);
      } else {
        message(
            fmt::format("processes {} did not exit {:g} s after SIGKILL (uninterruptible sleep in a driver?); "
                        "giving up on them",
                        fmt::join(leftovers(0), ", "), kKillWaitSeconds));
        return;
      }
    }
  }
}

GroupResult Supervisor::run(std::vector<ExecPlan>& plans) {
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) fail_errno("supervisor: /dev/null");
  for (size_t i = 0; i < ranks_.size(); ++i) start(ranks_[i], plans[i], null_fd);
  close(null_fd);
  std::vector<pid_t> groups;
  for (const Rank& rank : ranks_)
    if (rank.pid > 0) groups.push_back(rank.pid);
  watchdog_.emplace(groups);
  for (Rank& rank : ranks_)
    if (rank.exited) on_rank_exit(rank);  // could not start: a failure like any other
  loop();
  for (Rank& rank : ranks_) {
    for (bool is_err : {false, true}) {  // what is left, even if a process beyond reach holds the pipe
      Stream& stream = is_err ? rank.err : rank.out;
      if (stream.fd >= 0) relay(rank, stream, is_err, true);
      if (stream.fd >= 0) emit(rank, stream, is_err, true);
    }
    if (rank.pid > 0) waitpid(rank.pid, nullptr, rank.exited ? 0 : WNOHANG);
  }
  leftovers(0);  // reaps the last orphan zombies
  return result_;
}

}  // namespace

GroupResult run_rank_group(const std::vector<RankLaunch>& ranks, const SupervisorOptions& options) {
  if (g_running.exchange(true)) fail("run_rank_group: already running in this process (one group at a time)");
  struct Release {
    ~Release() { g_running = false; }
  } release;
  std::vector<ExecPlan> plans(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) build_plan(ranks[i], plans[i]);
  SignalScope signals;
  return Supervisor(ranks, options, signals).run(plans);
}

std::string RankExit::describe(const std::string& host) const {
  // rank < 0: a backend (mpirun, srun) run for its ranks; `host` then names it.
  std::string who = rank < 0       ? host
                    : host.empty() ? fmt::format("rank {}", rank)
                                   : fmt::format("rank {} on {}", rank, host);
  if (signal != 0) return who + " killed by signal " + signal_name(signal);
  return fmt::format("{} exited with code {}", who, exit_code);
}

}  // namespace dscpp::launcher
