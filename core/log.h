// Process-wide logging. Every line carries the rank prefix set once by `init_logging`
// ("[rank 3] ", or "[rank 3 node2] " when the job spans hosts), so interleaved output from
// many ranks stays attributable. spdlog stays inside log.cpp to keep this header cheap.
#pragma once

#include <fmt/core.h>

#include <string>
#include <string_view>

namespace dscpp::log {

enum class Level { debug, info, warn, error };

// rank < 0 means "not a rank" (the launcher, tools): no prefix.
void init_logging(int rank, const std::string& host = {});
void set_level(Level level);
bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::info)) write(Level::info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::error)) write(Level::error, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace dscpp::log
