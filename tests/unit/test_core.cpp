// Errors and logging: the messages a user or a bug report sees.
#include "core/error.h"
#include "core/log.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace {

// Runs `fn` with stderr redirected to a temporary file and returns what it wrote.
template <typename F>
std::string capture_stderr(F fn) {
  std::fflush(stderr);
  char path[] = "/tmp/dscpp_stderr_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  unlink(path);
  return s.str();
}

}  // namespace

TEST_CASE("DSCPP_CHECK_EQ names the expression and both operands", "[core]") {
  int world = 4, ranks = 3;
  try {
    DSCPP_CHECK_EQ(world, ranks);
    FAIL("no exception");
  } catch (const dscpp::InternalError& e) {
    std::string m = e.what();
    CHECK(m.find("check failed: world == ranks (4 vs 3)") != std::string::npos);
    CHECK(m.find("test_core.cpp:") != std::string::npos);
  }
  CHECK_NOTHROW([&] { DSCPP_CHECK_LE(ranks, world); }());
}

TEST_CASE("fail() formats a user-facing error", "[core]") {
  try {
    dscpp::fail("cannot open {}: {}", "hostfile", "No such file or directory");
  } catch (const dscpp::Error& e) {
    CHECK(std::string(e.what()) == "cannot open hostfile: No such file or directory");
  }
}

TEST_CASE("log lines carry the rank prefix set once per process", "[core]") {
  std::string out = capture_stderr([] {
    dscpp::log::init_logging(3, "node2");
    dscpp::log::info("step {} loss {:.3f}", 10, 0.25);
    dscpp::log::init_logging(5);
    dscpp::log::warn("plain rank");
    dscpp::log::init_logging(-1);
    dscpp::log::error("no rank");
  });
  CHECK(out.find("[rank 3 node2] info: step 10 loss 0.250\n") != std::string::npos);
  CHECK(out.find("[rank 5] warning: plain rank\n") != std::string::npos);
  CHECK(out.find("\nerror: no rank\n") != std::string::npos);
}

TEST_CASE("debug lines are off unless asked for", "[core]") {
  std::string out = capture_stderr([] {
    dscpp::log::init_logging(0);
    dscpp::log::set_level(dscpp::log::Level::info);
    dscpp::log::debug("hidden");
    dscpp::log::set_level(dscpp::log::Level::debug);
    dscpp::log::debug("shown");
    dscpp::log::set_level(dscpp::log::Level::info);
  });
  CHECK(out.find("hidden") == std::string::npos);
  CHECK(out.find("[rank 0] debug: shown") != std::string::npos);
}
