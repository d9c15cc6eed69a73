#include "collectives/store_auth.h"

#include "collectives/tcp_store_wire.h"
#include "core/error.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>

namespace dscpp::comm::store_auth {
namespace {

using store_wire::Frame;
using store_wire::Reader;

constexpr std::string_view kContext = "dscpp-store v1";
constexpr std::string_view kBannerStart = "dscpp-store wire version ";

// A peer-chosen name goes into the log: printable ASCII only, so it cannot forge log lines.
std::string printable(std::string_view s) {
  std::string out(s);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c < ' ' || c > '~'; }, '?');
  return out;
}

}  // namespace

std::string fresh_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1)
    fail("rendezvous store: OpenSSL's RAND_bytes could not make a handshake nonce");
  return nonce;
}

std::string proof(std::string_view key, Role role, std::string_view server_nonce, std::string_view client_nonce) {
  std::string message(kContext);
  message += role == Role::client ? "client" : "server";
  message += server_nonce;
  message += client_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len) ||
      len != kProofBytes)
    fail("rendezvous store: OpenSSL's HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool same_proof(std::string_view expected, std::string_view got) {
  // The lengths are public (fixed by the protocol); only the contents must not leak through timing.
  if (expected.size() != kProofBytes || got.size() != kProofBytes) return false;
  return CRYPTO_memcmp(expected.data(), got.data(), kProofBytes) == 0;
}

std::string banner() {
  return fmt::format(
      "{}{}: this rendezvous store authenticates every connection with the job's secret, and a client of an older "
      "dscpp build cannot do that; run the same dscpp build on every rank",
      kBannerStart, kWireVersion);
}

ServerHandshake::ServerHandshake() : nonce_(fresh_nonce()) {}

std::string ServerHandshake::greeting() const {
  return Frame(store_wire::kBroken).str(banner()).done() +
         Frame(store_wire::kChallenge).num(kWireVersion).str(nonce_).done();
}

ServerHandshake::Verdict ServerHandshake::answer(std::string_view key, std::string_view body) const {
  Verdict v;
  auto refuse = [&](std::string why, const std::string& to_client) {
    v.why = std::move(why);
    v.reply = Frame(store_wire::kBroken).str(to_client).done();
    return v;
  };
  std::string client_nonce, client_proof;
  try {
    Reader r(body, "handshake");
    auto op = r.num<uint8_t>("operation");
    if (op != store_wire::kHello)
      return refuse(fmt::format("its first message is operation {}, not a handshake: a client of an older dscpp "
                                "build (wire version 1), or not a dscpp client",
                                op),
                    banner());
    auto version = r.num<uint32_t>("wire version");
    if (version != kWireVersion)
      return refuse(fmt::format("it speaks wire version {}, this store {}", version, kWireVersion),
                    fmt::format("this store speaks wire version {}, the client {}: run the same dscpp build on "
                                "every rank",
                                kWireVersion, version));
    client_nonce = r.str("client nonce", kNonceBytes);
    client_proof = r.str("client proof", kProofBytes);
    v.peer = printable(r.str("client name", kMaxPeerName));
    r.done();
  } catch (const Error& e) {
    return refuse(fmt::format("malformed handshake: {}", e.what()), "malformed handshake");
  }
  if (client_nonce.size() != kNonceBytes)
    return refuse(fmt::format("its nonce has {} bytes, not {}", client_nonce.size(), kNonceBytes),
                  "malformed handshake: short nonce");
  if (!same_proof(proof(key, Role::client, nonce_, client_nonce), client_proof))
    return refuse("its proof does not match this job's secret",
                  "this job's rendezvous store refused the connection: its proof does not match the job's secret "
                  "(every rank needs the DSCPP_JOB_SECRET, or DSCPP_JOB_SECRET_FILE contents, that rank 0 has)");
  v.ok = true;
  v.reply = Frame(store_wire::kOk).str(proof(key, Role::server, nonce_, client_nonce)).done();
  return v;
}

std::string ClientHandshake::answer(std::string_view key, std::string_view banner_body,
                                    std::string_view challenge_body) {
  constexpr const char* kForeign =
      "its greeting is not a dscpp rendezvous store's (is something other than a dscpp store listening there?)";
  try {
    Reader b(banner_body, "greeting");
    auto status = b.num<uint8_t>("status");
    std::string text = status == store_wire::kBroken ? b.str("banner", store_auth::kMaxHandshakeFrame) : "";
    if (!text.starts_with(kBannerStart)) fail("{}", kForeign);
    Reader c(challenge_body, "challenge");
    auto op = c.num<uint8_t>("operation");
    if (op != store_wire::kChallenge) fail("{}", kForeign);
    auto version = c.num<uint32_t>("wire version");
    if (version != kWireVersion)
      fail("the store speaks wire version {}, this rank {}: run the same dscpp build on every rank", version,
           kWireVersion);
    server_nonce_ = c.str("server nonce", kNonceBytes);
    c.done();
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.find(kForeign) != std::string::npos || what.find("wire version") != std::string::npos) throw;
    fail("{} ({})", kForeign, what);
  }
  if (server_nonce_.size() != kNonceBytes)
    fail("the store's nonce has {} bytes, not {}", server_nonce_.size(), kNonceBytes);
  client_nonce_ = fresh_nonce();
  return Frame(store_wire::kHello)
      .num(kWireVersion)
      .str(client_nonce_)
      .str(proof(key, Role::client, server_nonce_, client_nonce_))
      .str(name_.substr(0, kMaxPeerName))
      .done();
}

void ClientHandshake::check_reply(std::string_view key, std::string_view body) const {
  std::string server_proof;
  uint8_t status = 0;
  try {
    Reader r(body, "handshake reply");
    status = r.num<uint8_t>("status");
    if (status == store_wire::kBroken) fail("{}", printable(r.str("reason", kMaxHandshakeFrame)));
    if (status != store_wire::kOk) fail("malformed handshake reply: status {}", status);
    server_proof = r.str("server proof", kProofBytes);
    r.done();
  } catch (const Error& e) {
    if (status == store_wire::kBroken) throw;
    fail("malformed handshake reply ({})", e.what());
  }
  if (!same_proof(proof(key, Role::server, server_nonce_, client_nonce_), server_proof))
    fail(
        "the server's proof does not match this job's secret: it is not this job's store (another job's, or an "
        "impostor) although it listens at MASTER_ADDR:MASTER_PORT");
}

}  // namespace dscpp::comm::store_auth
