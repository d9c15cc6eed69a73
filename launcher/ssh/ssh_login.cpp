// HostSession's first half: from a host name to an authenticated session (address lookup,
// non-blocking TCP connect, SSH handshake and host-key check, public-key authentication).
// Separate from the command's channel because every login failure names its own remedy, and
// those messages make this the larger half.
#include "core/error.h"
#include "core/knobs.h"
#include "launcher/ssh/ssh_internal.h"

#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace dscpp::launcher::ssh_internal {
namespace {

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/";
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

}  // namespace

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
  if (const char* p = knob("DSCPP_SSH_PASSPHRASE")) l.passphrase = p, l.have_passphrase = true;
  return l;
}

HostSession::HostSession(const RemoteCommand& command, std::string wire, const Login& login,
                         const RemoteRunOptions* relay, RemoteCapture* capture)
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

std::string HostSession::addr_text(const Address& a) const {
  char text[NI_MAXHOST] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&a.sa), a.len, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  return text;
}

bool HostSession::connect_failed(int err) {
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

bool HostSession::step_connect() {
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

bool HostSession::connected() {
  int one = 1, idle = 30, interval = 10, count = 3;  // a vanished host is noticed in ~1 min
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  login_deadline_ = after(login_.o.login_timeout_seconds);
  return advance(Phase::kHandshake);
}

bool HostSession::step_handshake() {
  if (!session_) {
    session_ = libssh2_session_init();
    if (!session_) return finish_with("libssh2 could not allocate a session");
    libssh2_session_set_blocking(session_, 0);
  }
  int rc = libssh2_session_handshake(session_, fd_);
  if (rc == LIBSSH2_ERROR_EAGAIN) return false;
  if (rc != 0)
    return finish_with(fmt::format("SSH handshake with {}:{} failed: {}; is an SSH server listening there?", exit_.host,
                                   login_.o.port, last_error(session_)));
  std::string bad = check_host_key(session_, exit_.host, login_.o.port, login_.o.known_hosts);
  return bad.empty() ? advance(Phase::kAuth) : finish_with(bad);
}

void HostSession::list_keys() {
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

bool HostSession::step_auth() {
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

}  // namespace dscpp::launcher::ssh_internal
