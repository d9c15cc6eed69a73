// TcpStore: a poll()-driven server thread on rank 0 and a pooled, thread-safe client.
//
// Wire format: every message is a frame, a little-endian u32 body length followed by the body.
// Requests start with an op byte, replies with a status byte; strings are u32 length + bytes,
// integers are little-endian i64. A connection carries one request at a time, except that a
// client whose get/wait deadline passed sends CANCEL; the server then answers the parked
// request with the keys still missing, or ignores the cancel if the answer already left, so
// either way exactly one reply follows.
#include "collectives/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/log.h"

namespace dscpp::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = size_t{64} << 20;
// A wait() for a few thousand ranks fits easily; anything larger is not a dscpp client.
constexpr size_t kMaxFrame = kMaxValue + 2 * kMaxKey + 64;
// Bounds every exchange except the caller-chosen get/wait timeouts, so a stalled host (alive
// but not answering) still turns into an error. Vanished hosts are caught sooner by keepalive.
constexpr auto kReplyTimeout = std::chrono::seconds(300);
constexpr size_t kIdleConnections = 8;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kErase, kCancel };
// kFailed: the request was wrong (bad counter); kBroken: the stream was, and the server hangs up.
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2, kBroken = 3 };

// Builds one frame: Frame(kSet).str(key).str(value).done().
class Frame {
 public:
  explicit Frame(uint8_t code) : bytes_(4, '\0') { bytes_.push_back(static_cast<char>(code)); }
  template <typename T>
  Frame& num(T v) {
    for (size_t i = 0; i < sizeof v; ++i) bytes_.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
    return *this;
  }
  Frame& str(std::string_view s) {
    num(static_cast<uint32_t>(s.size())).bytes_.append(s);
    return *this;
  }
  std::string done() {
    for (size_t i = 0; i < 4; ++i) bytes_[i] = static_cast<char>((bytes_.size() - 4) >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
};

template <typename T>
T load(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return static_cast<T>(v);
}

// Keys can be 4 KiB; messages show enough to recognise one.
std::string show(std::string_view s) {
  return s.size() <= 120 ? fmt::format("'{}'", s) : fmt::format("'{}...' ({} bytes)", s.substr(0, 100), s.size());
}

class Reader {
 public:
  Reader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}
  template <typename T>
  T num(const char* field) {
    need(sizeof(T), field);
    pos_ += sizeof(T);
    return load<T>(data_.data() + pos_ - sizeof(T));
  }
  std::string str(const char* field, size_t limit) {
    uint32_t n = num<uint32_t>(field);
    if (n > limit) fail("{}: {} of {} bytes exceeds the {}-byte limit", what_, field, n, limit);
    need(n, field);
    pos_ += n;
    return std::string(data_.substr(pos_ - n, n));
  }
  void done() {
    if (pos_ != data_.size())
      fail("{}: expected the message to end after {} bytes, found {} more", what_, pos_, data_.size() - pos_);
  }

 private:
  void need(size_t n, const char* field) {
    if (data_.size() - pos_ < n)
      fail("{}: expected {} bytes for the {}, found {}", what_, n, field, data_.size() - pos_);
  }
  std::string_view data_;
  std::string what_;
  size_t pos_ = 0;
};

void set_socket_options(int fd) {
  // A host that vanishes without a FIN/RST (power loss, network partition) is noticed in
  // ~25 s through keepalive when idle, and TCP_USER_TIMEOUT when data is unacknowledged.
  const int options[][3] = {{IPPROTO_TCP, TCP_NODELAY, 1},   {SOL_SOCKET, SO_KEEPALIVE, 1},
                            {IPPROTO_TCP, TCP_KEEPIDLE, 10}, {IPPROTO_TCP, TCP_KEEPINTVL, 5},
                            {IPPROTO_TCP, TCP_KEEPCNT, 3},   {IPPROTO_TCP, TCP_USER_TIMEOUT, 30000}};
  for (const auto& o : options) ::setsockopt(fd, o[0], o[1], &o[2], sizeof o[2]);
}

// Returns the revents, or 0 when the deadline passed first.
short poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30)));
    if (n > 0) return p.revents;
    if (n < 0 && errno != EINTR) fail("poll on a store connection failed: {}", std::strerror(errno));
    if (n == 0 && Clock::now() >= deadline) return 0;
  }
}

Clock::time_point deadline_after(Millis timeout) {
  // Callers pass Millis::max() for "effectively forever"; keep the arithmetic from overflowing.
  return Clock::now() + std::clamp(timeout, Millis(0), Millis(std::chrono::hours(24 * 365)));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------------
// Server: owns the data; touched only by its own thread, so it needs no locks.

class StoreServer {
 public:
  explicit StoreServer(int port) {
    listen_fd_ = open_listener(port);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) fail("rendezvous store: eventfd failed: {}", std::strerror(errno));
    sockaddr_in6 addr{};  // sin6_port and sin_port sit at the same offset
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin6_port);
    thread_ = std::thread([this] { run(); });
  }
  ~StoreServer() {
    uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) continue;
    thread_.join();
    for (auto& [fd, c] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_fd_);
  }
  int port() const { return port_; }

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

// ---------------------------------------------------------------------------------------------
// Client: a pool of connections, so a get() blocking on one thread never delays another thread's
// set/add/check, which simply takes (or opens) a different connection.

struct TcpStore::Impl {
  TcpStoreOptions options;
  std::unique_ptr<StoreServer> server;
  int port = 0;
  std::string where;  // "host:port" for messages
  std::mutex mutex;
  std::vector<int> idle;
  std::string gone;  // set once the host is known to have closed on us; later calls fail fast
  std::atomic<bool> connected_once{false};

  explicit Impl(const TcpStoreOptions& o) : options(o) {
    if (o.host_server) server = std::make_unique<StoreServer>(o.port);
    port = server ? server->port() : o.port;
    where = o.addr.find(':') == std::string::npos ? fmt::format("{}:{}", o.addr, port)
                                                  : fmt::format("[{}]:{}", o.addr, port);
    // Connect now: a missing host is reported at construction, where the job expects to wait.
    idle.push_back(open_connection());
  }
  ~Impl() {
    for (int fd : idle) ::close(fd);
    server.reset();
  }

  int open_connection() {
    auto start = Clock::now();
    auto deadline = start + options.connect_timeout;
    thread_local std::minstd_rand jitter(std::random_device{}());
    std::string last_error = "no attempt made";
    int last_errno = 0;
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (!gone.empty()) throw Error(gone);
      }
      int fd = try_connect(deadline, last_error, last_errno);
      if (fd >= 0) {
        connected_once = true;
        return fd;
      }
      if (connected_once && last_errno == ECONNREFUSED)
        throw declare_gone(fmt::format("it served this process earlier, now connecting says: {}", last_error));
      if (Clock::now() >= deadline)
        fail("rendezvous store at {} (hosted by rank 0) not reachable after {:.1f} s: {}", where, seconds_since(start),
             last_error);
      // Jittered so thousands of ranks waiting for a late host do not retry in lockstep.
      auto pause = Millis(50 + jitter() % 50);
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    }
  }

  int try_connect(Clock::time_point deadline, std::string& error, int& code) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    // Resolved on every attempt: the host's name may only become resolvable once it is up.
    if (int rc = ::getaddrinfo(options.addr.c_str(), std::to_string(port).c_str(), &hints, &list); rc != 0) {
      error = fmt::format("cannot resolve '{}': {}", options.addr, gai_strerror(rc));
      code = 0;
      return -1;
    }
    int result = -1;
    for (addrinfo* ai = list; ai && result < 0; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      int err = fd < 0 ? errno : ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;  // no socket: its errno
      if (fd >= 0 && (err == EINPROGRESS || err == EINTR)) {
        socklen_t len = sizeof err;
        if (poll_until(fd, POLLOUT, std::max(deadline, Clock::now() + Millis(10))) == 0)
          err = ETIMEDOUT;
        else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          err = errno;
      }
      if (err == 0) {
        set_socket_options(fd);
        result = fd;
      } else {
        error = std::strerror(code = err);
        if (fd >= 0) ::close(fd);
      }
    }
    ::freeaddrinfo(list);
    return result;
  }

  Error declare_gone(const std::string& detail) {
    std::lock_guard lock(mutex);
    if (gone.empty())
      gone = fmt::format(
          "rendezvous store at {}: the store's host (rank 0) closed the connection ({}); rank 0 exited or "
          "crashed, see its log",
          where, detail);
    return Error(gone);
  }

  [[noreturn]] void io_failed(int err, const std::string& what) {
    if (err == 0 || err == ECONNRESET || err == EPIPE || err == ETIMEDOUT || err == EHOSTUNREACH ||
        err == ENETUNREACH || err == ECONNABORTED)
      throw declare_gone(fmt::format("{} during {}", err == 0 ? "end of stream" : std::strerror(err), what));
    fail("rendezvous store at {}: {} failed: {}", where, what, std::strerror(err));
  }

  void send_all(int fd, std::string_view data, const std::string& what) {
    auto deadline = Clock::now() + kReplyTimeout;
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) data.remove_prefix(static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) io_failed(errno, what);
      if (n < 0 && errno != EINTR && poll_until(fd, POLLOUT, deadline) == 0)
        fail("rendezvous store at {}: {} could not be sent within {} s (the host is not reading)", where, what,
             kReplyTimeout.count());
    }
  }

  // False if `first_byte_deadline` passes before any of the reply arrives; once it starts, the
  // rest must follow within kReplyTimeout.
  bool read_frame(int fd, std::string& out, Clock::time_point first_byte_deadline, const std::string& what) {
    char header[4];
    bool started = false;
    auto deadline = first_byte_deadline;
    auto read_into = [&](char* buf, size_t n) {
      for (size_t got = 0; got < n;) {
        if (poll_until(fd, POLLIN, deadline) == 0) {
          if (!started) return false;
          fail("rendezvous store at {}: the reply to {} stalled for {} s part-way", where, what, kReplyTimeout.count());
        }
        ssize_t r = ::recv(fd, buf + got, n - got, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
          io_failed(r == 0 ? 0 : errno, what);
        if (r > 0 && !std::exchange(started, true)) deadline = Clock::now() + kReplyTimeout;
        got += static_cast<size_t>(std::max<ssize_t>(r, 0));
      }
      return true;
    };
    if (!read_into(header, 4)) return false;
    uint32_t len = load<uint32_t>(header);
    if (len == 0 || len > kMaxFrame)
      fail(
          "rendezvous store at {}: malformed reply to {}: expected a frame of 1-{} bytes, found a length of {} "
          "(is something other than a dscpp store listening there?)",
          where, what, kMaxFrame, len);
    out.resize(len);
    read_into(out.data(), len);
    return true;
  }

  // One request/reply exchange on a pooled connection. `cancel_at` (get/wait) is when to give up
  // waiting; `parse` reads the reply past its status byte. A connection goes back to the pool
  // only after a complete, well-formed exchange.
  template <typename Parse>
  auto call(const std::string& request, const std::string& what, const Clock::time_point* cancel_at, Parse parse) {
    int fd = -1;
    {
      std::lock_guard lock(mutex);
      if (!gone.empty()) throw Error(fmt::format("cannot {}: {}", what, gone));
      if (!idle.empty()) {
        fd = idle.back();
        idle.pop_back();
      }
    }
    if (fd < 0) fd = open_connection();
    bool reusable = false;
    struct Release {
      Impl& self;
      int fd;
      bool& reusable;
      ~Release() {
        std::lock_guard lock(self.mutex);
        if (reusable && self.idle.size() < kIdleConnections)
          self.idle.push_back(fd);
        else
          ::close(fd);
      }
    } release{*this, fd, reusable};

    send_all(fd, request, what);
    std::string reply;
    if (!read_frame(fd, reply, cancel_at ? *cancel_at : Clock::now() + kReplyTimeout, what)) {
      if (!cancel_at)
        fail("rendezvous store at {}: no reply to {} within {} s (the host is alive but stalled?)", where, what,
             kReplyTimeout.count());
      send_all(fd, Frame(kCancel).done(), what);
      if (!read_frame(fd, reply, Clock::now() + kReplyTimeout, what))
        fail("rendezvous store at {}: no answer to cancelling {} within {} s", where, what, kReplyTimeout.count());
    }
    Reader r(reply, fmt::format("rendezvous store at {}: malformed reply to {}", where, what));
    uint8_t status = r.num<uint8_t>("status");
    if (status == kFailed || status == kBroken) {
      std::string why = r.str("message", kMaxFrame);
      r.done();
      reusable = status == kFailed;
      fail("rendezvous store at {} refused {}: {}", where, what, why);
    }
    if (status != kOk && !(status == kTimedOut && cancel_at))
      fail("rendezvous store at {}: malformed reply to {}: expected status {}, found {}", where, what,
           cancel_at ? "0 or 1" : "0", status);
    auto result = parse(status, r);
    r.done();
    reusable = true;
    return result;
  }

  static void check_key(const std::string& key, const char* op) {
    if (key.size() > kMaxKey)
      fail("store {}: key {} is {} bytes, above the {}-byte limit", op, show(key), key.size(), kMaxKey);
  }

  std::vector<std::string> read_keys(Reader& r, size_t at_most) {
    uint32_t n = r.num<uint32_t>("missing-key count");
    if (n > at_most)
      fail("rendezvous store at {}: reply names {} missing keys, but only {} were asked", where, n, at_most);
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(r.str("missing key", kMaxKey));
    return keys;
  }
};

TcpStore::TcpStore(const TcpStoreOptions& options) : impl_(std::make_unique<Impl>(options)) {}
TcpStore::~TcpStore() = default;

int TcpStore::port() const {
  return impl_->port;
}

void TcpStore::set(const std::string& key, std::string_view value) {
  Impl::check_key(key, "set");
  if (value.size() > kMaxValue)
    fail("store set({}): value of {} bytes exceeds the {}-byte limit", show(key), value.size(), kMaxValue);
  impl_->call(Frame(kSet).str(key).str(value).done(), fmt::format("set({})", show(key)), nullptr,
              [](uint8_t, Reader&) { return 0; });
}

std::string TcpStore::get(const std::string& key, Millis timeout) {
  Impl::check_key(key, "get");
  auto start = Clock::now();
  auto deadline = deadline_after(timeout);
  bool timed_out = false;
  std::string value = impl_->call(Frame(kGet).str(key).done(), fmt::format("get({})", show(key)), &deadline,
                                  [&](uint8_t status, Reader& r) -> std::string {
                                    if (status == kOk) return r.str("value", kMaxValue);
                                    timed_out = true;
                                    impl_->read_keys(r, 1);
                                    return {};
                                  });
  if (timed_out)
    throw StoreTimeout(
        fmt::format("store: key {} did not appear within {:.1f} s (rendezvous store at {}, hosted by rank 0)",
                    show(key), seconds_since(start), impl_->where),
        {key});
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Impl::check_key(key, "add");
  return impl_->call(Frame(kAdd).str(key).num(delta).done(), fmt::format("add({}, {})", show(key), delta), nullptr,
                     [](uint8_t, Reader& r) { return r.num<int64_t>("sum"); });
}

std::vector<std::string> TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  if (keys.empty()) return {};
  for (const auto& k : keys) Impl::check_key(k, "wait");
  auto deadline = deadline_after(timeout);
  // The first key travels where every other request has its key; the count follows it.
  Frame f(kWait);
  f.str(keys[0]).num(static_cast<uint32_t>(keys.size()));
  for (size_t i = 1; i < keys.size(); ++i) f.str(keys[i]);
  std::string more = keys.size() > 1 ? fmt::format(" and {} more", keys.size() - 1) : "";
  return impl_->call(f.done(), fmt::format("wait({}{})", show(keys[0]), more), &deadline,
                     [&](uint8_t, Reader& r) { return impl_->read_keys(r, keys.size()); });
}

bool TcpStore::check(const std::string& key) {
  Impl::check_key(key, "check");
  return impl_->call(Frame(kCheck).str(key).done(), fmt::format("check({})", show(key)), nullptr,
                     [](uint8_t, Reader& r) { return r.num<uint8_t>("flag") != 0; });
}

void TcpStore::erase(const std::string& key) {
  Impl::check_key(key, "erase");
  impl_->call(Frame(kErase).str(key).done(), fmt::format("erase({})", show(key)), nullptr,
              [](uint8_t, Reader&) { return 0; });
}

}  // namespace dscpp::comm
