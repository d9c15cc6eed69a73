// The rendezvous store's handshake (collectives/store_auth.h) and what it keeps out: the proof
// against an independent HMAC-SHA256, the constant-time comparison, each half refusing what it
// must (a wrong key, a replayed hello, a reflected proof, a wire-1 client, a foreign server),
// and over real sockets the handshake deadline, the bound on unproven connections, the bind
// address and the job secret read from the environment (core/job_secret.h).
#include "collectives/communicator.h"
#include "collectives/store_auth.h"
#include "collectives/tcp_store.h"
#include "core/job_secret.h"
#include "tests/collectives/raw_store_client.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

using namespace dscpp::comm;
using namespace dscpp::comm::store_auth;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace wire = dscpp::comm::store_wire;

namespace {

constexpr double kSlack = 5.0;  // a loaded machine; a broken bound would take far longer or hang
const std::string kKey = "0123456789abcdef0123456789abcdef";

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string hex(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// The frame bodies in `frames` (several frames back to back).
std::vector<std::string> bodies(std::string_view frames) {
  std::vector<std::string> out;
  while (frames.size() >= 4) {
    uint32_t len = wire::load<uint32_t>(frames.data());
    out.emplace_back(frames.substr(4, len));
    frames.remove_prefix(4 + len);
  }
  return out;
}

TcpStoreOptions host(const std::string& secret = kKey) {
  TcpStoreOptions o;
  o.port = 0;
  o.host_server = true;
  o.connect_timeout = 5s;
  o.secret = secret;
  return o;
}

TcpStoreOptions client(int port, const std::string& secret = kKey) {
  TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = 5s;
  o.secret = secret;
  return o;
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("store_auth: proofs are HMAC-SHA256 over the context, the role and both nonces") {
  std::string server_nonce, client_nonce;
  for (int i = 0; i < 32; ++i) server_nonce += static_cast<char>(i), client_nonce += static_cast<char>(32 + i);
  // Python: hmac.new(key, b"dscpp-store v1" + role + server_nonce + client_nonce, hashlib.sha256)
  CHECK(hex(proof(kKey, Role::client, server_nonce, client_nonce)) ==
        "d4923f6e29fe1bb2cef4443bfce1823b2da487e93961c71b6887d2935ddc7f69");
  CHECK(hex(proof(kKey, Role::server, server_nonce, client_nonce)) ==
        "44289e072db9f75c040f3df9ca93ea6c75e679573b4c68ad56c0e348a7b2924a");
  CHECK(fresh_nonce().size() == kNonceBytes);
  CHECK(fresh_nonce() != fresh_nonce());
}

TEST_CASE("store_auth: proofs are compared in constant time, and only at full length") {
  const std::string p = proof(kKey, Role::client, fresh_nonce(), fresh_nonce());
  CHECK(same_proof(p, p));
  std::string first = p, last = p;
  first.front() ^= 1;
  last.back() ^= 0x80;
  CHECK_FALSE(same_proof(p, first));
  CHECK_FALSE(same_proof(p, last));
  CHECK_FALSE(same_proof(p, p.substr(0, 31)));  // a prefix never matches
  CHECK_FALSE(same_proof(p, p + "x"));
  CHECK_FALSE(same_proof("", ""));  // a missing proof is no proof
  // Every verifying path goes through same_proof: a proof one bit off is refused by the server.
  ServerHandshake server;
  auto greeting = bodies(server.greeting());
  REQUIRE(greeting.size() == 2);
  ClientHandshake c("rank 1");
  auto hello = bodies(c.answer(kKey, greeting[0], greeting[1]));
  REQUIRE(hello.size() == 1);
  std::string tampered = hello[0];
  constexpr size_t kProofEnd = 1 + 4 + (4 + kNonceBytes) + (4 + kProofBytes);  // op, version, nonce, proof
  tampered[kProofEnd - 1] ^= 1;
  CHECK_FALSE(server.answer(kKey, tampered).ok);
  CHECK(server.answer(kKey, hello[0]).ok);
}

TEST_CASE("store_auth: both halves prove the key; wrong keys, replays and reflections are refused") {
  ServerHandshake server;
  auto greeting = bodies(server.greeting());
  CHECK_THAT(greeting[0], Catch::Contains("wire version 2"));

  ClientHandshake good("rank 3 (pid 1 on node2)");
  auto hello = bodies(good.answer(kKey, greeting[0], greeting[1]));
  auto verdict = server.answer(kKey, hello[0]);
  REQUIRE(verdict.ok);
  CHECK(verdict.peer == "rank 3 (pid 1 on node2)");
  good.check_reply(kKey, bodies(verdict.reply)[0]);  // the server proved the key back

  SECTION("another key: the server refuses, saying why, and the client reports it") {
    ClientHandshake wrong("rank 1");
    auto bad = bodies(wrong.answer("another secret, also 32 chars long", greeting[0], greeting[1]));
    auto v = server.answer(kKey, bad[0]);
    CHECK_FALSE(v.ok);
    CHECK_THAT(v.why, Catch::Contains("does not match this job's secret"));
    CHECK(v.peer == "rank 1");
    CHECK_THROWS_WITH(wrong.check_reply("another secret, also 32 chars long", bodies(v.reply)[0]),
                      Catch::Contains("DSCPP_JOB_SECRET"));
  }
  SECTION("a recorded hello is worthless on a connection with a fresh nonce") {
    ServerHandshake fresh;
    auto v = fresh.answer(kKey, hello[0]);
    CHECK_FALSE(v.ok);
    CHECK_THAT(v.why, Catch::Contains("does not match"));
  }
  SECTION("an impostor store echoing the client's own proof is refused by the client") {
    ServerHandshake impostor;
    auto g = bodies(impostor.greeting());
    ClientHandshake victim("rank 2");
    auto h = bodies(victim.answer(kKey, g[0], g[1]));
    wire::Reader r(h[0], "hello");
    r.num<uint8_t>("op"), r.num<uint32_t>("version"), r.str("nonce", 64);
    std::string client_proof = r.str("proof", 64);
    auto echoed = bodies(wire::Frame(wire::kOk).str(client_proof).done());
    CHECK_THROWS_WITH(victim.check_reply(kKey, echoed[0]), Catch::Contains("not this job's store"));
    // A store with another job's key fails the same way.
    auto other = impostor.answer("another job's secret, 32 chars long", h[0]);
    CHECK_FALSE(other.ok);
  }
  SECTION("a wire-1 client's request is refused with the banner; a foreign greeting is not a store's") {
    auto v = server.answer(kKey, bodies(wire::Frame(wire::kSet).str("k").str("v").done())[0]);
    CHECK_FALSE(v.ok);
    CHECK_THAT(v.why, Catch::Contains("wire version 1"));
    CHECK_THAT(bodies(v.reply)[0], Catch::Contains("run the same dscpp build on every rank"));
    ClientHandshake c("rank 1");
    CHECK_THROWS_WITH(c.answer(kKey, "HTTP/1.1 200", greeting[1]),
                      Catch::Contains("something other than a dscpp store"));
    auto future = bodies(wire::Frame(wire::kChallenge).num(uint32_t{3}).str(fresh_nonce()).done());
    CHECK_THROWS_WITH(c.answer(kKey, greeting[0], future[0]), Catch::Contains("wire version 3"));
  }
}

TEST_CASE("TcpStore: a client with another secret is refused, named, and the store keeps serving") {
  TcpStore h(host());
  TcpStoreOptions o = client(h.port(), "a different secret of 32 characters!");
  o.name = "rank 7 (pid 99 on node3)";
  CHECK_THROWS_WITH(TcpStore(o), Catch::Contains("handshake of rank 7 (pid 99 on node3) failed") &&
                                     Catch::Contains("does not match the job's secret"));
  h.set("still", "serving");
  TcpStore ok(client(h.port()));
  CHECK(ok.get("still", 1s) == "serving");
}

TEST_CASE("TcpStore: no secret is refused naming both variables; the insecure opt-out uses a public key") {
  TcpStoreOptions none = host("");
  CHECK_THROWS_WITH(TcpStore(none), Catch::Contains("DSCPP_JOB_SECRET") && Catch::Contains("DSCPP_JOB_SECRET_FILE") &&
                                        Catch::Contains("DSCPP_INSECURE_STORE=1"));
  TcpStoreOptions insecure = host("");
  insecure.insecure = true;
  TcpStore h(insecure);
  TcpStoreOptions c = client(h.port(), "");
  c.insecure = true;
  TcpStore joined(c);
  joined.set("k", "v");
  CHECK(h.get("k", 1s) == "v");
  // A secret on one side only does not match.
  CHECK_THROWS_WITH(TcpStore(client(h.port())), Catch::Contains("proof"));
}

TEST_CASE("TcpStore server: without the secret nothing can be read or written, replays included") {
  TcpStore h(host());
  h.set("host/0", "node1");
  const std::string set_owned = wire::Frame(wire::kSet).str("owned").str("x").done();
  const std::string get_host = wire::Frame(wire::kGet).str("host/0").done();

  // No handshake: a wire-1 style request gets the banner (the greeting), then a refusal, then EOF.
  int fd = dscpp::test::connect_tcp("127.0.0.1", h.port());
  REQUIRE(fd >= 0);
  auto greeting = dscpp::test::read_greeting(fd);
  REQUIRE(greeting);
  CHECK_THAT(greeting->banner, Catch::Contains("wire version 2"));
  dscpp::test::send_bytes(fd, set_owned + get_host);
  auto reply = dscpp::test::read_body(fd);
  CHECK(dscpp::test::status_of(reply) == wire::kBroken);
  CHECK(dscpp::test::closed_by_peer(fd, 5000));  // no second answer: the store hung up
  ::close(fd);

  // A recorded handshake replayed on a new connection.
  fd = dscpp::test::connect_tcp("127.0.0.1", h.port());
  std::optional<std::string> ok;
  std::string recorded = dscpp::test::handshake(fd, kKey, ok);
  ::close(fd);
  fd = dscpp::test::connect_tcp("127.0.0.1", h.port());
  REQUIRE(dscpp::test::read_greeting(fd));
  dscpp::test::send_bytes(fd, recorded + set_owned + get_host);
  CHECK(dscpp::test::status_of(dscpp::test::read_body(fd)) == wire::kBroken);
  CHECK(dscpp::test::closed_by_peer(fd, 5000));
  ::close(fd);
  CHECK_FALSE(h.check("owned"));
}

TEST_CASE("TcpStore server: a connection that never proves itself is closed at the deadline") {
  TcpStoreOptions o = host();
  o.handshake_timeout = 300ms;
  TcpStore h(o);
  int fd = dscpp::test::connect_tcp("127.0.0.1", h.port());
  REQUIRE(dscpp::test::read_greeting(fd));
  auto start = Clock::now();
  CHECK(dscpp::test::closed_by_peer(fd, 10000));
  CHECK(since(start) >= 0.25);
  CHECK(since(start) < kSlack);
  ::close(fd);
  // A client that waits for a greeting that never comes (an older store, or a wedged one) says so.
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  TcpStoreOptions c = client(ntohs(a.sin_port));
  c.handshake_timeout = 200ms;
  c.connect_timeout = 700ms;
  CHECK_THROWS_WITH(TcpStore(c), Catch::Contains("no handshake from the store within 0.2 s"));
  ::close(listener);
}

TEST_CASE("TcpStore server: unproven connections beyond the bound are dropped; ranks still get in") {
  TcpStoreOptions o = host();
  o.max_unauthenticated = 8;
  TcpStore h(o);
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(dscpp::test::connect_tcp("127.0.0.1", h.port()));
  auto start = Clock::now();
  TcpStore rank(client(h.port()));  // its handshake competes with 40 idle connections
  rank.set("in", "yes");
  CHECK(h.get("in", 1s) == "yes");
  CHECK(since(start) < kSlack);
  // Each idle connection got its greeting; all but the newest 8 were then closed.
  size_t closed = 0;
  for (int fd : idle) {
    if (dscpp::test::read_greeting(fd)) closed += dscpp::test::closed_by_peer(fd, 300);
    ::close(fd);
  }
  CHECK(closed >= 32);
}

TEST_CASE("TcpStore server: listens on the address it is given, every interface only when asked") {
  TcpStore local(host());  // addr 127.0.0.1
  int other = dscpp::test::connect_tcp("127.0.0.2", local.port());
  CHECK(other < 0);  // 127.0.0.2 is this host too, but not the address the store listens on
  if (other >= 0) ::close(other);
  TcpStoreOptions everywhere = host();
  everywhere.bind_addr = "0.0.0.0";
  TcpStore all(everywhere);
  int fd = dscpp::test::connect_tcp("127.0.0.2", all.port());
  CHECK(fd >= 0);
  if (fd >= 0) ::close(fd);
  TcpStoreOptions foreign = host();
  foreign.addr = "192.0.2.1";  // TEST-NET-1: no host has it
  CHECK_THROWS_WITH(TcpStore(foreign),
                    Catch::Contains("not an address of this host") && Catch::Contains("DSCPP_STORE_BIND"));
}

TEST_CASE("job secret: from DSCPP_JOB_SECRET or a private file; a readable file or a short secret is refused") {
  ScopedEnv file_var("DSCPP_JOB_SECRET_FILE", nullptr);
  {
    ScopedEnv var("DSCPP_JOB_SECRET", nullptr);
    CHECK_FALSE(dscpp::job_secret_from_env().has_value());
  }
  {
    ScopedEnv var("DSCPP_JOB_SECRET", "short");
    CHECK_THROWS_WITH(dscpp::job_secret_from_env(), Catch::Contains("DSCPP_JOB_SECRET") &&
                                                        Catch::Contains("at least 32") &&
                                                        !Catch::Contains("short"));  // never shown
  }
  char path[] = "/tmp/dscpp_secret_XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string secret = dscpp::make_job_secret();
  CHECK(secret.size() == 64);
  CHECK(secret.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(secret != dscpp::make_job_secret());
  REQUIRE(::write(fd, (secret + "\n").data(), secret.size() + 1) == static_cast<ssize_t>(secret.size() + 1));
  ::close(fd);
  ScopedEnv use_file("DSCPP_JOB_SECRET_FILE", path);
  ::chmod(path, 0644);
  CHECK_THROWS_WITH(dscpp::job_secret_from_env(), Catch::Contains("chmod 600") && Catch::Contains("read"));
  ::chmod(path, 0620);
  CHECK_THROWS_WITH(dscpp::job_secret_from_env(), Catch::Contains("chmod 600") && Catch::Contains("change"));
  ::chmod(path, 0600);
  auto read = dscpp::job_secret_from_env();
  REQUIRE(read);
  CHECK(read->value == secret);  // the newline dropped
  CHECK_THAT(read->source, Catch::Contains(path));
  {
    ScopedEnv var("DSCPP_JOB_SECRET", "the-variable-wins-over-the-file-32+");
    CHECK(dscpp::job_secret_from_env()->value == "the-variable-wins-over-the-file-32+");
  }
  ::unlink(path);
  CHECK_THROWS_WITH(dscpp::job_secret_from_env(), Catch::Contains("cannot open"));
  {
    ScopedEnv insecure("DSCPP_INSECURE_STORE", "yes");
    CHECK_THROWS_WITH(dscpp::insecure_store_from_env(), Catch::Contains("expected 1"));
  }
  ScopedEnv insecure("DSCPP_INSECURE_STORE", "1");
  CHECK(dscpp::insecure_store_from_env());
}

TEST_CASE("create_world: several ranks without a secret refuse to start, naming both variables") {
  CommOptions o;
  o.rank = 1;
  o.world_size = 2;
  CHECK_THROWS_WITH(create_world(o), Catch::Contains("rank 1") && Catch::Contains("DSCPP_JOB_SECRET ") &&
                                         Catch::Contains("DSCPP_JOB_SECRET_FILE"));
}
