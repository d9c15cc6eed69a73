// ProxyProcess: the ProxyCommand (and ProxyJump's `ssh -W`) a host is reached through, run as
// OpenSSH runs it (`/bin/sh -c "exec CMD"`), talking SSH over a socketpair instead of TCP.
#include "launcher/ssh/ssh_internal.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace dscpp::launcher::ssh_internal {

ProxyProcess::~ProxyProcess() {
  stop();
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
}

int ProxyProcess::start(const std::string& command, std::string* error) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    *error = std::string("socketpair failed: ") + std::strerror(errno);
    return -1;
  }
  // A memory file rather than a pipe: nobody has to drain it while the session runs.
  stderr_fd_ = ::memfd_create("dscpp-proxy-stderr", MFD_CLOEXEC);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, sv[1], 0);
  posix_spawn_file_actions_adddup2(&files, sv[1], 1);
  if (stderr_fd_ >= 0) posix_spawn_file_actions_adddup2(&files, stderr_fd_, 2);
  // Its own process group: our TERM reaches whatever the shell starts, and a Ctrl-C meant for
  // dscpp does not cut the connection before dscpp has stopped the remote commands.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  std::string line = "exec " + command;
  char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), line.data(), nullptr};
  int rc = posix_spawn(&pid_, "/bin/sh", &files, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    pid_ = -1;
    ::close(sv[0]);
    *error = std::string("cannot run /bin/sh: ") + std::strerror(rc);
    return -1;
  }
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  return sv[0];
}

void ProxyProcess::stop() {
  if (pid_ <= 0) return;
  // The group is signalled before the shell is reaped, so its id cannot have been reused.
  ::kill(-pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) != 0) {
      pid_ = -1;
      return;
    }
    ::usleep(10'000);
  }
  ::kill(-pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::string ProxyProcess::said() const {
  struct stat st {};
  if (stderr_fd_ < 0 || ::fstat(stderr_fd_, &st) != 0 || st.st_size == 0) return "";
  off_t from = st.st_size > 2000 ? st.st_size - 2000 : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(stderr_fd_, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text.empty() ? "" : "; the proxy command said: " + text;
}

}  // namespace dscpp::launcher::ssh_internal
