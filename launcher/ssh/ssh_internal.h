// What the SSH starter's files share, private to launcher/ssh/. The per-host state machine
// is declared here because its login half (ssh_login.cpp) and its command half (ssh_channel.cpp)
// are separate files, and the poll() loop that drives all hosts (ssh.cpp) is a third.
#pragma once

#include "launcher/ssh/ssh.h"
#include "launcher/ssh/ssh_config.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dscpp::launcher::ssh_internal {

using Clock = std::chrono::steady_clock;

inline Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline std::string last_error(LIBSSH2_SESSION* s) {
  char* message = nullptr;
  libssh2_session_last_error(s, &message, nullptr, 0);
  return message && *message ? message : "unknown libssh2 error";
}

// The line a RemoteCommand's check ends with (gate_prefix), on stdout and on stderr: what comes
// before it goes to the gate, what comes after is the command's own output.
inline constexpr std::string_view kCheckDone = "dscpp-check-done";

// Writes all of `text`, waiting while `fd` is full; output is dropped once its reader is gone.
void write_all(int fd, std::string_view text);

// The command line's options with what every host shares: the parsed ssh config, who runs
// dscpp, the passphrase. Each host's own login (SshTarget) is resolved from it.
struct Login {
  SshOptions o;
  SshConfig config;
  SshLocal local;
  std::string passphrase;
  bool have_passphrase = false;
};

// Reads the ssh config (--ssh_config, default ~/.ssh/config); throws dscpp::Error for a file
// that does not parse, since no host could be logged in to as the user means.
Login resolve(const SshOptions& options);

// The server's host key against the target's known_hosts files (user files, then global ones):
// "" when one of them has it, else the error and remedy naming the files read. Lines are fed
// one by one (libssh2's readfile stops at the first line it cannot parse, e.g. a key type it
// does not know); "@revoked" lines are honoured, "@cert-authority" ones skipped.
std::string check_host_key(LIBSSH2_SESSION* s, const SshTarget& target);

// A ProxyCommand (or ProxyJump's `ssh -W`): `/bin/sh -c "exec CMD"` in a process group of its
// own, one end of a socketpair as its stdin and stdout, the other end for libssh2 (which only
// needs an fd it can send() and recv() on). Its stderr is kept for messages. stop() TERMs the
// group, KILLs it a second later if need be, and reaps the shell: nothing outlives a session.
class ProxyProcess {
 public:
  ProxyProcess() = default;
  ~ProxyProcess();
  ProxyProcess(const ProxyProcess&) = delete;
  ProxyProcess& operator=(const ProxyProcess&) = delete;

  // The non-blocking fd for libssh2 (the caller closes it), or -1 with `error` set.
  int start(const std::string& command, std::string* error);
  void stop();
  // "; the proxy command said: ..." with its last stderr lines, or "" when it said nothing.
  std::string said() const;

 private:
  pid_t pid_ = -1;
  int stderr_fd_ = -1;
};

enum class Phase { kConnect, kHandshake, kAuth, kChannel, kExec, kRunning, kClosing, kDone };

// One host: its session, its command, its partial output lines, and how it ended.
// Connect, handshake and authentication are in ssh_login.cpp; step(), the command's channel,
// the output relay and release() in ssh_channel.cpp.
class HostSession {
 public:
  HostSession(const RemoteCommand& command, std::string wire, const Login& login, const RemoteRunOptions* relay,
              RemoteCapture* capture);
  ~HostSession() { release(false); }
  HostSession(const HostSession&) = delete;
  HostSession& operator=(const HostSession&) = delete;

  bool done() const { return phase_ == Phase::kDone; }
  // The exit reports read from the command's stderr since the last call (RemoteCommand::reported_ranks).
  std::vector<RankExit> take_reports() { return std::exchange(reports_, {}); }
  // Whether every rank the command runs has reported its exit.
  bool all_reported() const { return reported_ranks_ > 0 && reports_seen_ >= reported_ranks_; }
  bool running() const { return phase_ == Phase::kRunning || phase_ == Phase::kClosing; }
  const RemoteExit& exit() const { return exit_; }
  int fd() const { return fd_; }
  short poll_events() const {
    if (phase_ == Phase::kConnect) return POLLOUT;
    int dir = session_ ? libssh2_session_block_directions(session_) : 0;
    return static_cast<short>(POLLIN | (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND ? POLLOUT : 0));
  }
  Clock::time_point deadline() const {
    if (phase_ == Phase::kConnect) return connect_deadline_;
    return running() ? Clock::time_point::max() : login_deadline_;
  }

  // Advances as far as possible without blocking; true when anything happened.
  bool step();

  // The command has a check (RemoteCommand::check): its output is kept for the gate until the
  // marker, and the command waits for let_go().
  void expect_check() { checking_[0] = checking_[1] = gated_ = true; }
  bool gated() const { return gated_; }
  // Whether the gate can decide about this host: it finished (failed) or waits for `go`.
  bool at_gate() const { return done() || (gated_ && !checking_[0] && phase_ == Phase::kRunning); }
  // What the check printed (out, err); `exit` is left for the caller to fill in.
  const RemoteCapture& check_output() const { return check_; }
  // Sends `go` to a host waiting at the gate, which starts its command.
  void let_go() {
    if (phase_ == Phase::kRunning) stdin_ += kGo;
  }

  // Stop: a running command gets EOF on its stdin (the watchdog TERMs its group); a host that
  // has not started its command is simply disconnected.
  void stop(const std::string& reason) {
    if (phase_ == Phase::kRunning)
      stop_wanted_ = true;
    else if (!running() && !done())
      finish_with("not started: " + reason);
  }
  void drop(const std::string& reason) {
    if (!done()) finish_with(reason);
  }

 private:
  struct Address {
    sockaddr_storage sa;
    socklen_t len;
  };
  struct AuthKey {
    std::string label, file;
    libssh2_agent_publickey* agent_key = nullptr;
    std::string unreadable;  // why the file cannot be read; empty when it can
    bool rsa = false;
  };
  // One line of "tried: ..." in the authentication error.
  struct Tried {
    enum Outcome { kNote, kSkipped, kUnloadable, kRejected } outcome;
    std::string text;
    bool rsa = false;
  };

  // ssh_login.cpp
  std::string addr_text(const Address& a) const;
  bool connect_failed(int err);
  bool step_connect();
  bool connected();
  bool step_handshake();
  void list_keys();
  bool step_auth();
  bool auth_failed();
  std::string via_proxy() const;  // " through ProxyJump ... (FILE:LINE)" or ""

  // ssh_channel.cpp
  bool step_channel();
  bool step_exec();
  bool lost(long rc);
  bool step_running();
  bool step_closing();
  // Relays whole lines (one write each batch, so hosts never interleave inside a line).
  void output(int stream, std::string_view data);

  // Ends this host with `error`; returns true (progress) for the step functions.
  bool finish_with(std::string error) {
    exit_.error = std::move(error);
    exit_.exit_code = 255;
    release(false);
    phase_ = Phase::kDone;
    return true;
  }
  bool advance(Phase next) {
    phase_ = next;
    return true;
  }

  // polite: the channel is closed, say goodbye. Otherwise the socket is shut down first so
  // that libssh2 cannot wait on it; the remote watchdog sees the connection drop.
  void release(bool polite);

  std::string wire_;
  const Login& login_;
  SshTarget target_;
  ProxyProcess proxy_;
  const RemoteRunOptions* relay_;
  RemoteCapture* capture_;  // non-null: keep the output here instead of relaying it
  RemoteExit exit_;
  Phase phase_ = Phase::kConnect;
  std::vector<Address> addrs_;
  size_t next_addr_ = 0;
  std::string connect_error_;
  int fd_ = -1;
  Clock::time_point connect_deadline_, login_deadline_;
  LIBSSH2_SESSION* session_ = nullptr;
  LIBSSH2_CHANNEL* channel_ = nullptr;
  LIBSSH2_AGENT* agent_ = nullptr;
  bool listed_ = false;
  std::vector<AuthKey> keys_;
  size_t next_key_ = 0;
  std::vector<Tried> tried_;
  bool stop_wanted_ = false, eof_sent_ = false, close_sent_ = false;
  static constexpr std::string_view kGo = "go\n";
  bool gated_ = false, checking_[2] = {false, false};  // checking_: per stream, before the marker
  RemoteCapture check_;
  // What the command's stdin gets before EOF: the stdin_env values, then `go` once let go;
  // `stdin_sent_` bytes of it are out.
  std::string stdin_;
  size_t stdin_sent_ = 0;
  std::string partial_[2];
  int reported_ranks_ = 0, reports_seen_ = 0;
  std::vector<RankExit> reports_;
};

}  // namespace dscpp::launcher::ssh_internal
