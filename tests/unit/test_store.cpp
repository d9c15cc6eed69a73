// Stores: MemoryStore and PrefixStore semantics, and TcpStore over real sockets (threads and
// forked processes as clients, a server that starts late, dies, or never existed). The
// handshake itself is tests/unit/test_store_auth.cpp's.
#include "collectives/store.h"
#include "collectives/tcp_store.h"
#include "tests/collectives/raw_store_client.h"

#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <regex>
#include <thread>

using namespace dscpp::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Upper time bounds are loose: the suite shares a loaded machine with builds. Each still sits far
// below what a broken store would take (a hang, or the full timeout of a blocked call).
constexpr double kSlack = 5.0;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The N in "<before> N.N s" of a message, or -1.
double seconds_in(const std::string& message, const std::string& before) {
  std::smatch m;
  if (!std::regex_search(message, m, std::regex(before + R"( (\d+\.\d) s)"))) return -1;
  return std::stod(m[1]);
}

const std::string kSecret = "test_store's job secret, 32 chars or more";

TcpStoreOptions host_options() {
  TcpStoreOptions o;
  o.port = 0;
  o.host_server = true;
  o.connect_timeout = 5s;
  o.secret = kSecret;
  return o;
}

TcpStoreOptions client_options(int port) {
  TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = 5s;
  o.secret = kSecret;
  return o;
}

// A bound but not listening socket: connecting to its port is refused, and no other process
// can take the port while it is held.
struct UnservedPort {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  UnservedPort() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~UnservedPort() { ::close(fd); }
};

// A connection that has proven the secret, for hand-built requests.
int connect_raw(int port) {
  int fd = dscpp::test::connect_tcp("127.0.0.1", port);
  REQUIRE(fd >= 0);
  std::optional<std::string> reply;
  dscpp::test::handshake(fd, kSecret, reply);
  return fd;
}

}  // namespace

TEST_CASE("MemoryStore: set, get, add, check, erase, wait") {
  MemoryStore s;
  s.set("a", std::string("x\0y", 3));
  CHECK(s.get("a", 10ms) == std::string("x\0y", 3));
  CHECK(s.add("n", 2) == 2);
  CHECK(s.add("n", -5) == -3);
  CHECK(s.get("n", 10ms) == "-3");
  CHECK(s.check("a"));
  s.erase("a");
  CHECK_FALSE(s.check("a"));
  CHECK(s.wait({"n", "a", "b"}, 20ms) == std::vector<std::string>{"a", "b"});
  try {
    s.get("a", 20ms);
    FAIL("get of a missing key returned");
  } catch (const StoreTimeout& e) {
    CHECK(e.missing_keys == std::vector<std::string>{"a"});
    CHECK_THAT(e.what(), Catch::Contains("'a'"));
  }
}

TEST_CASE("PrefixStore: namespaces keys in the shared base store") {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore group("g1", base);
  group.set("k", "v");
  CHECK(base->get("g1/k", 10ms) == "v");
  CHECK_FALSE(base->check("k"));
  CHECK(group.add("c", 4) == 4);
  CHECK(group.wait({"k", "c", "zz"}, 20ms) == std::vector<std::string>{"zz"});
  group.erase("k");
  CHECK_FALSE(base->check("g1/k"));
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("x", "1");
  CHECK(base->check("outer/inner/x"));
}

TEST_CASE("format_rank_list: ranges of three or more, pairs spelled out") {
  CHECK(format_rank_list({0, 1, 2, 5}) == "0-2, 5");
  CHECK(format_rank_list({3, 4}) == "3, 4");
  CHECK(format_rank_list({9, 0, 2, 1, 3}) == "0-3, 9");
  CHECK(format_rank_list({7}) == "7");
  CHECK(format_rank_list({}).empty());
}

TEST_CASE("TcpStore: round trips of every operation") {
  TcpStore host(host_options());
  REQUIRE(host.port() > 0);
  TcpStore client(client_options(host.port()));
  CHECK(client.port() == host.port());

  std::string binary("a\0b\xff", 4);
  host.set("bin", binary);
  CHECK(client.get("bin", 1s) == binary);
  host.set("empty", "");
  CHECK(client.get("empty", 1s).empty());
  std::string big(3 << 20, 'z');
  big[12345] = 'q';
  client.set("big", big);
  CHECK(host.get("big", 5s) == big);

  CHECK(client.add("counter", 1) == 1);
  CHECK(host.add("counter", 2) == 3);
  CHECK(client.get("counter", 1s) == "3");
  CHECK(client.add("counter", -10) == -7);

  CHECK(client.check("bin"));
  CHECK_FALSE(client.check("nothing"));
  client.erase("bin");
  CHECK_FALSE(host.check("bin"));
  client.erase("never-there");  // erasing a missing key is fine

  CHECK(client.wait({"empty", "counter"}, 1s).empty());
  CHECK(client.wait({}, 1s).empty());
}

TEST_CASE("TcpStore: get times out with StoreTimeout naming key, seconds and address") {
  TcpStore host(host_options());
  auto start = Clock::now();
  try {
    host.get("missing/key", 300ms);
    FAIL("get of a missing key returned");
  } catch (const StoreTimeout& e) {
    CHECK(since(start) >= 0.29);
    CHECK(since(start) < kSlack);
    CHECK(e.missing_keys == std::vector<std::string>{"missing/key"});
    CHECK_THAT(e.what(), Catch::Contains("'missing/key'") && Catch::Contains(fmt::format("127.0.0.1:{}", host.port())));
    CHECK(seconds_in(e.what(), "within") >= 0.3);
  }
  // The cancelled connection is reusable and the store still answers.
  host.set("missing/key", "now");
  CHECK(host.get("missing/key", 1s) == "now");
}

TEST_CASE("TcpStore: get blocks until another client sets the key") {
  TcpStore host(host_options());
  TcpStore client(client_options(host.port()));
  auto start = Clock::now();
  auto got = std::async(std::launch::async, [&] { return client.get("late", 5s); });
  std::this_thread::sleep_for(200ms);
  CHECK(got.wait_for(0ms) == std::future_status::timeout);
  host.set("late", "value");
  CHECK(got.get() == "value");
  CHECK(since(start) >= 0.19);
  CHECK(since(start) < kSlack);
}

TEST_CASE("TcpStore: a get blocking on one thread does not delay other threads") {
  TcpStore host(host_options());
  TcpStore client(client_options(host.port()));
  auto blocked = std::async(std::launch::async, [&] { return client.get("gate", 20s); });
  std::this_thread::sleep_for(50ms);
  auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    client.set(fmt::format("k{}", i), "v");
    CHECK(client.check(fmt::format("k{}", i)));
    CHECK(client.add("n", 1) == i + 1);
  }
  CHECK(since(start) < kSlack);  // shared connections would wait out the 20 s get
  CHECK(blocked.wait_for(0ms) == std::future_status::timeout);
  client.set("gate", "open");
  CHECK(blocked.get() == "open");
}

TEST_CASE("TcpStore: concurrent add from 32 threads and 8 processes gives the exact total") {
  TcpStore host(host_options());
  const int port = host.port();
  constexpr int kThreads = 32, kProcs = 8, kAdds = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        TcpStore child(client_options(port));
        for (int i = 0; i < kAdds; ++i) child.add("total", 1);
        child.set(fmt::format("proc/{}", p), "done");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", p, e.what());
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  TcpStore shared(client_options(port));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      try {
        for (int i = 0; i < kAdds; ++i) shared.add("total", 1);
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(failures == 0);
  CHECK(host.get("total", 1s) == std::to_string((kThreads + kProcs) * kAdds));
  CHECK(host.add("total", 0) == (kThreads + kProcs) * kAdds);
}

TEST_CASE("TcpStore: wait returns the keys still missing at the timeout") {
  TcpStore host(host_options());
  TcpStore client(client_options(host.port()));
  host.set("a", "1");
  host.set("c", "1");
  auto start = Clock::now();
  CHECK(client.wait({"a", "b", "c", "d"}, 200ms) == std::vector<std::string>{"b", "d"});
  CHECK(since(start) >= 0.19);
  CHECK(since(start) < kSlack);

  // Keys arriving in any order, including one erased and set again, complete the wait.
  auto waited = std::async(std::launch::async, [&] { return client.wait({"a", "b", "c", "d"}, 5s); });
  host.set("d", "1");
  host.erase("a");
  host.set("b", "1");
  std::this_thread::sleep_for(100ms);
  CHECK(waited.wait_for(0ms) == std::future_status::timeout);
  host.set("a", "again");
  CHECK(waited.get().empty());
}

TEST_CASE("TcpStore: rendezvous names the rank that never arrived") {
  TcpStore host(host_options());
  std::vector<std::unique_ptr<TcpStore>> stores;
  for (int r = 0; r < 3; ++r) stores.push_back(std::make_unique<TcpStore>(client_options(host.port())));

  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      try {
        rendezvous(*stores[r], "world", r, 4, 300ms);
        return "returned";
      } catch (const StoreTimeout& e) {
        return e.what();
      }
    }));
  for (auto& f : ranks) {
    std::string message = f.get();
    CHECK_THAT(message, Catch::Contains("rank 3 of 4"));
    CHECK(seconds_in(message, "within") >= 0.3);
    CHECK(seconds_in(message, "within") < kSlack);
  }
  // When everyone shows up, it returns.
  std::vector<std::future<void>> all;
  for (int r = 0; r < 4; ++r)
    all.push_back(std::async(std::launch::async, [&, r] { rendezvous(r == 3 ? host : *stores[r], "all", r, 4, 5s); }));
  for (auto& f : all) CHECK_NOTHROW(f.get());
}

TEST_CASE("TcpStore: a client started before the server connects once it comes up") {
  int port;
  {
    UnservedPort reserve;
    port = reserve.port;
  }
  auto start = Clock::now();
  auto client = std::async(std::launch::async, [&] {
    TcpStore c(client_options(port));
    return c.get("hello", 5s);
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreOptions o = host_options();
  o.port = port;
  TcpStore host(o);
  CHECK(host.port() == port);
  host.set("hello", "world");
  CHECK(client.get() == "world");
  CHECK(since(start) < kSlack);
}

TEST_CASE("TcpStore: nobody serving the port gives an Error naming the address") {
  UnservedPort unserved;
  TcpStoreOptions o = client_options(unserved.port);
  o.connect_timeout = 300ms;
  auto start = Clock::now();
  try {
    TcpStore s(o);
    FAIL("connected to a port nobody serves");
  } catch (const dscpp::Error& e) {
    CHECK(seconds_in(e.what(), "not reachable after") >= 0.3);
    CHECK_THAT(e.what(), Catch::Contains(fmt::format("127.0.0.1:{}", unserved.port)) &&
                             Catch::Contains("not reachable after") && Catch::Contains("rank 0") &&
                             Catch::Contains("refused"));
  }
  CHECK(since(start) >= 0.29);
  CHECK(since(start) < kSlack);
}

TEST_CASE("TcpStore: the server going away fails blocked and later calls promptly") {
  auto host = std::make_unique<TcpStore>(host_options());
  TcpStore client(client_options(host->port()));
  client.set("warm", "1");
  auto blocked = std::async(std::launch::async, [&]() -> std::string {
    try {
      client.get("never", 30s);
      return "returned";
    } catch (const StoreTimeout& e) {
      return std::string("timeout: ") + e.what();
    } catch (const dscpp::Error& e) {
      return e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  auto start = Clock::now();
  host.reset();
  // Typically a few ms; the get itself would block for 30 s.
  REQUIRE(blocked.wait_for(std::chrono::duration<double>(kSlack)) == std::future_status::ready);
  CHECK(since(start) < kSlack);
  std::string message = blocked.get();
  CHECK_THAT(message,
             Catch::Contains("closed the connection") && Catch::Contains("rank 0") && Catch::Contains("127.0.0.1:"));
  start = Clock::now();
  CHECK_THROWS_WITH(client.set("after", "1"), Catch::Contains("closed the connection"));
  CHECK_THROWS_AS(client.check("after"), dscpp::Error);
  CHECK(since(start) < kSlack);
}

TEST_CASE("TcpStore: oversized keys and values, bad counters and foreign servers are clear errors") {
  TcpStore host(host_options());
  CHECK_THROWS_WITH(host.set(std::string(5000, 'k'), "v"), Catch::Contains("5000 bytes") && Catch::Contains("4096"));
  CHECK_THROWS_WITH(host.set("huge", std::string((64 << 20) + 1, 'v')), Catch::Contains("exceeds"));
  host.set("word", "abc");
  CHECK_THROWS_WITH(host.add("word", 1), Catch::Contains("'abc'") && Catch::Contains("not a decimal integer"));
  host.set("max", std::to_string(INT64_MAX));
  CHECK_THROWS_WITH(host.add("max", 1), Catch::Contains("overflow"));
  CHECK(host.add("fine", 5) == 5);  // the store still serves after refusing a request

  // Something else on the port (here: an HTTP-ish greeting) is reported, not misparsed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread foreign([fd] {
    int conn = ::accept(fd, nullptr, nullptr);
    const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    if (conn >= 0 && ::write(conn, reply, sizeof reply - 1) > 0) std::this_thread::sleep_for(500ms);
    if (conn >= 0) ::close(conn);
  });
  CHECK_THROWS_WITH(
      TcpStore(client_options(ntohs(a.sin_port))),
      Catch::Contains("the handshake of a rank failed") && Catch::Contains("something other than a dscpp store"));
  foreign.join();
  ::close(fd);
}

TEST_CASE("TcpStore server: a broken request stream is answered with the reason, then closed") {
  TcpStore host(host_options());
  // Sends raw bytes, reads until the server hangs up, returns {status, message}.
  auto exchange = [&](std::vector<unsigned char> bytes) {
    int fd = connect_raw(host.port());
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    ::close(fd);  // reaching here at all means the server closed its end
    REQUIRE(reply.size() > 9);
    return std::make_pair(static_cast<int>(static_cast<unsigned char>(reply[4])), reply.substr(9));
  };
  auto [status, message] = exchange({0xff, 0xff, 0xff, 0x7f, 1});
  CHECK(status == 3);
  CHECK_THAT(message, Catch::Contains("2147483647 bytes exceeds"));
  std::tie(status, message) = exchange({1, 0, 0, 0, 99});
  CHECK(status == 3);
  CHECK_THAT(message, Catch::Contains("unknown operation 99"));
  // A set whose key length claims more bytes than the frame holds.
  std::tie(status, message) = exchange({9, 0, 0, 0, 1, 200, 0, 0, 0, 'a', 'b', 'c', 'd'});
  CHECK_THAT(message, Catch::Contains("expected 200 bytes for the key, found 4"));
  CHECK(host.add("still-serving", 1) == 1);
}

TEST_CASE("TcpStore server: thousands of connections parked on one key are all answered") {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  // Each connection costs a descriptor here and one in the server thread (same process).
  const size_t n = std::min<size_t>(2000, (files.rlim_cur - 100) / 2);
  TcpStore host(host_options());
  // A hand-built get('go'): u32 body length, op 2, then the key as u32 length + bytes.
  const unsigned char get_go[] = {7, 0, 0, 0, 2, 2, 0, 0, 0, 'g', 'o'};
  std::vector<int> fds;
  for (size_t i = 0; i < n; ++i) {
    fds.push_back(connect_raw(host.port()));
    REQUIRE(::write(fds.back(), get_go, sizeof get_go) == sizeof get_go);
  }
  auto start = Clock::now();
  host.set("go", "now");
  // The reply: body length 8, status 0, value length 3, "now".
  const std::string expected("\x08\0\0\0\0\x03\0\0\0now", 12);
  size_t answered = 0;
  for (int fd : fds) {
    std::string reply;
    char buf[64];
    for (ssize_t r; reply.size() < expected.size() && (r = ::read(fd, buf, sizeof buf)) > 0;)
      reply.append(buf, static_cast<size_t>(r));
    answered += reply == expected;
    ::close(fd);
  }
  CHECK(answered == n);
  CHECK(since(start) < 2 * kSlack);
  CHECK(n >= 400);
}
