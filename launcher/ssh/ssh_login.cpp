// HostSession's first half: from a host name to an authenticated session (the host's login
// resolved from the command line and ssh config, address lookup and non-blocking TCP connect or
// a ProxyCommand, SSH handshake and host-key check, public-key authentication).
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
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace dscpp::launcher::ssh_internal {
namespace {

// libssh2 1.11 signs RSA user auth with rsa-sha2-256/512; 1.10 only with SHA-1 "ssh-rsa".
constexpr bool kRsaIsSha1 = LIBSSH2_VERSION_NUM < 0x010b00;
constexpr const char* kRsaRemedy =
    "use an ed25519 or ECDSA key (ssh-keygen -t ed25519, then ssh-copy-id), or allow ssh-rsa on the server with "
    "PubkeyAcceptedAlgorithms +ssh-rsa in its sshd_config";

std::string decode_base64(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* at = c ? std::strchr(digits, c) : nullptr;
    if (!at) continue;
    bits = bits << 6 | static_cast<uint32_t>(at - digits);
    if ((count += 6) >= 8) out += static_cast<char>(bits >> (count -= 8) & 0xff);
  }
  return out;
}

// Whether a key file holds an RSA key: its .pub, else its PEM header, else the public key
// inside an OpenSSH-format private key (stored unencrypted before the private part).
bool is_rsa_key_file(const std::string& file) {
  std::ifstream pub(file + ".pub"), priv(file);
  std::string word;
  if (pub >> word) return word == "ssh-rsa";
  std::string head, body;
  if (!std::getline(priv, head)) return false;
  if (head.find("RSA PRIVATE KEY") != std::string::npos) return true;
  if (head.find("OPENSSH PRIVATE KEY") == std::string::npos) return false;
  for (std::string line; body.size() < 400 && std::getline(priv, line);) body += line;
  return decode_base64(body).find(std::string("\0\0\0\7ssh-rsa", 11)) != std::string::npos;
}

}  // namespace

Login resolve(const SshOptions& options) {
  Login l;
  l.o = options;
  l.local = SshLocal::current();
  if (options.config_file != "none") {
    bool named = !options.config_file.empty();
    l.config = SshConfig::load(named ? options.config_file : l.local.home + "/.ssh/config", l.local.home, named);
  }
  if (const char* p = knob("DSCPP_SSH_PASSPHRASE")) l.passphrase = p, l.have_passphrase = true;
  return l;
}

HostSession::HostSession(const RemoteCommand& command, std::string wire, const Login& login,
                         const RemoteRunOptions* relay, RemoteCapture* capture)
    : wire_(std::move(wire)), login_(login), relay_(relay), capture_(capture) {
  exit_.host = command.host;
  reported_ranks_ = command.reported_ranks;
  for (const auto& [name, value] : command.stdin_env) {
    if (value.find('\n') != std::string::npos) fail("{}: a stdin variable's value must be one line", name);
    stdin_ += value + "\n";
  }
  try {
    target_ = resolve_ssh_target(command.host, login.o, login.config, login.local);
  } catch (const Error& e) {
    finish_with(e.what());
    return;
  }
  if (!target_.proxy_command.empty()) return;  // no address: the proxy command connects
  addrinfo hints{};
  hints.ai_family = target_.address_family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int rc = getaddrinfo(target_.host_name.c_str(), std::to_string(target_.port).c_str(), &hints, &list);
  if (rc != 0) {
    std::string alias = target_.host_name == target_.alias
                            ? ""
                            : fmt::format(" (the HostName of '{}' in {})", target_.alias, target_.config_file);
    finish_with(
        fmt::format("cannot resolve host '{}'{} ({}); check the name in the hostfile{} and in /etc/hosts or DNS on "
                    "this machine",
                    target_.host_name, alias, gai_strerror(rc), alias.empty() ? "" : " and the ssh config"));
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

std::string HostSession::via_proxy() const {
  if (target_.proxy_command.empty()) return "";
  bool shown = target_.proxy_from.find(target_.proxy_command) != std::string::npos;  // a ProxyCommand without tokens
  return fmt::format(" through {}{}", target_.proxy_from,
                     shown ? "" : fmt::format(" (running `{}`)", target_.proxy_command));
}

bool HostSession::connect_failed(int err) {
  std::string at = fmt::format("{}:{} ({})", target_.host_name, target_.port, addr_text(addrs_[next_addr_ - 1]));
  std::string port = target_.port_from == "the default" ? "" : fmt::format(" (from {})", target_.port_from);
  if (err == ECONNREFUSED)
    connect_error_ = fmt::format("connection refused by {}: is sshd running there and listening on port {}{}?", at,
                                 target_.port, port);
  else if (err == ETIMEDOUT)
    connect_error_ = fmt::format(
        "connecting to {} timed out after {} s: check that the host is up and reachable "
        "from here (routing, firewall)",
        at, target_.connect_timeout_seconds);
  else
    connect_error_ = fmt::format("cannot connect to {}: {}; check that the host is up and reachable from here", at,
                                 std::strerror(err));
  ::close(fd_);
  fd_ = -1;
  return true;
}

bool HostSession::step_connect() {
  if (!target_.proxy_command.empty()) {
    std::string why;
    fd_ = proxy_.start(target_.proxy_command, &why);
    if (fd_ < 0) return finish_with(fmt::format("cannot reach {}{}: {}", target_.host_name, via_proxy(), why));
    login_deadline_ = after(login_.o.login_timeout_seconds);
    return advance(Phase::kHandshake);
  }
  if (fd_ < 0) {
    if (next_addr_ >= addrs_.size()) return finish_with(connect_error_.empty() ? "no address" : connect_error_);
    const Address& a = addrs_[next_addr_++];
    fd_ = ::socket(a.sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return connect_failed(errno);
    connect_deadline_ = after(target_.connect_timeout_seconds);
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
    return finish_with(fmt::format("SSH handshake with {}:{}{} failed: {}; is an SSH server listening there?{}",
                                   target_.host_name, target_.port, via_proxy(), last_error(session_), proxy_.said()));
  std::string bad = check_host_key(session_, target_);
  return bad.empty() ? advance(Phase::kAuth) : finish_with(bad);
}

void HostSession::list_keys() {
  if (target_.use_agent) {
    agent_ = libssh2_agent_init(session_);
    if (agent_) libssh2_agent_set_identity_path(agent_, target_.agent_socket.c_str());
    libssh2_agent_publickey* id = nullptr;
    if (!agent_ || libssh2_agent_connect(agent_) != 0 || libssh2_agent_list_identities(agent_) != 0) {
      tried_.push_back({Tried::kNote, fmt::format("ssh-agent (cannot connect to {})", target_.agent_socket)});
    } else {
      while (libssh2_agent_get_identity(agent_, &id, id) == 0) {
        std::string type = id->blob_len > 4 ? std::string(reinterpret_cast<char*>(id->blob) + 4,
                                                          std::min<size_t>(id->blob[3], id->blob_len - 4))
                                            : "?";
        keys_.push_back(
            {fmt::format("agent key {} ({})", id->comment ? id->comment : "", type), "", id, "", type == "ssh-rsa"});
      }
      if (keys_.empty()) tried_.push_back({Tried::kNote, "ssh-agent (holds no keys)"});
    }
  }
  for (const std::string& f : target_.identity_files) {
    bool readable = ::access(f.c_str(), R_OK) == 0;
    keys_.push_back({f, f, nullptr, readable ? "" : std::strerror(errno), readable && is_rsa_key_file(f)});
  }
}

bool HostSession::step_auth() {
  const std::string& user = target_.user;
  if (!listed_) {
    char* methods = libssh2_userauth_list(session_, user.c_str(), static_cast<unsigned>(user.size()));
    if (!methods) {
      if (libssh2_userauth_authenticated(session_)) return advance(Phase::kChannel);
      if (libssh2_session_last_errno(session_) == LIBSSH2_ERROR_EAGAIN) return false;
      return finish_with(fmt::format("{}:{}: asking for auth methods failed: {}", target_.host_name, target_.port,
                                     last_error(session_)));
    }
    listed_ = true;
    if (!std::strstr(methods, "publickey"))
      return finish_with(
          fmt::format("{}@{}:{} does not accept public-key authentication (it offers: {}); dscpp "
                      "logs in with keys only: enable PubkeyAuthentication in its sshd_config",
                      user, target_.host_name, target_.port, methods));
    list_keys();
  }
  for (; next_key_ < keys_.size(); ++next_key_) {
    const AuthKey& k = keys_[next_key_];
    if (!k.unreadable.empty()) {
      tried_.push_back({Tried::kSkipped, k.label + " (" + k.unreadable + ")"});
      continue;
    }
    int rc = k.agent_key
                 ? libssh2_agent_userauth(agent_, user.c_str(), k.agent_key)
                 : libssh2_userauth_publickey_fromfile(session_, user.c_str(), nullptr, k.file.c_str(),
                                                       login_.have_passphrase ? login_.passphrase.c_str() : nullptr);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc == 0) return advance(Phase::kChannel);
    if (rc == LIBSSH2_ERROR_FILE)
      tried_.push_back(
          {Tried::kUnloadable, k.label +
                                   (login_.have_passphrase ? " (cannot load: wrong passphrase in $DSCPP_SSH_PASSPHRASE"
                                                           : " (cannot load: encrypted? set $DSCPP_SSH_PASSPHRASE") +
                                   ", or a format libssh2 cannot read)"});
    else
      tried_.push_back({Tried::kRejected,
                        k.label + (k.rsa && kRsaIsSha1 ? " (rejected by the server; an RSA key: libssh2 1.10 signs "
                                                         "with SHA-1 ssh-rsa, which OpenSSH 8.8 and later refuse "
                                                         "unless PubkeyAcceptedAlgorithms +ssh-rsa)"
                                                       : " (rejected by the server)"),
                        k.rsa && kRsaIsSha1});
  }
  return auth_failed();
}

// What was tried, for which user (and why that user), and the remedy that fits what happened.
bool HostSession::auth_failed() {
  const std::string& user = target_.user;
  std::string list, notes;
  size_t rejected = 0, rejected_rsa = 0, unloadable = 0;
  for (const Tried& t : tried_) {
    list += (list.empty() ? "" : "; ") + t.text;
    rejected += t.outcome == Tried::kRejected;
    rejected_rsa += t.outcome == Tried::kRejected && t.rsa;
    unloadable += t.outcome == Tried::kUnloadable;
  }
  if (!target_.agent_note.empty()) list += (list.empty() ? "" : "; ") + target_.agent_note;
  std::string config = target_.config_file.empty() ? "~/.ssh/config" : target_.config_file;
  std::string dest =
      fmt::format("{}{}@{}", target_.port == 22 ? "" : fmt::format("-p {} ", target_.port), user, target_.host_name);
  std::string name_key =
      fmt::format("name the key {} accepts with --ssh_identity FILE or IdentityFile in {}", target_.host_name, config);
  std::vector<std::string> remedies;
  if (rejected == 0 && unloadable == 0)
    remedies.push_back(
        fmt::format("no key could be offered: create one and install it there with ssh-keygen -t "
                    "ed25519 && ssh-copy-id {}, or {}",
                    dest, name_key));
  if (unloadable > 0)
    remedies.push_back(
        "for an encrypted key, set $DSCPP_SSH_PASSPHRASE to its passphrase or add it to ssh-agent (ssh-add FILE)");
  if (rejected > rejected_rsa)
    remedies.push_back(
        fmt::format("add your public key to ~{}/.ssh/authorized_keys on {} (ssh-copy-id -i KEY.pub {}), "
                    "or {}; check that {} is the right user",
                    user, target_.host_name, dest, name_key, user));
  if (rejected_rsa > 0)
    remedies.push_back(fmt::format("{}{}",
                                   rejected_rsa == rejected ? "every key the server rejected is RSA: "
                                                            : "for "
                                                              "the RSA keys: ",
                                   kRsaRemedy));
  std::string remedy;
  for (const std::string& r : remedies) remedy += (remedy.empty() ? "" : "; ") + r;
  return finish_with(fmt::format("authentication as {}@{}:{}{} failed; tried: {}. The user {} is from {}. Remedy: {}",
                                 user, target_.host_name, target_.port, via_proxy(), list.empty() ? "no keys" : list,
                                 user, target_.user_from, remedy));
}

}  // namespace dscpp::launcher::ssh_internal
