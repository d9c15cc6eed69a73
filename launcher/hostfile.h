// The MPI-style hostfile DeepSpeed reads (`-H/--hostfile`, default /job/hostfile).
//
// Format, exactly as DeepSpeed's `_parse_hostfile` accepts it: one `HOSTNAME slots=N` per
// line (any whitespace between, anything after `slots=N` ignored), blank lines and lines
// starting with `#` skipped. File order is node order and therefore rank order. A host with
// `slots=0` stays in the pool (it can be named in --include/--exclude) but yields no ranks.
//
// HOSTNAME may be `user@host`, as ssh's destination: that host is logged in to as `user`
// (--ssh_user overrides it; it overrides the ssh config's User). The plan keeps the entry as
// written, so rank labels and messages show it; the SSH layer splits the user off when it logs
// in, and code that resolves or compares host names (the master address, --include/--exclude,
// repeated hosts) uses host_name_of(). Code that does not (is_local_host) sees "user@localhost"
// as another machine: a login as another user goes through ssh, even to this machine.
#pragma once

#include "launcher/launch_plan.h"

#include <optional>
#include <string>
#include <string_view>

namespace dscpp::launcher {

// "bob@node1" -> {"bob", "node1"}; "node1" -> {"", "node1"}. Split at the last '@', as ssh
// does, so that a user name may itself hold one ("jo@corp@node1" in a hostfile).
struct UserAtHost {
  std::string user, host;
};
UserAtHost split_user_host(std::string_view entry);
inline std::string host_name_of(std::string_view entry) {
  return split_user_host(entry).host;
}

// Largest `slots=N` accepted; more is a typo, not a machine.
inline constexpr int kMaxHostSlots = 65536;

// `file_name` is only used in messages. Throws dscpp::Error naming file:line, what was found
// and what was expected, for a bad entry, a repeated host, or a file without any host.
ResourcePool parse_hostfile(std::string_view text, std::string_view file_name);

// Reads and parses `path`; an unreadable or missing file is an error naming the path.
ResourcePool load_hostfile(const std::string& path);

// DeepSpeed's rule for the default path: a missing hostfile means "local run" (nullopt);
// a file that exists must parse.
std::optional<ResourcePool> load_hostfile_if_present(const std::string& path);

}  // namespace dscpp::launcher
