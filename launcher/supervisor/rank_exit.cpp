#include "launcher/supervisor/rank_exit.h"

#include "core/error.h"

#include <fmt/core.h>

#include <charconv>
#include <cstring>

namespace dscpp::launcher {
namespace {

constexpr std::string_view kMarker = "dscpp-rank-exit ";

// The value of `key=` in `fields` (space-separated; host is last and may not hold a space).
std::optional<std::string_view> field(std::string_view fields, std::string_view key) {
  for (size_t at = 0; at < fields.size();) {
    size_t end = fields.find(' ', at);
    if (end == std::string_view::npos) end = fields.size();
    std::string_view item = fields.substr(at, end - at);
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=')
      return item.substr(key.size() + 1);
    at = end + 1;
  }
  return std::nullopt;
}

bool to_int(std::optional<std::string_view> text, int& value) {
  if (!text || text->empty()) return false;
  auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  return error == std::errc() && end == text->data() + text->size();
}

// The tag a backend may put before a task's line: mpirun's --tag-output "[1,2]<stderr>:" or
// srun's --label "2: ". Only a tag, never a rank's own "[rank R]" prefix, may precede a report.
size_t backend_tag_length(std::string_view line) {
  auto digits = [&](size_t at) {
    size_t end = at;
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
    return end;
  };
  if (!line.empty() && line[0] == '[') {
    size_t comma = digits(1), close = comma < line.size() && line[comma] == ',' ? digits(comma + 1) : 0;
    constexpr std::string_view kStderr = "]<stderr>:";
    if (close > comma + 1 && line.substr(close, kStderr.size()) == kStderr) return close + kStderr.size();
    return 0;
  }
  size_t end = digits(0);
  if (end > 0 && line.substr(end, 2) == ": ") return end + 2;
  return 0;
}

}  // namespace

std::string signal_name(int sig) {
  const char* name = sigabbrev_np(sig);
  return name ? name : std::to_string(sig);
}

std::string RankExit::describe() const {
  std::string who = rank < 0       ? host
                    : host.empty() ? fmt::format("rank {}", rank)
                                   : fmt::format("rank {} on {}", rank, host);
  if (signal != 0) return who + " killed by signal " + signal_name(signal);
  return fmt::format("{} exited with code {}", who, exit_code);
}

std::string exit_report_line(const RankExit& exit) {
  return fmt::format("{}rank={} code={} signal={} stopped={} host={}\n", kMarker, exit.rank, exit.exit_code,
                     exit.signal, exit.stopped ? 1 : 0, exit.host);
}

std::optional<RankExit> parse_exit_report(std::string_view line) {
  line.remove_prefix(backend_tag_length(line));
  if (line.substr(0, kMarker.size()) != kMarker) return std::nullopt;
  line.remove_prefix(kMarker.size());
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  RankExit exit;
  int stopped = 0;
  auto host = field(line, "host");
  if (!to_int(field(line, "rank"), exit.rank) || !to_int(field(line, "code"), exit.exit_code) ||
      !to_int(field(line, "signal"), exit.signal) || !to_int(field(line, "stopped"), stopped) || !host)
    return std::nullopt;
  exit.stopped = stopped != 0;
  exit.host = std::string(*host);
  return exit;
}

std::optional<Blame::Verdict> Blame::exited(const RankExit& exit, Clock::time_point now) {
  if (decided_ || !exit.failed()) return std::nullopt;
  if (exit.stopped) {
    if (!first_stopped_) first_stopped_ = exit;
    return std::nullopt;
  }
  if (exit.signal == 0 && exit.exit_code == kExitPeerFailed) {
    if (!bystander_) {
      bystander_ = exit;
      bystander_deadline_ =
          now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_seconds_));
    }
    return std::nullopt;
  }
  decided_ = true;
  std::string note;
  if (bystander_)
    note = bystander_->rank < 0 ? fmt::format(" ({} had stopped because of a peer's failure)", bystander_->host)
                                : fmt::format(" (rank {} had stopped because of a peer's failure)", bystander_->rank);
  return Verdict{exit, note};
}

std::optional<Blame::Verdict> Blame::due(bool nothing_left, Clock::time_point now) {
  if (!decided_ && !bystander_ && nothing_left && first_stopped_) {
    decided_ = true;
    return Verdict{*first_stopped_, " (its supervisor stopped it: a signal from outside the job?)"};
  }
  if (decided_ || !bystander_ || (!nothing_left && now < bystander_deadline_)) return std::nullopt;
  decided_ = true;
  return Verdict{*bystander_,
                 fmt::format(" (it stopped because a peer failed, and no rank failed on its own within {:g} s)",
                             wait_seconds_)};
}

std::optional<Blame::Clock::time_point> Blame::deadline() const {
  if (decided_ || !bystander_) return std::nullopt;
  return bystander_deadline_;
}

}  // namespace dscpp::launcher
