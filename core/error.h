// Errors a user can act on.
//
// Two tiers, as in gloo: `Error` is a failure the user can fix (bad input, missing file,
// unreachable host) and its message must say what was expected and what was found;
// `InternalError` is a broken invariant inside dscpp, raised by DSCPP_CHECK*, whose message
// names the expression and both operands so the report is useful without a debugger.
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>

namespace dscpp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// A failure this rank did not cause: a peer exited, hung up, stalled, or took the store with
// it. dscpp-runtime exits with kExitPeerFailed for it, so that the launcher blames the rank
// whose failure came first in cause rather than the bystander that noticed first.
class PeerFailure : public Error {
 public:
  explicit PeerFailure(const std::string& message) : Error(message) {}
};
inline constexpr int kExitPeerFailed = 3;

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

}  // namespace dscpp

#define DSCPP_CHECK(cond)                                                           \
  do {                                                                              \
    if (!(cond)) ::dscpp::check_failed(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)

// Compares with `op` and, on failure, prints both operands (they must be fmt-formattable).
#define DSCPP_CHECK_OP(a, op, b)                                                                                  \
  do {                                                                                                            \
    const auto& dscpp_a_ = (a);                                                                                   \
    const auto& dscpp_b_ = (b);                                                                                   \
    if (!(dscpp_a_ op dscpp_b_))                                                                                  \
      ::dscpp::check_failed(__FILE__, __LINE__,                                                                   \
                            ::fmt::format("check failed: {} " #op " {} ({} vs {})", #a, #b, dscpp_a_, dscpp_b_)); \
  } while (0)

#define DSCPP_CHECK_EQ(a, b) DSCPP_CHECK_OP(a, ==, b)
#define DSCPP_CHECK_NE(a, b) DSCPP_CHECK_OP(a, !=, b)
#define DSCPP_CHECK_LT(a, b) DSCPP_CHECK_OP(a, <, b)
#define DSCPP_CHECK_LE(a, b) DSCPP_CHECK_OP(a, <=, b)
#define DSCPP_CHECK_GE(a, b) DSCPP_CHECK_OP(a, >=, b)
