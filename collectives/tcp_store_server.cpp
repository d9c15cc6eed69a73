// The rendezvous store's server: one poll() loop on its own thread, holding the data. Every
// connection first proves the job's secret (store_auth.h); until it has, it is served nothing,
// may send at most one small frame, and is dropped after the handshake timeout or when too many
// others are still proving themselves.
#include "collectives/tcp_store_wire.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <charconv>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dscpp::comm::store_wire {
namespace {

// ---------------------------------------------------------------------------------------------
// Server: owns the data; touched only by its own thread, so it needs no locks.

class PollServer final : public StoreServer {
 public:
  explicit PollServer(const ServerOptions& o) : options_(o) {
    listen_fd_ = open_listener(o.port, o.bind_addr);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) fail("rendezvous store: eventfd failed: {}", std::strerror(errno));
    sockaddr_in6 addr{};  // sin6_port and sin_port sit at the same offset
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin6_port);
    thread_ = std::thread([this] { run(); });
  }
  ~PollServer() override {
    uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) continue;
    thread_.join();
    for (auto& [fd, c] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_fd_);
    if (refused_ > 0)
      log::info("rendezvous store: refused {} connection{} from {} address{} that did not prove the job's secret",
                refused_, refused_ == 1 ? "" : "s", told_.size(), told_.size() == 1 ? "" : "es");
  }
  int port() const override { return port_; }

 private:
  struct Conn {
    std::string in, out;
    size_t out_pos = 0;
    bool closing = false;  // flush the error reply, then close
    bool dead = false;
    // The parked get/wait: answered once every key exists. It is registered under one missing
    // key at a time (keys[cursor]), so a wait on n keys costs O(n) overall, not O(n^2).
    bool pending = false;
    uint8_t op = 0;
    std::vector<std::string> keys;
    size_t cursor = 0;
    // Until `authenticated`, the connection is in unauthenticated_ and gets nothing but the
    // handshake; `source` (the peer's address) names it in the log.
    bool authenticated = false;
    std::optional<store_auth::ServerHandshake> handshake;
    Clock::time_point handshake_deadline;
    std::string source;
  };

  // Every interface (dual-stack where IPv6 is on) when `bind` is empty, else that address.
  static int open_listener(int port, const std::string& bind) {
    auto taken = [&](int err, const std::string& where) -> std::string {
      if (err == EADDRINUSE || err == EACCES)
        return fmt::format("cannot host the rendezvous store on {}: {} (is another job using MASTER_PORT={}?)", where,
                           std::strerror(err), port);
      if (err == EADDRNOTAVAIL)
        return fmt::format(
            "cannot host the rendezvous store on {}: {}: rank 0 listens on the address MASTER_ADDR "
            "names, and that is not an address of this host; set MASTER_ADDR (--master_addr) to "
            "one of its addresses, or DSCPP_STORE_BIND to the one to listen on (0.0.0.0: every "
            "interface)",
            where, std::strerror(err));
      return fmt::format("cannot host the rendezvous store on {}: {}", where, std::strerror(err));
    };
    auto try_bind = [](int family, const sockaddr* a, socklen_t len, int& err) {
      int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return err = errno, -1;
      int one = 1, zero = 0;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // fails harmlessly on AF_INET
      if (::bind(fd, a, len) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
      err = errno;
      ::close(fd);
      return -1;
    };
    int err = 0;
    if (!bind.empty()) {
      addrinfo hints{}, *found = nullptr;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_NUMERICSERV;
      std::string where =
          bind.find(':') == std::string::npos ? fmt::format("{}:{}", bind, port) : fmt::format("[{}]:{}", bind, port);
      if (int rc = ::getaddrinfo(bind.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
        fail("cannot host the rendezvous store on {}: cannot resolve '{}': {}", where, bind, gai_strerror(rc));
      int fd = -1;
      for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next)
        fd = try_bind(ai->ai_family, ai->ai_addr, ai->ai_addrlen, err);
      ::freeaddrinfo(found);
      if (fd < 0) fail("{}", taken(err, where));
      return fd;
    }
    // Dual-stack IPv6 reaches clients of either family; IPv4 alone where v6 is switched off.
    sockaddr_in6 a6{AF_INET6, htons(static_cast<uint16_t>(port)), 0, in6addr_any, 0};
    if (int fd = try_bind(AF_INET6, reinterpret_cast<sockaddr*>(&a6), sizeof a6, err); fd >= 0) return fd;
    if (err == EADDRINUSE || err == EACCES) fail("{}", taken(err, fmt::format("port {}", port)));
    sockaddr_in a4{AF_INET, htons(static_cast<uint16_t>(port)), {htonl(INADDR_ANY)}, {}};
    if (int fd = try_bind(AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof a4, err); fd >= 0) return fd;
    fail("{}", taken(err, fmt::format("port {}", port)));
  }

  void run() {
    std::vector<pollfd> fds;
    auto accept_paused_until = Clock::time_point{};
    for (;;) {
      auto now = Clock::now();
      bool accepting = now >= accept_paused_until;
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      for (auto& [fd, c] : conns_)
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.size() > c.out_pos ? POLLOUT : 0)), 0});
      // Woken for the earliest handshake deadline, or to resume accepting.
      auto wake = accepting ? Clock::time_point::max() : accept_paused_until;
      for (int fd : unauthenticated_) wake = std::min(wake, conns_.at(fd).handshake_deadline);
      int timeout = wake == Clock::time_point::max()
                        ? -1
                        : static_cast<int>(std::clamp<int64_t>(std::chrono::ceil<Millis>(wake - now).count(), 0, 1000));
      if (::poll(fds.data(), fds.size(), timeout) < 0) {
        if (errno != EINTR) log::error("rendezvous store server: poll failed: {}", std::strerror(errno));
        continue;
      }
      if (fds[0].revents) return;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = conns_.find(fds[i].fd);
        if (it == conns_.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(it->first, it->second);
        if (fds[i].revents & POLLOUT) flush(it->first, it->second);
      }
      // After this round's events: accepting may drop (close) unauthenticated connections, so
      // no fd number it frees is reused while the round's poll results are still being read.
      if (fds[1].revents && !accept_all()) accept_paused_until = Clock::now() + Millis(100);
      expire_handshakes();
      // Closed only now, so no fd number is reused while this round's poll results are read.
      for (auto it = conns_.begin(); it != conns_.end();) {
        Conn& c = it->second;
        if (c.dead || (c.closing && c.out_pos == c.out.size())) {
          if (c.pending) unpark(it->first, c);
          if (!c.authenticated) forget_unauthenticated(it->first);
          ::close(it->first);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // False when out of descriptors: the caller pauses accepting instead of spinning on it.
  bool accept_all() {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        set_socket_options(fd);
        Conn& c = conns_[fd];
        c.source = address_of(peer);
        c.handshake.emplace();
        c.handshake_deadline = Clock::now() + options_.handshake_timeout;
        unauthenticated_.push_back(fd);
        send_reply(fd, c, c.handshake->greeting());
        if (unauthenticated_.size() > options_.max_unauthenticated) drop_one_unauthenticated();
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      log::warn("rendezvous store server: accept failed with {} clients connected: {}{}", conns_.size(),
                std::strerror(errno), errno == EMFILE ? " (raise `ulimit -n`)" : "");
      return errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM;
    }
  }

  static std::string address_of(const sockaddr_storage& peer) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (peer.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, text, sizeof text);
    else if (peer.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, text, sizeof text);
    std::string out = text;
    // A v4 client of the dual-stack socket, shown as it connected.
    return out.starts_with("::ffff:") && out.find('.') != std::string::npos ? out.substr(7) : out;
  }

  // Over the bound: the oldest connection of the address holding the most unauthenticated
  // ones goes, so one flooding address cannot push out the ranks of another. A rank dropped
  // this way reconnects (TcpStore retries with backoff).
  void drop_one_unauthenticated() {
    std::unordered_map<std::string_view, size_t> per_source;
    std::string_view busiest;
    for (int fd : unauthenticated_) {
      size_t n = ++per_source[conns_.at(fd).source];
      if (n > per_source[busiest] || busiest.empty()) busiest = conns_.at(fd).source;
    }
    for (int fd : unauthenticated_) {
      Conn& c = conns_.at(fd);
      if (c.source != busiest) continue;
      refused(c, fmt::format("more than {} connections were proving themselves at once, and this was the oldest of "
                             "its address",
                             options_.max_unauthenticated));
      forget_unauthenticated(fd);
      ::close(fd);
      conns_.erase(fd);
      return;
    }
  }

  void forget_unauthenticated(int fd) {
    auto it = std::find(unauthenticated_.begin(), unauthenticated_.end(), fd);
    if (it != unauthenticated_.end()) unauthenticated_.erase(it);
  }

  void expire_handshakes() {
    auto now = Clock::now();
    for (int fd : unauthenticated_) {
      Conn& c = conns_.at(fd);
      if (c.dead || now < c.handshake_deadline) continue;
      // A refused one (closing) was counted when refused; it only failed to read the refusal.
      if (!c.closing)
        refused(c, fmt::format("it did not complete the handshake within {:g} s",
                               std::chrono::duration<double>(options_.handshake_timeout).count()));
      c.dead = true;
    }
  }

  // Logged once per address (the first time), so a flood or a scan cannot fill the log; the
  // total is logged when the store shuts down.
  void refused(const Conn& c, const std::string& why, const std::string& peer = "") {
    ++refused_;
    constexpr size_t kMaxAddresses = 1024;
    if (told_.size() < kMaxAddresses && told_.insert(c.source).second)
      log::warn(
          "rendezvous store: refused a connection from {}{}: {} (further refusals of this address are "
          "counted, not logged)",
          c.source, peer.empty() ? "" : fmt::format(" ({}, by its own account)", peer), why);
    else if (told_.size() == kMaxAddresses && told_.insert("(more)").second)
      log::warn("rendezvous store: refusing connections from more than {} addresses; no longer logging new ones",
                kMaxAddresses);
  }

  // The connection's first frame is its handshake answer: proven, it is served from now on.
  void authenticate(int fd, Conn& c, std::string_view body) {
    auto verdict = c.handshake->answer(options_.key, body);
    c.handshake.reset();
    if (!verdict.ok) {
      refused(c, verdict.why, verdict.peer);
      send_reply(fd, c, verdict.reply);
      c.closing = true;
      return;
    }
    c.authenticated = true;
    forget_unauthenticated(fd);
    send_reply(fd, c, verdict.reply);
  }

  void on_readable(int fd, Conn& c) {
    char buf[65536];
    bool gone = false;  // EOF or reset; requests already received are still answered
    for (;;) {
      // An unproven peer gets one small frame read; the rest waits in the kernel (or is dropped).
      if (!c.authenticated && c.in.size() > store_auth::kMaxHandshakeFrame + 4) break;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0 && !c.closing) c.in.append(buf, static_cast<size_t>(n));
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      gone = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    size_t pos = 0;
    while (!c.closing && c.in.size() - pos >= 4) {
      uint32_t len = load<uint32_t>(c.in.data() + pos);
      // Nothing large is buffered for a peer that has not proven itself.
      const size_t limit = c.authenticated ? kMaxFrame : store_auth::kMaxHandshakeFrame;
      if (len > limit) {
        if (!c.authenticated) refused(c, fmt::format("its first frame claims {} bytes", len));
        refuse(fd, c,
               fmt::format("{} frame of {} bytes exceeds the {}-byte limit", c.authenticated ? "request" : "handshake",
                           len, limit));
      } else if (c.in.size() - pos - 4 < len) {
        break;
      } else if (!c.authenticated) {
        authenticate(fd, c, std::string_view(c.in).substr(pos + 4, len));
        pos += 4 + len;
      } else {
        try {
          handle(fd, c, std::string_view(c.in).substr(pos + 4, len));
        } catch (const Error& e) {
          refuse(fd, c, e.what());
        }
        pos += 4 + len;
      }
    }
    c.in.erase(0, c.closing ? c.in.size() : pos);
    c.dead = c.dead || gone;
  }

  // The byte stream is wrong: say why, then hang up. (An unauthenticated peer's was logged by
  // refused(), once per address.)
  void refuse(int fd, Conn& c, const std::string& why) {
    if (c.authenticated) log::warn("rendezvous store server: dropping a client: {}", why);
    send_reply(fd, c, Frame(kBroken).str(why).done());
    c.closing = true;
  }

  void handle(int fd, Conn& c, std::string_view body) {
    Reader r(body, "request");
    auto op = r.num<uint8_t>("operation");
    if (op == kCancel) {
      r.done();
      if (c.pending) answer_timed_out(fd, c);  // no pending request: its answer already left
      return;
    }
    if (op < kSet || op > kErase)
      fail("unknown operation {} (expected 1-{}): is the client a dscpp TcpStore of the same version?", op,
           static_cast<int>(kCancel));
    if (c.pending) fail("request (op {}) arrived while a get/wait was still pending on the connection", op);
    std::string key = r.str("key", kMaxKey);
    if (op == kSet) {
      std::string value = r.str("value", kMaxValue);
      r.done();
      data_[key] = std::move(value);
      send_reply(fd, c, Frame(kOk).done());
      key_appeared(key);
    } else if (op == kAdd) {
      auto delta = r.num<int64_t>("delta");
      r.done();
      int64_t sum = 0;
      if (auto it = data_.find(key); it != data_.end()) {
        const std::string& v = it->second;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), sum);
        // The caller's mistake, not the stream's: answer kFailed and keep the connection.
        if (ec != std::errc() || end != v.data() + v.size())
          return send_reply(
              fd, c,
              Frame(kFailed).str(fmt::format("the key holds {}, not a decimal integer counter", show(v))).done());
      }
      if (__builtin_add_overflow(sum, delta, &sum))
        return send_reply(fd, c,
                          Frame(kFailed).str(fmt::format("the counter at {} would overflow int64", show(key))).done());
      data_[key] = std::to_string(sum);
      send_reply(fd, c, Frame(kOk).num(sum).done());
      key_appeared(key);
    } else if (op == kCheck) {
      r.done();
      send_reply(fd, c, Frame(kOk).num<uint8_t>(data_.count(key) ? 1 : 0).done());
    } else if (op == kErase) {
      r.done();
      data_.erase(key);
      send_reply(fd, c, Frame(kOk).done());
    } else {  // get or wait
      c.keys.assign(1, std::move(key));
      for (uint32_t i = 1, n = op == kWait ? r.num<uint32_t>("key count") : 1; i < n; ++i)
        c.keys.push_back(r.str("key", kMaxKey));
      r.done();
      c.pending = true;
      c.op = op;
      c.cursor = 0;
      advance(fd, c);
    }
  }

  // Answers the parked get/wait if every key exists now; otherwise parks it on the next missing key.
  void advance(int fd, Conn& c) {
    while (c.cursor < c.keys.size() && data_.count(c.keys[c.cursor])) ++c.cursor;
    if (c.cursor == c.keys.size()) {
      // Keys passed earlier may have been erased since; look once more before answering.
      while (c.cursor > 0 && data_.count(c.keys[c.cursor - 1])) --c.cursor;
      if (c.cursor == 0) {
        Frame f(kOk);
        if (c.op == kGet) f.str(data_.at(c.keys[0]));
        if (c.op == kWait) f.num(uint32_t{0});
        c.pending = false;
        c.keys.clear();
        return send_reply(fd, c, f.done());
      }
      --c.cursor;
    }
    waiters_[c.keys[c.cursor]].insert(fd);
  }

  void unpark(int fd, Conn& c) {
    auto it = waiters_.find(c.keys[c.cursor]);
    if (it != waiters_.end() && it->second.erase(fd) && it->second.empty()) waiters_.erase(it);
    c.pending = false;
  }

  void answer_timed_out(int fd, Conn& c) {
    unpark(fd, c);
    std::vector<const std::string*> missing;
    for (const auto& k : c.keys)
      if (!data_.count(k)) missing.push_back(&k);
    Frame f(kTimedOut);
    f.num(static_cast<uint32_t>(missing.size()));
    for (const auto* k : missing) f.str(*k);
    send_reply(fd, c, f.done());
    c.keys.clear();
  }

  void key_appeared(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    auto fds = std::move(it->second);
    waiters_.erase(it);
    for (int fd : fds) {
      auto c = conns_.find(fd);
      if (c != conns_.end() && c->second.pending) advance(fd, c->second);
    }
  }

  void send_reply(int fd, Conn& c, const std::string& frame) {
    c.out.append(frame);
    flush(fd, c);
  }

  void flush(int fd, Conn& c) {
    while (c.out_pos < c.out.size() && !c.dead) {
      ssize_t n = ::send(fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n > 0) c.out_pos += static_cast<size_t>(n);
      if (n == 0 || (n < 0 && errno != EINTR)) c.dead = true;
    }
    if (c.out_pos == c.out.size()) c.out_pos = (c.out.clear(), 0);
  }

  ServerOptions options_;
  int listen_fd_ = -1, wake_fd_ = -1, port_ = 0;
  std::vector<int> unauthenticated_;      // in accept order; at most max_unauthenticated
  std::unordered_set<std::string> told_;  // addresses whose refusal was logged
  size_t refused_ = 0;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<int, Conn> conns_;
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<StoreServer> StoreServer::start(const ServerOptions& options) {
  return std::make_unique<PollServer>(options);
}

}  // namespace dscpp::comm::store_wire
