#include "offload/fio_baseline.h"

#include "core/error.h"
#include "offload/aligned_buffer.h"

#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace dscpp::offload {
namespace {

// Runs argv with stdout and stderr captured; returns the exit status (128+signal when killed).
int run_capture(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (pipe(fds) != 0) fail("cannot create a pipe to run {}: {}", argv[0], std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int err = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    fail("cannot run {}: {}", argv[0], std::strerror(err));
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::optional<std::string> find_fio(const std::string& explicit_path) {
  if (!explicit_path.empty())
    return access(explicit_path.c_str(), X_OK) == 0 ? std::optional(explicit_path) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/fio";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

std::string fio_version(const std::string& fio) {
  std::string out;
  run_capture({fio, "--version"}, &out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::vector<std::string> fio_args(const std::string& file, int64_t size, const AioOptions& o, bool write) {
  // The same slice AsyncIo gives each worker thread.
  int64_t slice = round_up((size + o.thread_count - 1) / o.thread_count, kDirectIoAlignment);
  std::vector<std::string> args = {
      "--name=dscpp-aio-bench",
      "--filename=" + file,
      std::string("--rw=") + (write ? "write" : "read"),
      "--bs=" + std::to_string(o.block_size),
      "--iodepth=" + std::to_string(o.queue_depth),
      "--direct=1",
      std::string("--ioengine=") + (o.backend == AioBackend::libaio ? "libaio" : "io_uring"),
      "--numjobs=" + std::to_string(o.thread_count),
      "--size=" + std::to_string(slice),
      "--offset_increment=" + std::to_string(slice),
      "--thread",
      "--group_reporting",
      "--output-format=json",
  };
  if (!o.overlap_events) {
    args.push_back("--iodepth_batch_submit=" + std::to_string(o.queue_depth));
    args.push_back("--iodepth_batch_complete_min=" + std::to_string(o.queue_depth));
  }
  return args;
}

double run_fio(const std::string& fio, const std::vector<std::string>& args, bool write) {
  std::vector<std::string> argv = {fio};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  int status = run_capture(argv, &out);
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
  // fio may print warnings before the JSON document.
  size_t start = out.find('{');
  if (status != 0 || start == std::string::npos) fail("fio failed (exit status {}): {}\n{}", status, command, out);
  nlohmann::json doc = nlohmann::json::parse(out.substr(start), nullptr, false);
  const char* dir = write ? "write" : "read";
  if (doc.is_discarded() || !doc.contains("jobs") || doc["jobs"].empty() || !doc["jobs"][0].contains(dir))
    fail("fio printed no {} result: {}\n{}", dir, command, out);
  const auto& job = doc["jobs"][0];
  if (job.value("error", 0) != 0) fail("fio reported error {}: {}\n{}", job.value("error", 0), command, out);
  return job[dir].value("bw_bytes", 0.0) / 1e9;
}

}  // namespace dscpp::offload
