#include "launcher/restart.h"

#include "core/error.h"

#include <fmt/core.h>
#include <unistd.h>

namespace dscpp::launcher {

namespace {

void say(int fd, const std::string& text) {
  std::string line = "dscpp: " + text + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

EnvList restart_env(int restart, int max_restarts) {
  return {{"DSCPP_RESTART_COUNT", std::to_string(restart)},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
          {"TORCHELASTIC_MAX_RESTARTS", std::to_string(max_restarts)}};
}

int run_with_restarts(int max_restarts, const std::function<AttemptResult(int restart)>& attempt, int err_fd) {
  if (max_restarts < 0) fail("--max_restarts {}: expected 0 or more", max_restarts);
  for (int restart = 0;; ++restart) {
    AttemptResult result = attempt(restart);
    if (result.exit_code == 0 || result.stopped) return result.exit_code;
    std::string what =
        result.failure.empty() ? fmt::format("the job exited with code {}", result.exit_code) : result.failure;
    if (restart < max_restarts) {
      say(err_fd, fmt::format("{}; restarting the job (restart {} of {})", what, restart + 1, max_restarts));
      continue;
    }
    if (max_restarts > 0) say(err_fd, fmt::format("{}; no restarts left ({} used)", what, max_restarts));
    return result.exit_code;
  }
}

}  // namespace dscpp::launcher
