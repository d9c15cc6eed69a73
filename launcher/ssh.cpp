// The SSH starter on libssh2 1.10. Every host is a small state machine (connect, handshake and
// host-key check, public-key auth, exec, stream, close) driven without blocking from one
// poll() loop, so N hosts log in concurrently without a thread each.
//
// Teardown: libssh2 1.10 cannot send a signal over a channel, so each command runs under a
// stdin-EOF watchdog (remote_command_line): our channel EOF, a dropped connection or our own
// death closes the remote stdin, and the watchdog TERMs the remote process group, then KILLs
// whatever is left once the command's leader is gone (or after the grace period).
#include "launcher/ssh.h"

#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string_view>

#include "core/error.h"

namespace dscpp::launcher {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void init_libssh2() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (libssh2_init(0) != 0) fail("libssh2_init failed: its crypto backend could not start");
  });
}

std::string last_error(LIBSSH2_SESSION* s) {
  char* message = nullptr;
  libssh2_session_last_error(s, &message, nullptr, 0);
  return message && *message ? message : "unknown libssh2 error";
}

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

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/";
}

// SshOptions with the defaults filled in.
struct Login {
  SshOptions o;
  std::string passphrase;
  bool have_passphrase = false;
};

Login resolve(const SshOptions& options) {
  Login l{options, "", false};
  if (l.o.user.empty()) {
    const char* u = std::getenv("USER");
    passwd* pw = getpwuid(getuid());
    l.o.user = u && *u ? u : pw ? pw->pw_name : "root";
  }
  std::string ssh_dir = home_dir() + "/.ssh/";
  if (l.o.identity_files.empty())
    for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) l.o.identity_files.push_back(ssh_dir + name);
  if (l.o.known_hosts.empty()) l.o.known_hosts = ssh_dir + "known_hosts";
  const char* sock = std::getenv("SSH_AUTH_SOCK");
  l.o.use_agent = l.o.use_agent && sock && *sock;
  if (const char* p = std::getenv("DSCPP_SSH_PASSPHRASE")) l.passphrase = p, l.have_passphrase = true;
  return l;
}

int signal_number(const std::string& name) {
  static const std::pair<const char*, int> table[] = {
      {"HUP", 1},  {"INT", 2},   {"QUIT", 3},  {"ILL", 4},   {"TRAP", 5},  {"ABRT", 6},  {"BUS", 7},  {"FPE", 8},
      {"KILL", 9}, {"USR1", 10}, {"SEGV", 11}, {"USR2", 12}, {"PIPE", 13}, {"ALRM", 14}, {"TERM", 15}};
  for (const auto& [n, v] : table)
    if (name == n) return v;
  return 0;
}

std::string base64(const unsigned char* data, size_t size) {  // unpadded, as OpenSSH prints SHA256 fingerprints
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < size; i += 3) {
    uint32_t v = data[i] << 16 | (i + 1 < size ? data[i + 1] << 8 : 0) | (i + 2 < size ? data[i + 2] : 0);
    for (size_t k = 0; k < std::min<size_t>(4, size - i + 1); ++k) out += digits[(v >> (18 - 6 * k)) & 63];
  }
  return out;
}

struct KeyKind {
  int hostkey_type, knownhost_type;
  const char *name, *keyscan;
};
const KeyKind kKeyKinds[] = {
    {LIBSSH2_HOSTKEY_TYPE_ED25519, LIBSSH2_KNOWNHOST_KEY_ED25519, "ssh-ed25519", "ed25519"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_256, LIBSSH2_KNOWNHOST_KEY_ECDSA_256, "ecdsa-sha2-nistp256", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_384, LIBSSH2_KNOWNHOST_KEY_ECDSA_384, "ecdsa-sha2-nistp384", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_521, LIBSSH2_KNOWNHOST_KEY_ECDSA_521, "ecdsa-sha2-nistp521", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_RSA, LIBSSH2_KNOWNHOST_KEY_SSHRSA, "ssh-rsa", "rsa"},
    {LIBSSH2_HOSTKEY_TYPE_DSS, LIBSSH2_KNOWNHOST_KEY_SSHDSS, "ssh-dss", "dsa"},
};

// The server's host key against known_hosts: "" when it matches, else the error and remedy.
// Lines are fed one by one (libssh2's readfile stops at the first line it cannot parse, e.g. a
// key type it does not know); "@revoked" lines are honoured, "@cert-authority" ones skipped.
std::string check_host_key(LIBSSH2_SESSION* s, const std::string& host, int port, const std::string& file) {
  size_t len = 0;
  int type = 0;
  const char* key = libssh2_session_hostkey(s, &len, &type);
  if (!key) return fmt::format("{}:{} sent no host key", host, port);
  const KeyKind* kind = std::find_if(std::begin(kKeyKinds), std::end(kKeyKinds),
                                     [&](const KeyKind& k) { return k.hostkey_type == type; });
  if (kind == std::end(kKeyKinds)) return fmt::format("{}:{} offered a host key of unknown type {}", host, port, type);
  const auto* hash = reinterpret_cast<const unsigned char*>(libssh2_hostkey_hash(s, LIBSSH2_HOSTKEY_HASH_SHA256));
  std::string offered = fmt::format("{} key SHA256:{}", kind->name, hash ? base64(hash, 32) : "?");
  std::string where = port == 22 ? host : fmt::format("[{}]:{}", host, port);
  std::string add = fmt::format("ssh-keyscan{} -t {} {} >> {}", port == 22 ? "" : fmt::format(" -p {}", port),
                                kind->keyscan, host, file);
  std::ifstream in(file);
  if (!in)
    return fmt::format(
        "cannot read the known_hosts file {} ({}), so the host key of {} ({}) cannot be checked; "
        "after verifying that fingerprint, add it: {}",
        file, std::strerror(errno), where, offered, add);
  LIBSSH2_KNOWNHOSTS* known = libssh2_knownhost_init(s);
  LIBSSH2_KNOWNHOSTS* revoked = libssh2_knownhost_init(s);
  for (std::string line; std::getline(in, line);) {
    LIBSSH2_KNOWNHOSTS* into = known;
    if (line.rfind("@revoked", 0) == 0)
      into = revoked, line.erase(0, 8);
    else if (line.rfind("@", 0) == 0)
      continue;
    line.erase(0, line.find_first_not_of(" \t"));
    if (line.empty() || line[0] == '#') continue;
    libssh2_knownhost_readline(into, line.data(), line.size(), LIBSSH2_KNOWNHOST_FILE_OPENSSH);
  }
  const int plain = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW;
  int is_revoked = libssh2_knownhost_checkp(revoked, host.c_str(), port, key, len, plain, nullptr);
  int rc = libssh2_knownhost_checkp(known, host.c_str(), port, key, len, plain | kind->knownhost_type, nullptr);
  int any_type = rc == LIBSSH2_KNOWNHOST_CHECK_NOTFOUND
                     ? libssh2_knownhost_checkp(known, host.c_str(), port, key, len, plain, nullptr)
                     : rc;
  libssh2_knownhost_free(known);
  libssh2_knownhost_free(revoked);
  if (is_revoked == LIBSSH2_KNOWNHOST_CHECK_MATCH)
    return fmt::format("the host key of {} ({}) is marked @revoked in {}; refusing to connect", where, offered, file);
  if (rc == LIBSSH2_KNOWNHOST_CHECK_MATCH) return "";
  if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH)
    return fmt::format(
        "HOST KEY MISMATCH for {}: the server offered its {}, which differs from the {} key recorded "
        "in {}. Someone may be intercepting the connection, or the host was reinstalled; only if you "
        "know it was, replace the entry: ssh-keygen -R {} -f {} && {}",
        where, offered, kind->name, file, where, file, add);
  if (rc == LIBSSH2_KNOWNHOST_CHECK_NOTFOUND)
    return fmt::format(
        "unknown host: {} is not in {}{} (the server offered its {}); after verifying that "
        "fingerprint, add it: {}",
        where, file, any_type == LIBSSH2_KNOWNHOST_CHECK_MISMATCH ? " with that key type" : "", offered, add);
  return fmt::format("could not check the host key of {} against {}: {}", where, file, last_error(s));
}

std::string key_type_hint(const std::string& label, const std::string& file) {  // libssh2 1.10 + RSA
  std::ifstream pub(file + ".pub"), priv(file);
  std::string head;
  bool rsa = label.find("ssh-rsa") != std::string::npos;
  if (!file.empty() &&
      ((pub >> head && head == "ssh-rsa") || (std::getline(priv, head) && head.find("RSA") != std::string::npos)))
    rsa = true;
  return rsa ? ", RSA: libssh2 1.10 signs with SHA-1 ssh-rsa, which the server must allow via "
               "PubkeyAcceptedAlgorithms +ssh-rsa; prefer an ed25519 key"
             : "";
}

enum class Phase { kConnect, kHandshake, kAuth, kChannel, kExec, kRunning, kClosing, kDone };

// One host: its session, its command, its partial output lines, and how it ended.
class HostSession {
 public:
  HostSession(const RemoteCommand& command, std::string wire, const Login& login, const RemoteRunOptions* relay,
              RemoteCapture* capture)
      : wire_(std::move(wire)), login_(login), relay_(relay), capture_(capture) {
    exit_.host = command.host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    int rc = getaddrinfo(command.host.c_str(), std::to_string(login.o.port).c_str(), &hints, &list);
    if (rc != 0) {
      finish_with(
          fmt::format("cannot resolve host '{}' ({}); check the name in the hostfile and in /etc/hosts "
                      "or DNS on this machine",
                      command.host, gai_strerror(rc)));
      return;
    }
    for (addrinfo* a = list; a; a = a->ai_next) {
      sockaddr_storage sa{};
      std::memcpy(&sa, a->ai_addr, a->ai_addrlen);
      addrs_.push_back({sa, a->ai_addrlen});
    }
    freeaddrinfo(list);
  }
  ~HostSession() { release(false); }
  HostSession(const HostSession&) = delete;
  HostSession& operator=(const HostSession&) = delete;

  bool done() const { return phase_ == Phase::kDone; }
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
  bool step() {
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
      finish_with(
          fmt::format("logging in to {}:{} did not finish within {} s (phase: {}); the host or its sshd "
                      "is overloaded or stuck",
                      exit_.host, login_.o.port, login_.o.login_timeout_seconds,
                      phase_ == Phase::kHandshake ? "handshake"
                      : phase_ == Phase::kAuth    ? "authentication"
                                                  : "starting the command"));
      progress = true;
    }
    return progress;
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
  };

  std::string addr_text(const Address& a) const {
    char text[NI_MAXHOST] = "?";
    getnameinfo(reinterpret_cast<const sockaddr*>(&a.sa), a.len, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    return text;
  }

  bool connect_failed(int err) {
    std::string at = fmt::format("{}:{} ({})", exit_.host, login_.o.port, addr_text(addrs_[next_addr_ - 1]));
    if (err == ECONNREFUSED)
      connect_error_ =
          fmt::format("connection refused by {}: is sshd running there and listening on port {}?", at, login_.o.port);
    else if (err == ETIMEDOUT)
      connect_error_ = fmt::format(
          "connecting to {} timed out after {} s: check that the host is up and reachable "
          "from here (routing, firewall)",
          at, login_.o.connect_timeout_seconds);
    else
      connect_error_ = fmt::format("cannot connect to {}: {}; check that the host is up and reachable from here", at,
                                   std::strerror(err));
    ::close(fd_);
    fd_ = -1;
    return true;
  }

  bool step_connect() {
    if (fd_ < 0) {
      if (next_addr_ >= addrs_.size()) return finish_with(connect_error_.empty() ? "no address" : connect_error_);
      const Address& a = addrs_[next_addr_++];
      fd_ = ::socket(a.sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd_ < 0) return connect_failed(errno);
      connect_deadline_ = after(login_.o.connect_timeout_seconds);
      if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a.sa), a.len) == 0) return connected();
      return errno == EINPROGRESS || connect_failed(errno);
    }
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 0) {
      return Clock::now() >= connect_deadline_ && connect_failed(ETIMEDOUT);
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    return err ? connect_failed(err) : connected();
  }

  bool connected() {
    int one = 1, idle = 30, interval = 10, count = 3;  // a vanished host is noticed in ~1 min
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    login_deadline_ = after(login_.o.login_timeout_seconds);
    return advance(Phase::kHandshake);
  }

  bool step_handshake() {
    if (!session_) {
      session_ = libssh2_session_init();
      if (!session_) return finish_with("libssh2 could not allocate a session");
      libssh2_session_set_blocking(session_, 0);
    }
    int rc = libssh2_session_handshake(session_, fd_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc != 0)
      return finish_with(fmt::format("SSH handshake with {}:{} failed: {}; is an SSH server listening there?",
                                     exit_.host, login_.o.port, last_error(session_)));
    std::string bad = check_host_key(session_, exit_.host, login_.o.port, login_.o.known_hosts);
    return bad.empty() ? advance(Phase::kAuth) : finish_with(bad);
  }

  void list_keys() {
    if (login_.o.use_agent) {
      agent_ = libssh2_agent_init(session_);
      libssh2_agent_publickey* id = nullptr;
      if (!agent_ || libssh2_agent_connect(agent_) != 0 || libssh2_agent_list_identities(agent_) != 0) {
        tried_.push_back("ssh-agent (cannot connect to $SSH_AUTH_SOCK)");
      } else {
        while (libssh2_agent_get_identity(agent_, &id, id) == 0) {
          std::string type = id->blob_len > 4 ? std::string(reinterpret_cast<char*>(id->blob) + 4,
                                                            std::min<size_t>(id->blob[3], id->blob_len - 4))
                                              : "?";
          keys_.push_back({fmt::format("agent key {} ({})", id->comment ? id->comment : "", type), "", id, ""});
        }
        if (keys_.empty()) tried_.push_back("ssh-agent (holds no keys)");
      }
    }
    for (const std::string& f : login_.o.identity_files) {
      keys_.push_back({f, f, nullptr, ::access(f.c_str(), R_OK) == 0 ? "" : std::strerror(errno)});
    }
  }

  bool step_auth() {
    const std::string& user = login_.o.user;
    if (!listed_) {
      char* methods = libssh2_userauth_list(session_, user.c_str(), static_cast<unsigned>(user.size()));
      if (!methods) {
        if (libssh2_userauth_authenticated(session_)) return advance(Phase::kChannel);
        if (libssh2_session_last_errno(session_) == LIBSSH2_ERROR_EAGAIN) return false;
        return finish_with(
            fmt::format("{}:{}: asking for auth methods failed: {}", exit_.host, login_.o.port, last_error(session_)));
      }
      listed_ = true;
      if (!std::strstr(methods, "publickey"))
        return finish_with(
            fmt::format("{}@{}:{} does not accept public-key authentication (it offers: {}); dscpp "
                        "logs in with keys only: enable PubkeyAuthentication in its sshd_config",
                        user, exit_.host, login_.o.port, methods));
      list_keys();
    }
    for (; next_key_ < keys_.size(); ++next_key_) {
      const AuthKey& k = keys_[next_key_];
      if (!k.unreadable.empty()) {
        tried_.push_back(k.label + " (" + k.unreadable + ")");
        continue;
      }
      int rc = k.agent_key
                   ? libssh2_agent_userauth(agent_, user.c_str(), k.agent_key)
                   : libssh2_userauth_publickey_fromfile(session_, user.c_str(), nullptr, k.file.c_str(),
                                                         login_.have_passphrase ? login_.passphrase.c_str() : nullptr);
      if (rc == LIBSSH2_ERROR_EAGAIN) return false;
      if (rc == 0) return advance(Phase::kChannel);
      if (rc == LIBSSH2_ERROR_FILE)
        tried_.push_back(k.label +
                         (login_.have_passphrase ? " (cannot load: wrong passphrase in $DSCPP_SSH_PASSPHRASE"
                                                 : " (cannot load: encrypted? set $DSCPP_SSH_PASSPHRASE") +
                         ", or a format libssh2 cannot read)");
      else
        tried_.push_back(k.label + " (rejected by the server" + key_type_hint(k.label, k.file) + ")");
    }
    std::string list;
    for (const std::string& t : tried_) list += (list.empty() ? "" : "; ") + t;
    return finish_with(
        fmt::format("authentication as {}@{}:{} failed; tried: {}. Remedy: add your public key to "
                    "~{}/.ssh/authorized_keys on {} (e.g. ssh-copy-id), or name the right private key",
                    user, exit_.host, login_.o.port, list.empty() ? "no keys" : list, user, exit_.host));
  }

  bool step_channel() {
    if (agent_) libssh2_agent_disconnect(agent_), libssh2_agent_free(agent_), agent_ = nullptr;
    channel_ = libssh2_channel_open_session(session_);
    if (channel_) return advance(Phase::kExec);
    if (libssh2_session_last_errno(session_) == LIBSSH2_ERROR_EAGAIN) return false;
    return finish_with(fmt::format("{}: opening a session channel failed: {}", exit_.host, last_error(session_)));
  }

  bool step_exec() {
    int rc = libssh2_channel_exec(channel_, wire_.c_str());
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc != 0)
      return finish_with(
          fmt::format("{}: the server refused to run the command: {}", exit_.host, last_error(session_)));
    libssh2_keepalive_config(session_, 0, 30);
    return advance(Phase::kRunning);
  }

  bool lost(long rc) {
    return finish_with(fmt::format("connection to {} lost ({}: {})", exit_.host, rc, last_error(session_)));
  }

  bool step_running() {
    bool progress = false;
    int next = 0;
    if (libssh2_keepalive_send(session_, &next) != 0) return lost(LIBSSH2_ERROR_SOCKET_SEND);
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

  bool step_closing() {
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

  // Relays whole lines (one write each batch, so hosts never interleave inside a line).
  void output(int stream, std::string_view data) {
    if (capture_) {
      (stream == 0 ? capture_->out : capture_->err).append(data);
      return;
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
    if (relay_->prefix_host) {
      for (size_t at = 0; at <= end;) {
        size_t nl = pending.find('\n', at);
        text += "[" + exit_.host + "] " + pending.substr(at, nl + 1 - at);
        at = nl + 1;
      }
    } else {
      text = pending.substr(0, end + 1);
    }
    pending.erase(0, end + 1);
    write_all(stream == 0 ? relay_->out_fd : relay_->err_fd, text);
  }

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
  void release(bool polite) {
    if (fd_ >= 0 && !polite) ::shutdown(fd_, SHUT_RDWR);
    if (agent_) libssh2_agent_free(agent_), agent_ = nullptr;
    if (channel_) libssh2_channel_free(channel_), channel_ = nullptr;
    if (session_) {
      if (polite) libssh2_session_disconnect(session_, "done");
      libssh2_session_free(session_);
      session_ = nullptr;
    }
    if (fd_ >= 0) ::close(fd_), fd_ = -1;
  }

  std::string wire_;
  const Login& login_;
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
  std::vector<std::string> tried_;
  bool stop_wanted_ = false, eof_sent_ = false, close_sent_ = false;
  std::string partial_[2];
};

bool failed(const RemoteExit& e) {
  return e.exit_code != 0 || !e.signal.empty() || !e.error.empty();
}

// The remote watchdog KILLs at grace_seconds; waiting a little longer lets that exit be reported
// instead of dropping the connection of a host that did exit.
constexpr double kReportMargin = 2.0;

// The one poll() loop over all hosts, with the stop/teardown rules of run_remote.
// `stop_seconds`: how long stopped hosts get before their connections are dropped. Capturing
// (pre-flight checks) is silent and lets every host finish: each one's failure is reported.
RemoteRunResult drive(std::vector<std::unique_ptr<HostSession>>& hosts, const RemoteRunOptions& options,
                      double stop_seconds, bool capturing) {
  RemoteRunResult result;
  bool stopping = false, stop_fd_open = options.stop_fd >= 0;
  Clock::time_point grace_end = Clock::time_point::max();
  std::vector<bool> reported(hosts.size(), false);
  auto say = [&](const std::string& text) {
    if (!capturing) write_all(options.err_fd, "dscpp: " + text + "\n");
  };
  auto begin_stop = [&](const std::string& reason) {
    stopping = true;
    grace_end = after(stop_seconds);
    for (auto& h : hosts) h->stop(reason);
  };
  for (;;) {
    bool progress = false;
    size_t active = 0;
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (!hosts[i]->done()) progress |= hosts[i]->step();
      if (hosts[i]->done() && !reported[i]) {
        reported[i] = true;
        const RemoteExit& e = hosts[i]->exit();
        if (!stopping && !capturing && failed(e)) {
          result.first_failure = e;
          result.exit_code = e.exit_code;
          bool others = std::any_of(hosts.begin(), hosts.end(), [](auto& h) { return !h->done(); });
          say(e.describe() + (others ? "; stopping the other hosts" : ""));
          begin_stop(fmt::format("stopped after {} failed", e.host));
        }
      }
      active += hosts[i]->done() ? 0 : 1;
    }
    if (active == 0) break;
    if (stopping && Clock::now() >= grace_end) {
      for (auto& h : hosts)
        if (!h->done()) {
          say(
              fmt::format("host {} did not exit within {} s of the stop; dropping its connection (its watchdog "
                          "kills the remote process group)",
                          h->exit().host, stop_seconds));
          h->drop(fmt::format("did not exit within {} s of the stop; connection dropped", stop_seconds));
        }
      continue;
    }
    std::vector<pollfd> fds;
    Clock::time_point wake = grace_end;
    for (auto& h : hosts)
      if (!h->done() && h->fd() >= 0)
        fds.push_back({h->fd(), h->poll_events(), 0}), wake = std::min(wake, h->deadline());
    if (stop_fd_open) fds.push_back({options.stop_fd, POLLIN, 0});
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    int timeout = progress ? 0 : static_cast<int>(std::clamp<long long>(ms, 0, 1000));
    if (::poll(fds.data(), fds.size(), timeout) > 0 && stop_fd_open && fds.back().revents) {
      stop_fd_open = false;
      if (!stopping) {
        result.stopped = true;
        result.exit_code = 143;
        say("stop requested; stopping all hosts");
        begin_stop("stop requested");
      }
    }
  }
  for (auto& h : hosts) result.exits.push_back(h->exit());
  return result;
}

}  // namespace

std::string RemoteExit::describe() const {
  if (!error.empty()) return fmt::format("host {} failed: {}", host, error);
  if (!signal.empty()) return fmt::format("host {} was killed by signal {}", host, signal);
  return fmt::format("host {} exited with code {}", host, exit_code);
}


namespace {
std::string watchdog_line(const std::string& command, const EnvList& env, double grace_seconds, bool watches_stdin) {
  std::string inner;
  for (const auto& [name, value] : env) {
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
              std::all_of(name.begin(), name.end(),
                          [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!ok) fail("environment variable name '{}' cannot be exported by a POSIX shell (letters, digits, '_')", name);
    inner += fmt::format("export {}={}; ", name, shell_quote(value));
  }
  inner += command;
  // fd 3 keeps the channel's stdin for the watchdog (`cat` returns at its EOF); the command
  // gets /dev/null unless it watches stdin itself. `w` waits up to the grace period while the
  // command's leader ($$: exec keeps the pid) exists and is not a zombie (containers often
  // lack a reaping init). After EOF: [wait,] TERM the group, wait, KILL what is left. The
  // watchdog ignores TERM to live that long; a command that exited normally leaves nothing.
  // It is forked twice so that it is not a child of the command (a node agent that reaps and
  // waits for all its descendants would otherwise wait for it); it stays in the group.
  int ticks = std::max(1, static_cast<int>(std::lround(grace_seconds * 10)));
  std::string wrapper = fmt::format(
      "exec 3<&0; ( (trap '' TERM; w() {{ n=0; while [ $n -lt {} ] && read -r s </proc/$$/stat; do "
      "case ${{s##*) }} in Z*) return;; esac; sleep 0.1; n=$((n+1)); done; }}; cat <&3; {}kill -TERM 0; w; "
      "kill -KILL 0) >/dev/null 2>&1 & ); exec /bin/sh -c {}{} 3<&-",
      ticks, watches_stdin ? "w; " : "", shell_quote(inner), watches_stdin ? "" : " </dev/null");
  return "exec /bin/sh -c " + shell_quote(wrapper);
}
}  // namespace

std::string remote_command_line(const std::string& command, const EnvList& env, bool watches_stdin) {
  return watchdog_line(command, env, RemoteRunOptions{}.grace_seconds, watches_stdin);
}

RemoteRunResult run_remote(const std::vector<RemoteCommand>& commands, const SshOptions& ssh,
                           const RemoteRunOptions& options) {
  init_libssh2();
  Login login = resolve(ssh);
  std::vector<std::unique_ptr<HostSession>> hosts;
  for (const RemoteCommand& c : commands)
    hosts.push_back(std::make_unique<HostSession>(
        c, watchdog_line(c.command, c.env, options.grace_seconds, c.watches_stdin), login, &options, nullptr));
  // the remote watchdog KILLs at grace (watches_stdin: 2 x grace) after EOF
  bool two_stage = std::any_of(commands.begin(), commands.end(), [](auto& c) { return c.watches_stdin; });
  return drive(hosts, options, options.grace_seconds * (two_stage ? 2 : 1) + kReportMargin, false);
}

std::vector<RemoteCapture> ssh_capture_all(const std::vector<RemoteCommand>& commands, const SshOptions& ssh) {
  init_libssh2();
  Login login = resolve(ssh);
  RemoteRunOptions options;
  std::vector<RemoteCapture> results(commands.size());
  std::vector<std::unique_ptr<HostSession>> hosts;
  for (size_t i = 0; i < commands.size(); ++i) {
    const RemoteCommand& c = commands[i];
    hosts.push_back(std::make_unique<HostSession>(c, watchdog_line(c.command, c.env, options.grace_seconds, false),
                                                  login, &options, &results[i]));
  }
  RemoteRunResult r = drive(hosts, options, options.grace_seconds + kReportMargin, true);
  for (size_t i = 0; i < commands.size(); ++i) results[i].exit = r.exits[i];
  return results;
}

std::string RemoteCapture::failure(const std::string& command, const std::string& user) const {
  if (!exit.error.empty()) return exit.error;
  if (exit.exit_code == 0 && exit.signal.empty()) return "";
  std::string text = err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return fmt::format(
      "on {}: `{}` {}{}{}; run it there by hand to see why: ssh {}{} {}", exit.host, command,
      exit.signal.empty() ? fmt::format("exited with code {}", exit.exit_code) : "was killed by signal " + exit.signal,
      text.empty() ? "" : ": ", text, user.empty() ? "" : user + "@", exit.host, shell_quote(command));
}

std::string ssh_capture(const std::string& host, const std::string& command, const SshOptions& ssh) {
  RemoteCapture c = ssh_capture_all({RemoteCommand{host, command, {}}}, ssh).at(0);
  std::string why = c.failure(command, resolve(ssh).o.user);
  if (!why.empty()) throw Error(why);
  return c.out;
}

}  // namespace dscpp::launcher
