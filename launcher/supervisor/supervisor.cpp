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
//
// This file holds the Supervisor (starting ranks, relaying their output, noticing exits,
// stopping and reaping); signal handling is in supervisor_signals.cpp, and everything that runs
// after fork() in supervisor_fork.cpp (supervisor_internal.h).
#include "launcher/supervisor/supervisor.h"

#include "core/error.h"
#include "launcher/supervisor/supervisor_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

namespace dscpp::launcher {

using supervisor_internal::build_plan;
using supervisor_internal::exec_child;
using supervisor_internal::ExecPlan;
using supervisor_internal::fail_errno;
using supervisor_internal::fork_blocked;
using supervisor_internal::SignalScope;
using supervisor_internal::Watchdog;

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxPartialLine = 64 * 1024;  // a longer line without '\n' is emitted in pieces
constexpr double kKillWaitSeconds = 5.0;  // after SIGKILL, how long before we stop waiting
constexpr double kAskMarginSeconds = 2.0;  // beyond 2 grace periods, for a backend's shims to stop their ranks

std::atomic<bool> g_running{false};

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, seconds)));
}

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
  int stdin_fd = -1;  // write end of its stdin (RankLaunch::Stop::close_stdin), -1 once closed
  int reports = 0;    // exit reports read from its stderr
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
      for (int fd : {rank.out.fd, rank.err.fd, rank.stdin_fd})
        if (fd >= 0) close(fd);
  }

 private:
  // asking: only backends with a gentler stop (RankLaunch::stop) have been asked to stop.
  enum class Phase { running, asking, terminating, killing };

  void start(Rank& rank, ExecPlan& plan, int null_fd);
  void loop();
  void emit(Rank& rank, Stream& stream, bool is_err, bool closing);
  void relay(Rank& rank, Stream& stream, bool is_err, bool drain);
  void write_out(int fd, const std::string& text);
  void message(const std::string& text) { write_out(options_.err_fd, "dscpp: " + text + "\n"); }
  void check_ranks();
  void on_rank_exit(Rank& rank);
  void on_report(Rank& rank, const RankExit& exit);
  void declare_failure(const Blame::Verdict& verdict);
  void stop(int code, const std::string& why, bool requested_by_launcher);
  void begin_stop();
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
  Blame blame_;
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
void Supervisor::emit(Rank& rank, Stream& stream, bool is_err, bool closing) {
  std::string lines;
  std::vector<RankExit> reports;  // handled after this batch is written: its lines came first
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
    std::string_view line(stream.partial.data() + begin, end - begin);
    std::optional<RankExit> report;
    if (is_err && rank.launch->reported_ranks > 0 && (report = parse_exit_report(line))) {
      reports.push_back(*report);
    } else {
      if (!rank.launch->label.empty()) lines.append(rank.launch->label).push_back(' ');
      lines.append(line).push_back('\n');
    }
    begin = next;
  }
  stream.partial.erase(0, begin);
  write_out(is_err ? options_.err_fd : options_.out_fd, lines);
  if (closing) close(stream.fd), stream.fd = -1;
  for (const RankExit& exit : reports) on_report(rank, exit);
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
  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1};
  const char* failed = nullptr;
  if (plan.log_fd < 0 && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) failed = "pipe";
  if (!failed && rank.launch->stop == RankLaunch::Stop::close_stdin && pipe2(in, O_CLOEXEC) != 0) failed = "pipe";
  pid_t pid = -1;
  int error = errno;
  if (!failed) {
    pid = fork_blocked();
    if (pid == 0) {
      int out_fd = plan.log_fd >= 0 ? plan.log_fd : out[1], err_fd = plan.log_fd >= 0 ? plan.log_fd : err[1];
      exec_child(plan, in[0] >= 0 ? in[0] : null_fd, out_fd, err_fd, self_, signals_);
    }
    error = errno;
    if (pid < 0) failed = "fork";
  }
  for (int fd : {out[1], err[1], in[0], std::exchange(plan.log_fd, -1)})
    if (fd >= 0) close(fd);
  if (failed) {
    for (int fd : {out[0], err[0], in[1]})
      if (fd >= 0) close(fd);
    message(fmt::format("cannot start rank {}{}: {}: {}", rank.launch->rank, on_host(), failed, std::strerror(error)));
    rank.exited = true;
    rank.exit = {rank.launch->rank, options_.host, 127, 0};
    return;
  }
  setpgid(pid, pid);  // the child does it too: whichever runs first, killpg works from here on
  rank.pid = pid;
  rank.stdin_fd = in[1];
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
    rank.exit.host = options_.host;
    rank.exit.stopped = phase_ != Phase::running;
    (info.si_code == CLD_EXITED ? rank.exit.exit_code : rank.exit.signal) = info.si_status;
    on_rank_exit(rank);
  }
}

void Supervisor::on_rank_exit(Rank& rank) {
  // Its last words (and a backend's last reports) come before our verdict.
  if (rank.out.fd >= 0) relay(rank, rank.out, false, true);
  if (rank.err.fd >= 0) relay(rank, rank.err, true, true);
  const RankExit& exit = rank.exit;
  if (options_.report_exits && exit.rank >= 0) write_out(options_.err_fd, exit_report_line(exit));
  // A backend whose ranks all reported said everything through them: its own code (srun's is
  // the highest of its tasks') would only blame the wrong one.
  const int reported = rank.launch->reported_ranks;
  if (reported > 0 && rank.reports >= reported) return;
  if (phase_ != Phase::running) return;
  // One whose ranks did not all report failed itself, whatever its code: mpirun exits 0 even
  // when a rank failed, once it no longer aborts on it.
  if (reported > 0 && !exit.failed() && !blame_.decided())
    return declare_failure({exit, fmt::format(" when only {} of its {} ranks had reported their exit (is its "
                                              "stderr redirected by --launcher_args?)",
                                              rank.reports, reported)});
  if (auto verdict = blame_.exited(exit)) declare_failure(*verdict);
}

void Supervisor::on_report(Rank& rank, const RankExit& exit) {
  ++rank.reports;
  if (phase_ != Phase::running) return;
  if (auto verdict = blame_.exited(exit)) declare_failure(*verdict);
}

void Supervisor::declare_failure(const Blame::Verdict& verdict) {
  result_.first_failure = verdict.exit;
  result_.failure = verdict.describe();
  result_.exit_code = std::max(verdict.exit.status(), 1);  // a backend that lost its ranks may exit 0
  if (!options_.report_exits) message(result_.failure + (alive().empty() ? "" : "; stopping the other ranks"));
  begin_stop();
}

// `requested_by_launcher`: the stop came from whoever reads our reports (stop_fd, SIGUSR1),
// which says why itself.
void Supervisor::stop(int code, const std::string& why, bool requested_by_launcher) {
  const bool quiet = options_.report_exits && requested_by_launcher;
  if (phase_ == Phase::running) {
    result_.stopped = true;
    result_.exit_code = code;
    size_t n = alive().size();
    if (!quiet) message(why + (n == 0 ? "" : fmt::format("; stopping {} rank{}{}", n, n == 1 ? "" : "s", on_host())));
    begin_stop();
  } else if (phase_ == Phase::asking) {
    message(why + " while stopping; sending SIGTERM now");
    teardown(Phase::terminating);
  } else if (phase_ == Phase::terminating) {
    message(why + " while stopping; sending SIGKILL now");
    teardown(Phase::killing);
  }
}

// Backends with a gentler stop are asked first (their shims stop the ranks with the grace
// period of their own); everything else is terminated at once.
void Supervisor::begin_stop() {
  bool asked = false;
  for (Rank& rank : ranks_) {
    if (rank.exited || rank.pid <= 0) continue;
    if (rank.launch->stop == RankLaunch::Stop::close_stdin && rank.stdin_fd >= 0) {
      close(rank.stdin_fd);
      rank.stdin_fd = -1;
      asked = true;
    } else if (rank.launch->stop == RankLaunch::Stop::usr1) {
      kill(rank.pid, SIGUSR1);
      asked = true;
    } else {
      killpg(rank.pid, SIGTERM);
      killpg(rank.pid, SIGCONT);
    }
  }
  if (!asked) return teardown(Phase::terminating);
  phase_ = Phase::asking;
  deadline_ = after(2 * options_.grace_seconds + kAskMarginSeconds);
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
    if (phase_ == Phase::running)
      if (auto verdict = blame_.due(alive().empty())) declare_failure(*verdict);
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
    std::optional<Clock::time_point> wake = phase_ != Phase::running ? deadline_ : blame_.deadline();
    if (wake) {
      auto left = std::chrono::duration<double, std::milli>(*wake - Clock::now()).count();
      timeout = static_cast<int>(std::clamp(std::ceil(left), 0.0, 1e9));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) fail_errno("supervisor: poll");

    for (size_t i = 0; i < streams.size(); ++i) {
      auto [rank, is_err] = streams[i];
      Stream& stream = is_err ? rank->err : rank->out;
      if (fds[first_stream + i].revents != 0 && stream.fd >= 0) relay(*rank, stream, is_err, false);
    }
    signals_.drain();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1})
      if (SignalScope::take(sig) && (sig != SIGUSR1 || options_.usr1_stops))
        stop(128 + sig, "received SIG" + signal_name(sig), sig == SIGUSR1);
    if (watch_stop && fds[1].revents != 0) stop(143, options_.stop_fd_name + " readable or closed", true);
    if (SignalScope::take(SIGCHLD)) {
      check_ranks();
      if (phase_ != Phase::running) leftovers(phase_signal());
    }
    if (phase_ != Phase::running && Clock::now() >= deadline_) {
      if (phase_ == Phase::asking) {
        std::vector<std::string> names;
        for (const Rank* rank : alive()) names.push_back(rank->launch->argv.front());
        message(fmt::format("{} still running {:g} s after the stop request; sending SIGTERM", fmt::join(names, ", "),
                            2 * options_.grace_seconds + kAskMarginSeconds));
        teardown(Phase::terminating);
      } else if (phase_ == Phase::terminating) {
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

}  // namespace dscpp::launcher
