// HostSession's second half: step(), which walks the phases, and everything after login (the
// command's channel, its output relayed line by line or captured, its exit status, and the
// session's release). Separate from the login half because this is what runs for the whole
// job, once per poll() wake-up of every host.
#include "core/error.h"
#include "launcher/ssh/ssh_internal.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

namespace dscpp::launcher::ssh_internal {
namespace {

int signal_number(const std::string& name) {
  static const std::pair<const char*, int> table[] = {
      {"HUP", 1},  {"INT", 2},   {"QUIT", 3},  {"ILL", 4},   {"TRAP", 5},  {"ABRT", 6},  {"BUS", 7},  {"FPE", 8},
      {"KILL", 9}, {"USR1", 10}, {"SEGV", 11}, {"USR2", 12}, {"PIPE", 13}, {"ALRM", 14}, {"TERM", 15}};
  for (const auto& [n, v] : table)
    if (name == n) return v;
  return 0;
}

// Where the check's marker line starts in `text`, or npos.
size_t marker_at(const std::string& text) {
  const std::string line = std::string(kCheckDone) + "\n";
  for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1))
    if (at == 0 || text[at - 1] == '\n') return at;
  return std::string::npos;
}

}  // namespace

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else if (!(n < 0 && errno == EINTR)) {
      return;  // the reader went away: nothing useful to do with the output
    }
  }
}

bool HostSession::step() {
  bool progress = false;
  for (Phase before = phase_; phase_ != Phase::kDone; before = phase_) {
    switch (phase_) {
      case Phase::kConnect:
        progress |= step_connect();
        break;
      case Phase::kHandshake:
        progress |= step_handshake();
        break;
      case Phase::kAuth:
        progress |= step_auth();
        break;
      case Phase::kChannel:
        progress |= step_channel();
        break;
      case Phase::kExec:
        progress |= step_exec();
        break;
      case Phase::kRunning:
        progress |= step_running();
        break;
      case Phase::kClosing:
        progress |= step_closing();
        break;
      case Phase::kDone:
        break;
    }
    if (phase_ == before) break;
  }
  if (phase_ != Phase::kDone && !running() && phase_ != Phase::kConnect && Clock::now() >= login_deadline_) {
    finish_with(fmt::format("logging in to {}:{}{} did not finish within {} s (phase: {}); the host or its sshd{} "
                            "is overloaded or stuck{}",
                            target_.host_name, target_.port, via_proxy(), login_.o.login_timeout_seconds,
                            phase_ == Phase::kHandshake ? "handshake"
                            : phase_ == Phase::kAuth    ? "authentication"
                                                        : "starting the command",
                            target_.proxy_command.empty() ? "" : " (or the proxy command)", proxy_.said()));
    progress = true;
  }
  return progress;
}

bool HostSession::step_channel() {
  if (agent_) libssh2_agent_disconnect(agent_), libssh2_agent_free(agent_), agent_ = nullptr;
  channel_ = libssh2_channel_open_session(session_);
  if (channel_) return advance(Phase::kExec);
  if (libssh2_session_last_errno(session_) == LIBSSH2_ERROR_EAGAIN) return false;
  return finish_with(fmt::format("{}: opening a session channel failed: {}", exit_.host, last_error(session_)));
}

bool HostSession::step_exec() {
  int rc = libssh2_channel_exec(channel_, wire_.c_str());
  if (rc == LIBSSH2_ERROR_EAGAIN) return false;
  if (rc != 0)
    return finish_with(fmt::format("{}: the server refused to run the command: {}", exit_.host, last_error(session_)));
  libssh2_keepalive_config(session_, 0, 30);
  return advance(Phase::kRunning);
}

bool HostSession::lost(long rc) {
  return finish_with(
      fmt::format("connection to {} lost ({}: {}){}", exit_.host, rc, last_error(session_), proxy_.said()));
}

bool HostSession::step_running() {
  bool progress = false;
  int next = 0;
  if (libssh2_keepalive_send(session_, &next) != 0) return lost(LIBSSH2_ERROR_SOCKET_SEND);
  // A stop before the whole `go` (or a stdin variable) is out sends EOF instead: the command
  // then never starts.
  if (stdin_sent_ < stdin_.size() && !stop_wanted_) {
    ssize_t n = libssh2_channel_write(channel_, stdin_.data() + stdin_sent_, stdin_.size() - stdin_sent_);
    if (n > 0)
      stdin_sent_ += static_cast<size_t>(n), progress = true;
    else if (n != LIBSSH2_ERROR_EAGAIN)
      return lost(n);
  }
  if (stop_wanted_ && !eof_sent_) {
    int rc = libssh2_channel_send_eof(channel_);
    if (rc == 0)
      eof_sent_ = progress = true;
    else if (rc != LIBSSH2_ERROR_EAGAIN)
      return lost(rc);
  }
  char buf[16384];
  for (bool any = true; any;) {
    any = false;
    for (int stream : {0, 1}) {
      ssize_t n = libssh2_channel_read_ex(channel_, stream == 0 ? 0 : SSH_EXTENDED_DATA_STDERR, buf, sizeof buf);
      if (n > 0)
        output(stream, std::string_view(buf, static_cast<size_t>(n))), any = progress = true;
      else if (n < 0 && n != LIBSSH2_ERROR_EAGAIN)
        return lost(n);
    }
  }
  if (!libssh2_channel_eof(channel_)) return progress;
  for (int stream : {0, 1})
    if (!partial_[stream].empty()) output(stream, "\n");
  return advance(Phase::kClosing);
}

bool HostSession::step_closing() {
  if (!close_sent_) {
    int rc = libssh2_channel_close(channel_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc != 0) return lost(rc);
    close_sent_ = true;
  }
  int rc = libssh2_channel_wait_closed(channel_);
  if (rc == LIBSSH2_ERROR_EAGAIN) return false;
  if (rc != 0) return lost(rc);
  exit_.exit_code = libssh2_channel_get_exit_status(channel_);
  char* signal = nullptr;
  size_t signal_len = 0;
  libssh2_channel_get_exit_signal(channel_, &signal, &signal_len, nullptr, nullptr, nullptr, nullptr);
  if (signal) {
    exit_.signal.assign(signal, signal_len);
    libssh2_free(session_, signal);
    int number = signal_number(exit_.signal);
    exit_.exit_code = number ? 128 + number : 255;
  }
  release(true);
  return advance(Phase::kDone);
}

void HostSession::output(int stream, std::string_view data) {
  if (capture_) {
    (stream == 0 ? capture_->out : capture_->err).append(data);
    return;
  }
  std::string after_check;
  if (checking_[stream]) {
    std::string& kept = stream == 0 ? check_.out : check_.err;
    kept.append(data);
    size_t at = marker_at(kept);
    if (at == std::string::npos) return;
    checking_[stream] = false;
    after_check = kept.substr(at + kCheckDone.size() + 1);
    kept.resize(at);
    if (after_check.empty()) return;
    data = after_check;
  }
  std::string& pending = partial_[stream];
  pending.append(data);
  size_t end = pending.rfind('\n');
  if (end == std::string::npos) {
    if (pending.size() < 65536) return;  // an endless line is flushed in pieces
    pending += '\n';
    end = pending.size() - 1;
  }
  std::string text;
  for (size_t at = 0; at <= end;) {
    size_t nl = pending.find('\n', at);
    std::string_view line(pending.data() + at, nl + 1 - at);
    at = nl + 1;
    if (stream == 1 && reported_ranks_ > 0)
      if (auto report = parse_exit_report(line)) {
        reports_.push_back(*report);
        ++reports_seen_;
        continue;
      }
    if (relay_->prefix_host) text += "[" + exit_.host + "] ";
    text.append(line);
  }
  pending.erase(0, end + 1);
  write_all(stream == 0 ? relay_->out_fd : relay_->err_fd, text);
}

void HostSession::release(bool polite) {
  if (fd_ >= 0 && !polite) ::shutdown(fd_, SHUT_RDWR);
  if (agent_) libssh2_agent_free(agent_), agent_ = nullptr;
  if (channel_) libssh2_channel_free(channel_), channel_ = nullptr;
  if (session_) {
    if (polite) libssh2_session_disconnect(session_, "done");
    libssh2_session_free(session_);
    session_ = nullptr;
  }
  if (fd_ >= 0) ::close(fd_), fd_ = -1;
  proxy_.stop();
}

}  // namespace dscpp::launcher::ssh_internal
