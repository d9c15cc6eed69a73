// The rendezvous store's handshake (wire version 2), in one place for its server and client:
// before a connection carries any request, each side proves that it holds the job's secret
// (core/job_secret.h), so a process without it can neither read nor write a key, and a rank
// never talks to a store that is not its job's.
//
//   server, on accept:  frame {kBroken, str(banner)}      what a wire-1 client reads as a refusal
//                       frame {kChallenge, u32 version, str(server nonce)}
//   client:             frame {kHello, u32 version, str(client nonce), str(client proof), str(name)}
//   server:             frame {kOk, str(server proof)}   or {kBroken, str(why)} and hang up
//
// proof = HMAC-SHA256(secret, "dscpp-store v1" || role || server nonce || client nonce), role
// "client" or "server": with one role both proofs would be equal, and an impostor store could
// simply echo the client's. The server's nonce is fresh (RAND_bytes) for every connection, so a
// recorded answer is worthless on any other one; the client's makes the server's proof fresh
// too. Proofs are compared in constant time (CRYPTO_memcmp). What this does not do: encrypt or
// authenticate the requests that follow (docs/security.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dscpp::comm::store_auth {

constexpr uint32_t kWireVersion = 2;
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // SHA-256
// The most a handshake frame may take: more from an unauthenticated peer is refused unread.
constexpr size_t kMaxHandshakeFrame = 1024;
constexpr size_t kMaxPeerName = 256;
// The defaults: how long a connection may take to prove itself, and how many may be proving at
// once (beyond it the oldest is dropped, so a flood of idle connections cannot starve ranks).
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr size_t kMaxUnauthenticated = 64;

// The key every proof is made with when DSCPP_INSECURE_STORE=1 and no secret is set: public, so
// the handshake then proves only that the peer is a dscpp store of this wire version.
constexpr std::string_view kInsecureKey = "dscpp-insecure-store";

enum class Role : uint8_t { client, server };

// 32 bytes from OpenSSL's RAND_bytes.
std::string fresh_nonce();
std::string proof(std::string_view key, Role role, std::string_view server_nonce, std::string_view client_nonce);
// Constant time in the contents (CRYPTO_memcmp); false when either is not kProofBytes long.
bool same_proof(std::string_view expected, std::string_view got);

// What a wire-1 client shows as the store's refusal, and what a wire-2 client checks first.
std::string banner();

// The server's half, one per accepted connection.
class ServerHandshake {
 public:
  ServerHandshake();
  // The frames to send at once on accept.
  std::string greeting() const;
  struct Verdict {
    bool ok = false;
    std::string reply;  // the frame to send: the server's proof, or the refusal
    std::string peer;   // the name the client gave itself ("rank 3 (pid 812 on node2)"), unverified
    std::string why;    // when refused: the reason, for the log
  };
  // Checks the client's first frame (its body, past the length): a hello of this wire version
  // whose proof matches `key`.
  Verdict answer(std::string_view key, std::string_view body) const;

 private:
  std::string nonce_;
};

// The client's half, one per connection.
class ClientHandshake {
 public:
  explicit ClientHandshake(std::string name) : name_(std::move(name)) {}
  // The number of greeting frames to read before answer().
  static constexpr int kGreetingFrames = 2;
  // The hello frame answering the greeting's two frame bodies. Throws dscpp::Error when they are
  // not a wire-2 dscpp store's (retrying would meet the same peer).
  std::string answer(std::string_view key, std::string_view banner_body, std::string_view challenge_body);
  // Checks the server's reply body: its proof of `key`. Throws dscpp::Error when the server
  // refused this client or its proof is wrong.
  void check_reply(std::string_view key, std::string_view body) const;

 private:
  std::string name_;
  std::string server_nonce_, client_nonce_;
};

}  // namespace dscpp::comm::store_auth
