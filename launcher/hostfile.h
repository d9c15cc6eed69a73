// The MPI-style hostfile DeepSpeed reads (`-H/--hostfile`, default /job/hostfile).
//
// Format, exactly as DeepSpeed's `_parse_hostfile` accepts it: one `HOSTNAME slots=N` per
// line (any whitespace between, anything after `slots=N` ignored), blank lines and lines
// starting with `#` skipped. File order is node order and therefore rank order. A host with
// `slots=0` stays in the pool (it can be named in --include/--exclude) but yields no ranks.
#pragma once

#include "launcher/launch_plan.h"

#include <optional>
#include <string>
#include <string_view>

namespace dscpp::launcher {

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
