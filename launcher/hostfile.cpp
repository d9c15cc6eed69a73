// DeepSpeed's hostfile grammar: the regex `^(\S+)\s+slots=(\d+)` searched on
// each stripped line. Reimplemented by hand so that each way a line can fail gets its own hint.
#include "launcher/hostfile.h"

#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace dscpp::launcher {
namespace {

// Python's str.strip() and regex `\s` on ASCII.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Why a line that is not `HOST slots=N` failed, for the message.
std::string bad_entry_hint(std::string_view rest) {
  if (rest.empty()) return "the slot count is missing (e.g. \"worker-0 slots=8\")";
  if (rest.substr(0, 5) != "slots") return "the second word must be slots=N; host names cannot contain spaces";
  std::string_view after = rest.substr(5);
  if (!after.empty() && is_space(after.front())) return "no spaces are allowed around '='";
  if (after.empty() || after.front() != '=') return "the second word must be slots=N";
  after.remove_prefix(1);
  if (!after.empty() && is_space(after.front())) return "no spaces are allowed around '='";
  return "N must be a non-negative integer";
}

}  // namespace

UserAtHost split_user_host(std::string_view entry) {
  size_t at = entry.rfind('@');
  if (at == std::string_view::npos) return {"", std::string(entry)};
  return {std::string(entry.substr(0, at)), std::string(entry.substr(at + 1))};
}

ResourcePool parse_hostfile(std::string_view text, std::string_view file_name) {
  ResourcePool pool;
  std::map<std::string, std::pair<int, std::string>, std::less<>> first_line;  // name -> line, entry
  int line_no = 1;
  for (size_t pos = 0; pos <= text.size(); ++line_no) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = strip(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    size_t host_end = 0;
    while (host_end < line.size() && !is_space(line[host_end])) ++host_end;
    std::string_view host = line.substr(0, host_end);
    size_t rest_begin = host_end;
    while (rest_begin < line.size() && is_space(line[rest_begin])) ++rest_begin;
    std::string_view rest = line.substr(rest_begin);
    // `\s+slots=(\d+)`: at least one space, the literal, at least one digit; the rest is ignored.
    size_t digits = 0;
    if (rest.substr(0, 6) == "slots=")
      while (6 + digits < rest.size() && is_digit(rest[6 + digits])) ++digits;
    if (rest_begin == host_end || digits == 0)
      fail("{}:{}: found \"{}\"; expected \"HOSTNAME slots=N\": {}", file_name, line_no, line, bad_entry_hint(rest));
    std::string_view number = rest.substr(6, digits);
    while (number.size() > 1 && number.front() == '0') number.remove_prefix(1);
    if (number.size() > 6 || std::stoi(std::string(number)) > kMaxHostSlots)
      fail("{}:{}: found slots={} for host \"{}\"; expected at most {} slots per host", file_name, line_no, number,
           host, kMaxHostSlots);
    int slots = std::stoi(std::string(number));
    UserAtHost login = split_user_host(host);
    if (host.find('@') != std::string_view::npos && (login.user.empty() || login.host.empty()))
      fail("{}:{}: found host \"{}\" with an empty {}; expected HOSTNAME or USER@HOSTNAME", file_name, line_no, host,
           login.user.empty() ? "user before '@'" : "host name after '@'");
    auto [it, inserted] = first_line.emplace(login.host, std::pair{line_no, std::string(host)});
    if (!inserted)
      fail("{}:{}: found host \"{}\" again (first listed on line {}{}); expected each host once, with all its slots",
           file_name, line_no, host, it->second.first,
           it->second.second == host ? "" : fmt::format(" as \"{}\"", it->second.second));
    HostSlots entry{std::string(host), {}};
    for (int s = 0; s < slots; ++s) entry.slots.push_back(s);
    pool.push_back(std::move(entry));
  }
  if (pool.empty())
    fail("{}: found no hosts (the file is empty or has only comments); expected lines like \"worker-0 slots=8\"",
         file_name);
  return pool;
}

ResourcePool load_hostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec))
    fail("cannot read hostfile '{}': {}; expected a file of \"HOSTNAME slots=N\" lines (-H/--hostfile)", path,
         in ? "it is a directory" : std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::optional<ResourcePool> load_hostfile_if_present(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return load_hostfile(path);
}

}  // namespace dscpp::launcher
