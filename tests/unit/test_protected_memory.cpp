// Protected memory (core/protected_memory.h), which cuda-sim's device memory is made of: a host
// access outside a launch or copy must kill the process, as on a GPU, so that the protection
// cannot silently switch off. Each access runs in a child process (tests/tools/protected_probe)
// under both mechanisms: protection keys where the CPU has them, and the mprotect fallback.
#include "core/protected_memory.h"

#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Outcome {
  bool signalled = false;
  int exit_code = -1;
  std::string output;
  bool survived() const { return output.find("survived") != std::string::npos; }
  bool touched() const { return output.find("touching") != std::string::npos; }
  bool keys() const { return output.find("mechanism: protection keys") != std::string::npos; }
};

Outcome probe(const std::string& action, const char* mechanism) {
  int out[2];
  REQUIRE(pipe(out) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    if (mechanism != nullptr) setenv("DSCPP_PROTECTED_MEMORY", mechanism, 1);
    execl(DSCPP_PROTECTED_PROBE, DSCPP_PROTECTED_PROBE, action.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  Outcome o;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) o.output.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  // A sanitizer build turns the SIGSEGV into a report and an abort (or a non-zero exit).
  o.signalled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

}  // namespace

TEST_CASE("host code touching protected memory outside a scope dies; inside a scope it works") {
  for (const char* mechanism : {static_cast<const char*>(nullptr), "mprotect"}) {
    DYNAMIC_SECTION((mechanism ? mechanism : "default")) {
      for (const char* action : {"inside", "pool"}) {
        Outcome o = probe(action, mechanism);
        INFO(action << ": " << o.output);
        CHECK(o.touched());
        CHECK(o.survived());
        CHECK(o.exit_code == 0);
      }
      for (const char* action : {"read", "write", "after-close", "sim-host-read"}) {
        Outcome o = probe(action, mechanism);
        INFO(action << ": " << o.output);
        CHECK(o.touched());
        CHECK_FALSE(o.survived());
        CHECK(o.signalled);
      }
      Outcome sys = probe("syscall", mechanism);
      INFO("syscall: " << sys.output);
      CHECK(sys.exit_code == 3);  // write(2) from device memory fails with EFAULT ("Bad address"), as gloo saw
      if (mechanism != nullptr) CHECK_FALSE(sys.keys());
    }
  }
}

TEST_CASE("with protection keys, another thread's access dies even while this thread is in a scope") {
  Outcome o = probe("other-thread", nullptr);
  INFO(o.output);
  REQUIRE(o.touched());
  if (!o.keys()) {
    WARN("this CPU or kernel has no protection keys: the mprotect fallback cannot tell threads apart");
    CHECK(o.survived());
    return;
  }
  CHECK_FALSE(o.survived());
  CHECK(o.signalled);
}

TEST_CASE("blocks are page-aligned, zero-filled and reused after release") {
  void* a = dscpp::protected_allocate(100);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(a) % 4096 == 0);
  CHECK(dscpp::protected_contains(a));
  int x = 0;
  CHECK_FALSE(dscpp::protected_contains(&x));
  {
    dscpp::ProtectedAccess open;
    CHECK(dscpp::ProtectedAccess::open_here());
    static_cast<char*>(a)[99] = 5;
  }
  CHECK_FALSE(dscpp::ProtectedAccess::open_here());
  dscpp::protected_release(a, 100);
  void* b = dscpp::protected_allocate(4096);  // first fit: the released page
  CHECK(b == a);
  {
    dscpp::ProtectedAccess open;
    CHECK(static_cast<char*>(b)[99] == 0);
  }
  void* c = dscpp::protected_allocate(3 * 4096);
  CHECK(static_cast<char*>(c) >= static_cast<char*>(b) + 4096);
  dscpp::protected_release(b, 4096);
  dscpp::protected_release(c, 3 * 4096);
}
