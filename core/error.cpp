#include "core/error.h"

namespace dscpp {

void check_failed(const char* file, int line, const std::string& what) {
  throw InternalError(
      fmt::format("internal error at {}:{}: {} (this is a dscpp bug; please report it)", file, line, what));
}

}  // namespace dscpp
