#include "core/log.h"

#include "core/knobs.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace dscpp::log {
namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::debug:
      return spdlog::level::debug;
    case Level::info:
      return spdlog::level::info;
    case Level::warn:
      return spdlog::level::warn;
    case Level::error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger>& logger() {
  // Logs go to stderr so that stdout carries only a command's result (a config dump, a
  // report) and can be piped.
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("dscpp");
    l->set_pattern("%^%l%$: %v");
    if (const char* env = knob("DSCPP_LOG_LEVEL")) l->set_level(spdlog::level::from_str(env));
    return l;
  }();
  return instance;
}

}  // namespace

void init_logging(int rank, const std::string& host) {
  std::string prefix;
  if (rank >= 0) prefix = host.empty() ? fmt::format("[rank {}] ", rank) : fmt::format("[rank {} {}] ", rank, host);
  logger()->set_pattern(prefix + "%^%l%$: %v");
}

void set_level(Level level) {
  logger()->set_level(to_spdlog(level));
}

bool enabled(Level level) {
  return logger()->should_log(to_spdlog(level));
}

void write(Level level, std::string_view message) {
  logger()->log(to_spdlog(level), message);
}

}  // namespace dscpp::log
