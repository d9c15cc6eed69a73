// The per-job directory that holds one rank's swap files under nvme_path:
//
//   <nvme_path>/dscpp-<job id>-rank<R>/dscpp-owner     pid, host, boot id, process start time
//
// Lifetime: created (atomically, with its owner marker) by the constructor; removed by the
// destructor on normal exit and on exceptions; removed on abnormal death too (any signal,
// SIGKILL included) by a small watcher process that waits for this process to go away. If even
// the watcher dies (machine reset, cgroup kill), the directory is stale: the next SwapDir under
// the same nvme_path on this host finds it, sees that its owner is gone, and removes it with a
// log line.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dscpp::offload {

struct SwapDirOptions {
  // Start the watcher process that removes the directory if this process dies abnormally.
  bool watch_for_crash = true;
};

class SwapDir {
 public:
  // Throws dscpp::Error (path, cause, remedy) when nvme_path is missing, not a directory or not
  // writable, or when the directory exists and its owner is alive (or on another host).
  SwapDir(const std::string& nvme_path, const std::string& job_id, int rank, SwapDirOptions options = {});
  ~SwapDir();  // remove(); never throws (a failure is logged)
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Removes the directory and everything in it now; idempotent. Throws on failure.
  void remove();
  pid_t watcher_pid() const { return watcher_pid_; }

  // Name of the directory SwapDir creates for (job_id, rank); unsafe characters in job_id
  // become '_'.
  static std::string dir_name(const std::string& job_id, int rank);
  // Removes every dscpp swap directory under nvme_path whose owner process is gone (it ran on
  // this host and is no longer running, or this host has rebooted since), logging each one.
  // Returns the removed paths. Directories of live owners and of other hosts are left alone.
  static std::vector<std::string> clean_stale(const std::string& nvme_path);

 private:
  void start_watcher();

  std::string path_;
  pid_t watcher_pid_ = -1;
  int watcher_fd_ = -1;  // write end of the pipe the watcher reads; closing it releases it
  bool removed_ = false;
};

// The job id for swap directories: DSCPP_JOB_ID, else "slurm<SLURM_JOB_ID>", else "p<pid>".
std::string swap_job_id_from_env();

// The owner marker, exposed for tests and diagnostics.
struct SwapDirOwner {
  long pid = 0;
  std::string host;
  std::string boot_id;
  unsigned long long start_ticks = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
  std::string started;                 // wall-clock time, for people
};
constexpr const char* kSwapOwnerFile = "dscpp-owner";
SwapDirOwner current_swap_owner();
std::string format_swap_owner(const SwapDirOwner& owner);
std::optional<SwapDirOwner> read_swap_owner(const std::string& dir);

}  // namespace dscpp::offload
