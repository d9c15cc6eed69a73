// The fork side of the supervisor: a rank's exec plan (built before fork, so that the child
// needs no allocation), the child from fork to exec, and the watchdog helper that outlives us.
// Separate because everything here after fork() may call only async-signal-safe functions.
#include "core/error.h"
#include "launcher/supervisor/supervisor_internal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <set>

extern char** environ;

namespace dscpp::launcher::supervisor_internal {
namespace {

void child_message(const std::string& prefix, int err) {
  const char* text = strerrordesc_np(err);
  struct iovec parts[3] = {{const_cast<char*>(prefix.data()), prefix.size()},
                           {const_cast<char*>(text), std::strlen(text)},
                           {const_cast<char*>("\n"), 1}};
  [[maybe_unused]] ssize_t n = writev(2, parts, 3);
}

}  // namespace

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

Watchdog::Watchdog(const std::vector<pid_t>& groups) {
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

Watchdog::~Watchdog() {
  if (fd_ < 0) return;
  if (std::uncaught_exceptions() == 0) {
    [[maybe_unused]] ssize_t n = write(fd_, "d", 1);
  }
  close(fd_);
  waitpid(pid_, nullptr, 0);
}

void Watchdog::watch(int fd, const std::vector<pid_t>& groups) {
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

}  // namespace dscpp::launcher::supervisor_internal
