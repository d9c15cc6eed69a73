// Helpers shared by the supervisor tests (test_supervisor.cpp, test_supervisor_reports.cpp):
// a console stand-in, /bin/sh ranks, and "nothing left" checks through /proc — every rank
// prints the pids it owns, and every process of a test carries a unique token in its environment.
#pragma once

#include "launcher/supervisor/supervisor.h"

#include <catch2/catch.hpp>
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace supervisor_test {

using namespace dscpp::launcher;

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A temporary file standing in for the console.
struct Capture {
  FILE* file = std::tmpfile();
  ~Capture() { std::fclose(file); }
  int fd() const { return fileno(file); }
  std::string text() const {
    std::string result;
    char buffer[4096];
    ssize_t n;
    for (off_t at = 0; (n = pread(fd(), buffer, sizeof buffer, at)) > 0; at += n) result.append(buffer, n);
    return result;
  }
};

inline std::string unique_token() {
  static int counter = 0;
  return "dscpp_sup_test_" + std::to_string(getpid()) + "_" + std::to_string(++counter);
}

inline RankLaunch sh_rank(int rank, const std::string& script, const std::string& token = "") {
  RankLaunch launch;
  launch.rank = rank;
  launch.label = "[rank " + std::to_string(rank) + "]";
  launch.argv = {"/bin/sh", "-c", script};
  if (!token.empty()) launch.env.emplace_back("DSCPP_TEST_TOKEN", token);
  return launch;
}

// Processes (zombies included: their /proc entry stays) whose environment holds the token.
inline std::vector<std::string> processes_with(const std::string& token) {
  std::vector<std::string> found;
  DIR* dir = opendir("/proc");
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream env(std::string("/proc/") + entry->d_name + "/environ");
    std::string content((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (content.find("DSCPP_TEST_TOKEN=" + token) != std::string::npos) found.push_back(entry->d_name);
  }
  closedir(dir);
  return found;
}

// Every "pid N" / "child N" the ranks printed must be gone from /proc entirely (not even a zombie).
inline std::vector<std::string> surviving_pids(const std::string& output) {
  std::vector<std::string> alive;
  std::regex pid_line(R"((?:pid|child) (\d+))");
  for (std::sregex_iterator it(output.begin(), output.end(), pid_line), end; it != end; ++it) {
    std::string pid = (*it)[1];
    if (access(("/proc/" + pid + "/stat").c_str(), F_OK) == 0) alive.push_back(pid);
  }
  return alive;
}

inline SupervisorOptions to(const Capture& out, const Capture& err, double grace = 2, const std::string& host = "") {
  SupervisorOptions options;
  options.grace_seconds = grace;
  options.out_fd = out.fd();
  options.err_fd = err.fd();
  options.host = host;
  return options;
}

inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace supervisor_test
