// A rendezvous-store client on a bare blocking socket, for tests that must send what TcpStore
// never would: requests without a handshake, wrong proofs, a recorded handshake replayed, or
// thousands of hand-built requests. Frames and proofs come from collectives' own wire helpers
// (tcp_store_wire.h, store_auth.h), so only the misbehaviour is the test's.
#pragma once

#include "collectives/store_auth.h"
#include "collectives/tcp_store_wire.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>

namespace dscpp::test {

// A connected blocking TCP socket to host:port, or -1.
inline int connect_tcp(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) ::close(fd), fd = -1;
  }
  ::freeaddrinfo(found);
  return fd;
}

inline bool send_bytes(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The next frame's body, or nullopt when the peer closed (or reset) first or nothing came
// within `timeout_ms`.
inline std::optional<std::string> read_body(int fd, int timeout_ms = 10000) {
  auto exactly = [&](char* buf, size_t n) {
    for (size_t got = 0; got < n;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      ssize_t r = ::recv(fd, buf + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  char header[4];
  if (!exactly(header, 4)) return std::nullopt;
  std::string body(comm::store_wire::load<uint32_t>(header), '\0');
  if (body.size() > comm::store_wire::kMaxFrame || !exactly(body.data(), body.size())) return std::nullopt;
  return body;
}

// Whether the peer closed the connection within `timeout_ms` (data still unread counts as open).
inline bool closed_by_peer(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  char byte;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// The status byte of a reply body (kOk, kBroken, ...), or -1 for none.
inline int status_of(const std::optional<std::string>& body) {
  return body && !body->empty() ? static_cast<unsigned char>((*body)[0]) : -1;
}

// The store's greeting: its banner and challenge frames (nullopt when either did not come).
struct Greeting {
  std::string banner, challenge;
};
inline std::optional<Greeting> read_greeting(int fd) {
  auto banner = read_body(fd);
  auto challenge = banner ? read_body(fd) : std::nullopt;
  if (!challenge) return std::nullopt;
  return Greeting{*banner, *challenge};
}

// Runs the client's half of the handshake with `key` on a fresh connection. Returns the hello
// frame it sent (what a recording of the handshake would hold); `reply` gets the server's
// answer (nullopt: it hung up). Throws dscpp::Error where the real client would (a refusal, a
// wrong server proof).
inline std::string handshake(int fd, std::string_view key, std::optional<std::string>& reply,
                             const std::string& name = "a test client") {
  auto greeting = read_greeting(fd);
  if (!greeting) fail("the store sent no greeting");
  comm::store_auth::ClientHandshake hs(name);
  std::string hello = hs.answer(key, greeting->banner, greeting->challenge);
  send_bytes(fd, hello);
  reply = read_body(fd);
  if (!reply) fail("the store hung up during the handshake");
  hs.check_reply(key, *reply);
  return hello;
}

}  // namespace dscpp::test
