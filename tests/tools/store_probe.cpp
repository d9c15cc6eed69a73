// An intruder for tests/system/store_auth.sh: attacks a running job's rendezvous store and
// says what happened.
//
//   store_probe HOST PORT attack
//     1. no handshake: a wire-1 style set and get right after connecting;
//     2. a wrong secret: a full handshake keyed with another secret, then a set and a get;
//     3. a replay: a handshake recorded on one connection (made with DSCPP_JOB_SECRET, as a
//        wiretap of a rank's connection would have seen it) sent again on a fresh one;
//     then, with the real secret, checks that none of the keys it tried to write exists.
//     Exit 0 when every attempt was refused and nothing was written.
//   store_probe HOST PORT flood N SECONDS
//     Opens N connections that never prove anything and holds them SECONDS; prints how many the
//     store kept open after 1 s and at the end. Exit 0 when at most BOUND (default 64, env
//     STORE_PROBE_BOUND) stayed open after 1 s and, if SECONDS exceeds the handshake timeout,
//     none at the end.
#include "collectives/tcp_store.h"
#include "core/job_secret.h"
#include "tests/collectives/raw_store_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using namespace dscpp;
namespace wire = comm::store_wire;

const std::string kOwned = "probe/owned";

// After the handshake (or none): a set and a get. True when either was answered kOk.
bool try_requests(int fd) {
  test::send_bytes(
      fd, wire::Frame(wire::kSet).str(kOwned).str("x").done() + wire::Frame(wire::kGet).str("arrive/0").done());
  for (int i = 0; i < 2; ++i)
    if (test::status_of(test::read_body(fd, 3000)) == wire::kOk) return true;
  return false;
}

// The refusal's reason from a reply body, for the report.
std::string reason(const std::optional<std::string>& body) {
  if (!body) return "the store hung up";
  if (test::status_of(body) != wire::kBroken) return fmt::format("status {}", test::status_of(body));
  wire::Reader r(*body, "reply");
  r.num<uint8_t>("status");
  return r.str("reason", 4096);
}

int attack(const std::string& host, int port) {
  int failures = 0;
  auto report = [&](const char* what, bool answered, const std::string& why) {
    std::printf("%s %s: %s\n", answered ? "ANSWERED" : "refused", what, why.c_str());
    failures += answered;
  };

  // 1. No handshake at all.
  int fd = test::connect_tcp(host, port);
  if (fd < 0) return std::printf("cannot connect to %s:%d\n", host.c_str(), port), 2;
  auto greeting = test::read_greeting(fd);
  test::send_bytes(fd, wire::Frame(wire::kSet).str(kOwned).str("x").done());
  auto reply = test::read_body(fd, 3000);
  bool answered = test::status_of(reply) == wire::kOk || try_requests(fd);
  report("no secret", answered, greeting ? reason(reply) : "no greeting");
  ::close(fd);

  // 2. Another secret.
  fd = test::connect_tcp(host, port);
  std::string why;
  try {
    test::handshake(fd, "not this job's secret, but 32 chars long", reply, "store_probe (wrong secret)");
    why = "the handshake passed";
  } catch (const Error& e) {
    why = e.what();
  }
  report("wrong secret", try_requests(fd), why);
  ::close(fd);

  // 3. A recorded handshake, replayed.
  auto secret = job_secret_from_env();
  if (!secret) return std::printf("the replay needs the job's DSCPP_JOB_SECRET\n"), 2;
  fd = test::connect_tcp(host, port);
  std::string recorded = test::handshake(fd, secret->value, reply, "store_probe (recording)");
  ::close(fd);
  fd = test::connect_tcp(host, port);
  test::read_greeting(fd);
  test::send_bytes(fd, recorded);
  reply = test::read_body(fd, 3000);
  answered = test::status_of(reply) == wire::kOk || try_requests(fd);
  report("replayed handshake", answered, reason(reply));
  ::close(fd);

  // Nothing any attempt sent reached the data.
  comm::TcpStoreOptions o;
  o.addr = host;
  o.port = port;
  o.secret = secret->value;
  o.name = "store_probe (check)";
  comm::TcpStore check(o);
  bool written = check.check(kOwned);
  std::printf("%s\n", written ? "WRITTEN: probe/owned exists" : "nothing written: probe/owned does not exist");
  return failures == 0 && !written ? 0 : 1;
}

// Connections the store still holds (greeting data drained; EOF or a reset means closed).
size_t still_open(std::vector<int>& fds) {
  size_t open = 0;
  for (int& fd : fds) {
    if (fd < 0) continue;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ++open;
      continue;
    }
    ::close(fd);
    fd = -1;
  }
  return open;
}

int flood(const std::string& host, int port, int n, double seconds) {
  const char* bound_env = std::getenv("STORE_PROBE_BOUND");
  const size_t bound = bound_env ? std::strtoul(bound_env, nullptr, 10) : comm::store_auth::kMaxUnauthenticated;
  auto start = std::chrono::steady_clock::now();
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) fds.push_back(test::connect_tcp(host, port));
  size_t opened = std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; });
  std::this_thread::sleep_until(start + std::chrono::seconds(1));
  size_t after_one = still_open(fds);
  std::this_thread::sleep_until(start + std::chrono::duration<double>(seconds));
  size_t at_end = still_open(fds);
  std::printf("flood: %zu of %d connections opened; the store held %zu open after 1 s (bound %zu), %zu after %g s\n",
              opened, n, after_one, bound, at_end, seconds);
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  const double timeout = std::chrono::duration<double>(comm::store_auth::kHandshakeTimeout).count();
  bool ok = opened == static_cast<size_t>(n) && after_one <= bound && (seconds <= timeout + 1 || at_end == 0);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[3]) == "attack") return attack(argv[1], std::atoi(argv[2]));
    if (argc == 6 && std::string(argv[3]) == "flood")
      return flood(argv[1], std::atoi(argv[2]), std::atoi(argv[4]), std::atof(argv[5]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_probe: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr, "usage: store_probe HOST PORT attack | HOST PORT flood N SECONDS\n");
  return 2;
}
