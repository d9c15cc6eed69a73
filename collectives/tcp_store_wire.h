// The rendezvous store's wire format and socket helpers, shared by its server
// (tcp_store_server.cpp) and client (tcp_store.cpp).
//
// Every message is a frame, a little-endian u32 body length followed by the body. Requests
// start with an op byte, replies with a status byte; strings are u32 length + bytes, integers
// are little-endian i64. A connection carries one request at a time, except that a client
// whose get/wait deadline passed sends CANCEL; the server then answers the parked request with
// the keys still missing, or ignores the cancel if the answer already left, so either way
// exactly one reply follows. Before any request, a connection goes through the handshake of
// store_auth.h (wire version 2), which proves on both sides that the peer holds the job's secret.
#pragma once

#include "collectives/store.h"
#include "collectives/store_auth.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace dscpp::comm::store_wire {


using Clock = std::chrono::steady_clock;
constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = size_t{64} << 20;
// A wait() for a few thousand ranks fits easily; anything larger is not a dscpp client.
constexpr size_t kMaxFrame = kMaxValue + 2 * kMaxKey + 64;
// The default bound on every exchange except the caller-chosen get/wait timeouts
// (TcpStoreOptions::reply_timeout), so a stalled host (alive but not answering) still turns
// into an error. Vanished hosts are caught sooner by keepalive.
constexpr auto kReplyTimeout = std::chrono::seconds(300);
constexpr size_t kIdleConnections = 8;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kErase, kCancel, kHello, kChallenge };
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
inline T load(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return static_cast<T>(v);
}

// Keys can be 4 KiB; messages show enough to recognise one.
inline std::string show(std::string_view s) {
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

inline void set_socket_options(int fd) {
  // A host that vanishes without a FIN/RST (power loss, network partition) is noticed in
  // ~25 s through keepalive when idle, and TCP_USER_TIMEOUT when data is unacknowledged.
  const int options[][3] = {{IPPROTO_TCP, TCP_NODELAY, 1},   {SOL_SOCKET, SO_KEEPALIVE, 1},
                            {IPPROTO_TCP, TCP_KEEPIDLE, 10}, {IPPROTO_TCP, TCP_KEEPINTVL, 5},
                            {IPPROTO_TCP, TCP_KEEPCNT, 3},   {IPPROTO_TCP, TCP_USER_TIMEOUT, 30000}};
  for (const auto& o : options) ::setsockopt(fd, o[0], o[1], &o[2], sizeof o[2]);
}

// Returns the revents, or 0 when the deadline passed first.
inline short poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30)));
    if (n > 0) return p.revents;
    if (n < 0 && errno != EINTR) fail("poll on a store connection failed: {}", std::strerror(errno));
    if (n == 0 && Clock::now() >= deadline) return 0;
  }
}

inline Clock::time_point deadline_after(Millis timeout) {
  // Callers pass Millis::max() for "effectively forever"; keep the arithmetic from overflowing.
  return Clock::now() + std::clamp(timeout, Millis(0), Millis(std::chrono::hours(24 * 365)));
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct ServerOptions {
  int port = 0;           // 0: any free port
  std::string bind_addr;  // an address of this host, or "" for every interface
  std::string key;        // what every client must prove (store_auth.h)
  Millis handshake_timeout{store_auth::kHandshakeTimeout};
  size_t max_unauthenticated = store_auth::kMaxUnauthenticated;
};

// The server side: rank 0 runs one on its own thread for the life of its TcpStore.
class StoreServer {
 public:
  static std::unique_ptr<StoreServer> start(const ServerOptions& options);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
};

}  // namespace dscpp::comm::store_wire
