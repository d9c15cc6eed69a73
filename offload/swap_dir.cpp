#include "offload/swap_dir.h"

#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "offload/direct_file.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace dscpp::offload {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "dscpp-";
constexpr const char* kTempPrefix = ".dscpp-";

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string boot_id() {
  return read_first_line("/proc/sys/kernel/random/boot_id");
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); 0 when the process is gone.
unsigned long long process_start_ticks(long pid) {
  std::string stat = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');  // the command name may contain spaces and ')'
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

enum class OwnerState { alive, dead, elsewhere };

OwnerState owner_state(const SwapDirOwner& o) {
  if (o.host != this_host()) return OwnerState::elsewhere;
  if (o.boot_id != boot_id()) return OwnerState::dead;  // this host rebooted since
  if (kill(static_cast<pid_t>(o.pid), 0) != 0 && errno == ESRCH) return OwnerState::dead;
  // A live pid with another start time is a new process that reused the number.
  return process_start_ticks(o.pid) == o.start_ticks ? OwnerState::alive : OwnerState::dead;
}

bool is_swap_dir_name(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 || name.rfind(kTempPrefix, 0) == 0;
}

void check_nvme_path(const std::string& nvme_path) {
  std::error_code ec;
  if (nvme_path.empty()) fail("nvme_path is empty; set offload_*.nvme_path to a directory on a fast local disk");
  if (!fs::exists(nvme_path, ec))
    fail(
        "nvme_path {} does not exist; create it (mkdir -p {}) or point nvme_path at an existing directory on a "
        "fast local disk",
        nvme_path, nvme_path);
  if (!fs::is_directory(nvme_path, ec)) fail("nvme_path {} is not a directory", nvme_path);
  if (access(nvme_path.c_str(), W_OK | X_OK) != 0)
    fail("nvme_path {} is not writable by this user (uid {}): {}", nvme_path, getuid(),
         describe_errno(errno, nvme_path + "/."));
}

void write_owner(const std::string& dir) {
  std::string marker = dir + "/" + kSwapOwnerFile;
  std::ofstream f(marker, std::ios::trunc);
  f << format_swap_owner(current_swap_owner());
  f.close();
  if (!f) fail("cannot write the owner marker {}: {}", marker, describe_errno(errno ? errno : EIO, marker));
}

}  // namespace

SwapDirOwner current_swap_owner() {
  SwapDirOwner o;
  o.pid = getpid();
  o.host = this_host();
  o.boot_id = boot_id();
  o.start_ticks = process_start_ticks(o.pid);
  char when[64] = {};
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  o.started = when;
  return o;
}

std::string format_swap_owner(const SwapDirOwner& o) {
  return fmt::format("pid={}\nhost={}\nboot_id={}\nstart_ticks={}\nstarted={}\n", o.pid, o.host, o.boot_id,
                     o.start_ticks, o.started);
}

std::optional<SwapDirOwner> read_swap_owner(const std::string& dir) {
  std::ifstream f(dir + "/" + kSwapOwnerFile);
  if (!f) return std::nullopt;
  SwapDirOwner o;
  std::string line;
  bool have_pid = false;
  while (std::getline(f, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "pid")
      o.pid = std::strtol(value.c_str(), nullptr, 10), have_pid = o.pid > 0;
    else if (key == "host")
      o.host = value;
    else if (key == "boot_id")
      o.boot_id = value;
    else if (key == "start_ticks")
      o.start_ticks = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "started")
      o.started = value;
  }
  if (!have_pid || o.host.empty()) return std::nullopt;
  return o;
}

std::string SwapDir::dir_name(const std::string& job_id, int rank) {
  std::string safe = job_id.empty() ? "job" : job_id;
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return fmt::format("{}{}-rank{}", kPrefix, safe, rank);
}

std::vector<std::string> SwapDir::clean_stale(const std::string& nvme_path) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(nvme_path, ec)) {
    std::string name = entry.path().filename().string();
    if (!is_swap_dir_name(name) || !entry.is_directory(ec)) continue;
    auto owner = read_swap_owner(entry.path().string());
    if (!owner || owner_state(*owner) != OwnerState::dead) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);  // a peer rank may be removing it too: ENOENT is fine
    if (rm && rm != std::errc::no_such_file_or_directory) {
      log::warn("stale swap directory {} (owner pid {} on {} is gone) could not be removed: {}", entry.path().string(),
                owner->pid, owner->host, rm.message());
      continue;
    }
    log::warn("removed stale swap directory {} left by pid {} on {} (started {}), which is no longer running",
              entry.path().string(), owner->pid, owner->host, owner->started);
    removed.push_back(entry.path().string());
  }
  return removed;
}

SwapDir::SwapDir(const std::string& nvme_path, const std::string& job_id, int rank, SwapDirOptions options) {
  check_nvme_path(nvme_path);
  std::string root = fs::absolute(nvme_path).lexically_normal().string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  clean_stale(root);
  path_ = root + "/" + dir_name(job_id, rank);

  auto in_use = [&]() -> Error {
    auto owner = read_swap_owner(path_);
    if (!owner)
      return Error(
          fmt::format("swap directory {} already exists without a readable owner marker ({}); if no job is "
                      "using it, remove it",
                      path_, kSwapOwnerFile));
    return Error(
        fmt::format("swap directory {} is in use by pid {} on {} (started {}): is another job running with "
                    "the same job id and rank? If that process is gone, remove the directory",
                    path_, owner->pid, owner->host, owner->started));
  };
  if (fs::exists(path_)) throw in_use();

  // Build the directory under a temporary name with its marker, then rename: a directory with
  // the final name always says who owns it.
  std::string temp =
      fmt::format("{}/{}{}.tmp-{}", root, kTempPrefix, dir_name(job_id, rank).substr(std::strlen(kPrefix)), getpid());
  std::error_code ec;
  fs::remove_all(temp, ec);
  if (mkdir(temp.c_str(), 0700) != 0)
    fail("cannot create the swap directory {}: {}", temp, describe_errno(errno, temp + "/."));
  try {
    write_owner(temp);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  if (rename(temp.c_str(), path_.c_str()) != 0) {
    int err = errno;
    fs::remove_all(temp, ec);
    if (err == EEXIST || err == ENOTEMPTY) throw in_use();
    fail("cannot create the swap directory {}: {}", path_, describe_errno(err, path_));
  }
  if (options.watch_for_crash) {
    try {
      start_watcher();
    } catch (...) {
      fs::remove_all(path_, ec);
      throw;
    }
  }
  log::debug("swap directory {} created", path_);
}

void SwapDir::start_watcher() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("cannot create a pipe for the swap-directory watcher: {}", std::strerror(errno));
  // The watcher ignores the job's signals and leaves its session (so a launcher's killpg does not
  // take it down first), blocks until this process closes the pipe (exit, crash or kill), then
  // removes the directory if the marker still names this process.
  const char* script =
      "trap '' INT TERM HUP; read -r _; grep -qx \"pid=$2\" \"$1/dscpp-owner\" 2>/dev/null && rm -rf -- \"$1\"";
  std::string pid = std::to_string(getpid());
  const char* argv[] = {"/bin/sh", "-c", script, "dscpp-swap-cleanup", path_.c_str(), pid.c_str(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t child = -1;
  int err = posix_spawn(&child, "/bin/sh", &actions, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[0]);
  if (err != 0) {
    close(fds[1]);
    fail("cannot start the swap-directory watcher (/bin/sh): {}", std::strerror(err));
  }
  watcher_pid_ = child;
  watcher_fd_ = fds[1];
}

void SwapDir::remove() {
  std::error_code ec;
  if (!removed_) {
    fs::remove_all(path_, ec);
    removed_ = !ec || ec == std::errc::no_such_file_or_directory;
  }
  if (watcher_fd_ >= 0) {
    // The watcher wakes and exits; if our removal failed it tries once more itself.
    close(watcher_fd_);
    watcher_fd_ = -1;
    waitpid(watcher_pid_, nullptr, 0);
  }
  if (!removed_) fail("cannot remove the swap directory {}: {}", path_, ec.message());
}

SwapDir::~SwapDir() {
  try {
    remove();
  } catch (const Error& e) {
    log::error("{}", e.what());
  }
}

std::string swap_job_id_from_env() {
  if (const char* id = knob("DSCPP_JOB_ID"); id && *id) return id;
  if (const char* id = std::getenv("SLURM_JOB_ID"); id && *id) return std::string("slurm") + id;
  return "p" + std::to_string(getpid());
}

}  // namespace dscpp::offload
