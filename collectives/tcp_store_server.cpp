// The rendezvous store's server: one poll() loop on its own thread, holding the data.
#include "collectives/tcp_store_wire.h"
#include "core/log.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <charconv>
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
  explicit PollServer(int port) {
    listen_fd_ = open_listener(port);
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
  };

  static int open_listener(int port) {
    // Dual-stack IPv6 reaches clients of either family; IPv4 alone where v6 is switched off.
    for (int family : {AF_INET6, AF_INET}) {
      int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int one = 1, zero = 0;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // fails harmlessly on AF_INET
      sockaddr_in6 a6{AF_INET6, htons(static_cast<uint16_t>(port)), 0, in6addr_any, 0};
      sockaddr_in a4{AF_INET, htons(static_cast<uint16_t>(port)), {htonl(INADDR_ANY)}, {}};
      auto* a = family == AF_INET6 ? reinterpret_cast<sockaddr*>(&a6) : reinterpret_cast<sockaddr*>(&a4);
      if (::bind(fd, a, family == AF_INET6 ? sizeof a6 : sizeof a4) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
      int err = errno;
      ::close(fd);
      if (err == EADDRINUSE || err == EACCES || family == AF_INET)
        fail("cannot host the rendezvous store on port {}: {} (is another job using MASTER_PORT={}?)", port,
             std::strerror(err), port);
    }
    fail("cannot host the rendezvous store on port {}: no IPv4 or IPv6 socket could be created", port);
  }

  void run() {
    std::vector<pollfd> fds;
    auto accept_paused_until = Clock::time_point{};
    for (;;) {
      bool accepting = Clock::now() >= accept_paused_until;
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      for (auto& [fd, c] : conns_)
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.size() > c.out_pos ? POLLOUT : 0)), 0});
      if (::poll(fds.data(), fds.size(), accepting ? -1 : 100) < 0) {
        if (errno != EINTR) log::error("rendezvous store server: poll failed: {}", std::strerror(errno));
        continue;
      }
      if (fds[0].revents) return;
      if (fds[1].revents && !accept_all()) accept_paused_until = Clock::now() + Millis(100);
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = conns_.find(fds[i].fd);
        if (it == conns_.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(it->first, it->second);
        if (fds[i].revents & POLLOUT) flush(it->first, it->second);
      }
      // Closed only now, so no fd number is reused while this round's poll results are read.
      for (auto it = conns_.begin(); it != conns_.end();) {
        Conn& c = it->second;
        if (c.dead || (c.closing && c.out_pos == c.out.size())) {
          if (c.pending) unpark(it->first, c);
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
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        set_socket_options(fd);
        conns_.emplace(fd, Conn{});
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      log::warn("rendezvous store server: accept failed with {} clients connected: {}{}", conns_.size(),
                std::strerror(errno), errno == EMFILE ? " (raise `ulimit -n`)" : "");
      return errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM;
    }
  }

  void on_readable(int fd, Conn& c) {
    char buf[65536];
    bool gone = false;  // EOF or reset; requests already received are still answered
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0 && !c.closing) c.in.append(buf, static_cast<size_t>(n));
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      gone = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    size_t pos = 0;
    while (!c.closing && c.in.size() - pos >= 4) {
      uint32_t len = load<uint32_t>(c.in.data() + pos);
      if (len > kMaxFrame) {
        refuse(fd, c, fmt::format("request frame of {} bytes exceeds the {}-byte limit", len, kMaxFrame));
      } else if (c.in.size() - pos - 4 < len) {
        break;
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

  // The byte stream is wrong: say why, then hang up.
  void refuse(int fd, Conn& c, const std::string& why) {
    log::warn("rendezvous store server: dropping a client: {}", why);
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

  int listen_fd_ = -1, wake_fd_ = -1, port_ = 0;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<int, Conn> conns_;
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<StoreServer> StoreServer::start(int port) { return std::make_unique<PollServer>(port); }

}  // namespace dscpp::comm::store_wire
