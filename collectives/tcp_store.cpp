// TcpStore's client: a pool of connections to the server rank 0 runs (tcp_store_server.cpp),
// each authenticated when opened (store_auth.h); the wire format is in tcp_store_wire.h.
#include "collectives/tcp_store.h"

#include "collectives/tcp_store_wire.h"
#include "core/job_secret.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

namespace dscpp::comm {
using namespace store_wire;

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

  std::string key;  // what both sides prove: the secret, or the public insecure key

  explicit Impl(const TcpStoreOptions& o) : options(o) {
    if (o.secret.empty() && !o.insecure) fail("rendezvous store: {}", no_job_secret_message());
    key = o.secret.empty() ? std::string(store_auth::kInsecureKey) : o.secret;
    if (o.host_server) {
      ServerOptions so;
      so.port = o.port;
      so.bind_addr = listen_address(o.addr, o.bind_addr);
      so.key = key;
      so.handshake_timeout = o.handshake_timeout;
      so.max_unauthenticated = o.max_unauthenticated;
      server = StoreServer::start(so);
    }
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

  // Where the server listens (TcpStoreOptions::bind_addr): "" for every interface.
  static std::string listen_address(const std::string& addr, const std::string& bind) {
    if (bind == "0.0.0.0" || bind == "::" || bind == "*") return "";
    if (!bind.empty()) return bind;
    unsigned char raw[sizeof(in6_addr)];
    bool literal = ::inet_pton(AF_INET, addr.c_str(), raw) == 1 || ::inet_pton(AF_INET6, addr.c_str(), raw) == 1;
    if (literal || addr == "localhost") return addr;
    // Debian-style hosts map their own name to 127.0.1.1, while other hosts resolve it to an
    // address they can reach: listening on loopback would lock them out.
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(addr.c_str(), nullptr, &hints, &found) != 0 || !found) return addr;  // the bind names it
    bool loopback = false;
    if (found->ai_family == AF_INET)
      loopback = (ntohl(reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (found->ai_family == AF_INET6)
      loopback = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr);
    ::freeaddrinfo(found);
    if (!loopback) return addr;
    log::warn(
        "rendezvous store: MASTER_ADDR={} resolves to a loopback address on this host, which other hosts "
        "cannot reach, so the store listens on every interface; give an IP address (--master_addr) or set "
        "DSCPP_STORE_BIND to choose",
        addr);
    return "";
  }

  int open_connection() {
    auto start = Clock::now();
    auto deadline = start + options.connect_timeout;
    thread_local std::minstd_rand jitter(std::random_device{}());
    std::string last_error = "no attempt made";
    int last_errno = 0;
    int drops = 0;  // handshakes the server cut short: back off further after each
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (!gone.empty()) throw PeerFailure(gone);
      }
      int fd = try_connect(deadline, last_error, last_errno);
      if (fd >= 0) {
        std::string lost = handshake(fd);
        if (lost.empty()) {
          connected_once = true;
          return fd;
        }
        ::close(fd);
        last_error = lost;
        last_errno = 0;
        ++drops;
      }
      if (connected_once && last_errno == ECONNREFUSED)
        throw declare_gone(fmt::format("it served this process earlier, now connecting says: {}", last_error));
      if (Clock::now() >= deadline)
        fail("rendezvous store at {} (hosted by rank 0) not reachable after {:.1f} s: {}", where, seconds_since(start),
             last_error);
      // Jittered so thousands of ranks waiting for a late host do not retry in lockstep; longer
      // after each dropped handshake (the server is shedding a flood of connections).
      auto base = Millis(50) * (1 << std::min(drops, 4));
      auto pause = base + Millis(jitter() % base.count());
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    }
  }

  // Proves the secret on a fresh connection and checks the server's proof. "" when both hold;
  // else why the connection was lost (the caller retries). Throws when the store refused this
  // client or is not this job's store: retrying would get the same answer.
  std::string handshake(int fd) {
    auto deadline = Clock::now() + options.handshake_timeout;
    store_auth::ClientHandshake hs(options.name);
    try {
      std::string banner, challenge, reply;
      if (std::string lost = read_handshake_frame(fd, banner, deadline); !lost.empty()) return lost;
      if (std::string lost = read_handshake_frame(fd, challenge, deadline); !lost.empty()) return lost;
      std::string hello = hs.answer(key, banner, challenge);
      for (std::string_view out = hello; !out.empty();) {
        ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
        if (n > 0) out.remove_prefix(static_cast<size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return fmt::format("the handshake could not be sent: {}", std::strerror(errno));
        if (n < 0 && errno != EINTR && poll_until(fd, POLLOUT, deadline) == 0) return "the handshake could not be sent";
      }
      if (std::string lost = read_handshake_frame(fd, reply, deadline); !lost.empty()) return lost;
      hs.check_reply(key, reply);
      return "";
    } catch (const Error& e) {
      ::close(fd);
      fail("rendezvous store at {} (hosted by rank 0): the handshake of {} failed: {}", where, options.name, e.what());
    }
  }

  // One handshake frame's body into `out`; "" or why the connection was lost.
  std::string read_handshake_frame(int fd, std::string& out, Clock::time_point deadline) {
    char header[4];
    auto read_exactly = [&](char* buf, size_t n) -> std::string {
      for (size_t got = 0; got < n;) {
        if (poll_until(fd, POLLIN, deadline) == 0)
          return fmt::format(
              "no handshake from the store within {:g} s (an older dscpp build, wire version 1, "
              "listening there?)",
              seconds(options.handshake_timeout));
        ssize_t r = ::recv(fd, buf + got, n - got, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
          return fmt::format(
              "the store closed the connection during the handshake ({}; it drops connections that "
              "are slow to prove themselves when many are waiting); retrying",
              r == 0 ? "end of stream" : std::strerror(errno));
        got += static_cast<size_t>(std::max<ssize_t>(r, 0));
      }
      return "";
    };
    if (std::string lost = read_exactly(header, 4); !lost.empty()) return lost;
    uint32_t len = load<uint32_t>(header);
    if (len == 0 || len > store_auth::kMaxHandshakeFrame)
      fail(
          "expected a handshake frame of 1-{} bytes, found a length of {} (is something other than a dscpp store "
          "listening there?)",
          store_auth::kMaxHandshakeFrame, len);
    out.resize(len);
    return read_exactly(out.data(), len);
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

  // The first reason the host is lost is kept: every later call fails at once with it.
  PeerFailure lost(const std::string& reason) {
    std::lock_guard lock(mutex);
    if (gone.empty()) gone = reason;
    return PeerFailure(gone);
  }

  PeerFailure declare_gone(const std::string& detail) {
    return lost(fmt::format("rendezvous store at {}: the store's host (rank 0) closed the connection ({}); rank 0 "
                            "exited or crashed, see its log",
                            where, detail));
  }

  static double seconds(Millis t) { return std::chrono::duration<double>(t).count(); }

  // The host is alive but answers nothing: later calls (a hang report's forensics, the progress
  // publisher) fail at once instead of waiting out the reply timeout again.
  [[noreturn]] void stalled(const std::string& detail) {
    throw lost(fmt::format("rendezvous store at {}: {}; the store's host (rank 0) is alive but stalled (stopped, "
                           "swapping or wedged)",
                           where, detail));
  }

  [[noreturn]] void io_failed(int err, const std::string& what) {
    if (err == 0 || err == ECONNRESET || err == EPIPE || err == ETIMEDOUT || err == EHOSTUNREACH ||
        err == ENETUNREACH || err == ECONNABORTED)
      throw declare_gone(fmt::format("{} during {}", err == 0 ? "end of stream" : std::strerror(err), what));
    fail("rendezvous store at {}: {} failed: {}", where, what, std::strerror(err));
  }

  void send_all(int fd, std::string_view data, const std::string& what) {
    auto deadline = Clock::now() + options.reply_timeout;
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) data.remove_prefix(static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) io_failed(errno, what);
      if (n < 0 && errno != EINTR && poll_until(fd, POLLOUT, deadline) == 0)
        stalled(fmt::format("{} could not be sent within {:g} s (the host is not reading)", what,
                            seconds(options.reply_timeout)));
    }
  }

  // False if `first_byte_deadline` passes before any of the reply arrives; once it starts, the
  // rest must follow within the reply timeout.
  bool read_frame(int fd, std::string& out, Clock::time_point first_byte_deadline, const std::string& what) {
    char header[4];
    bool started = false;
    auto deadline = first_byte_deadline;
    auto read_into = [&](char* buf, size_t n) {
      for (size_t got = 0; got < n;) {
        if (poll_until(fd, POLLIN, deadline) == 0) {
          if (!started) return false;
          stalled(fmt::format("the reply to {} stalled for {:g} s part-way", what, seconds(options.reply_timeout)));
        }
        ssize_t r = ::recv(fd, buf + got, n - got, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
          io_failed(r == 0 ? 0 : errno, what);
        if (r > 0 && !std::exchange(started, true)) deadline = Clock::now() + options.reply_timeout;
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
      if (!gone.empty()) throw PeerFailure(fmt::format("cannot {}: {}", what, gone));
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
    if (!read_frame(fd, reply, cancel_at ? *cancel_at : Clock::now() + options.reply_timeout, what)) {
      if (!cancel_at)
        stalled(fmt::format("no reply to {} within {:g} s", what, seconds(options.reply_timeout)));
      send_all(fd, Frame(kCancel).done(), what);
      if (!read_frame(fd, reply, Clock::now() + options.reply_timeout, what))
        stalled(fmt::format("no answer to cancelling {} within {:g} s", what, seconds(options.reply_timeout)));
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
