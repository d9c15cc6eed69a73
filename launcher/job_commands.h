// The exact commands each runner executes: what PROGRAM becomes on a rank, and the mpirun,
// srun and per-host agent command lines. Pure functions, so --dry_run prints exactly what
// runs and the tests check it.
#pragma once

#include "launcher/launch_plan.h"

#include <string>
#include <vector>

namespace dscpp::launcher {

struct ProgramSpec {
  std::vector<std::string> argv;   // what one rank runs (before --local_rank)
  int local_rank_at = -1;          // insert "--local_rank=N" at this argv index; -1 = never
  std::string file;                // a file that must be identical on every host ("" = none)
};

// The running dscpp binary with symlinks resolved (/proc/self/exe): where helpers installed
// next to the real binary are found.
std::string self_executable();
// Records main's argv[0], which invoked_executable() starts from.
void set_invoked_as(const std::string& argv0);
// The dscpp path other hosts are told to run: the path the user invoked, not resolved, since on
// a shared filesystem reached through symlinks (/shared -> /mnt/nfs3/shared) the resolved path
// may exist on this host only. argv[0] made absolute when it holds a '/', else the first PATH
// entry holding an executable of that name; used only when it is the same file (device and
// inode) as the running binary, else self_executable().
std::string invoked_executable();
// invoked_executable()'s rule with its inputs given: `self` is the running binary's path.
std::string invoked_path(const std::string& argv0, const std::string& path_env, const std::string& self);
// dscpp-runtime for the dscpp at `dscpp_path`: next to it (installed), else in the build tree's
// runtime/ (dscpp is build/launcher/dscpp); looked for next to `dscpp_path` as given first, then
// next to the file it resolves to. When neither has it, the build-tree path next to `dscpp_path`.
std::string runtime_executable(const std::string& dscpp_path);

// `*.so` -> dscpp-runtime --model ABS.so; `*.py` -> python3 -u ABS.py (DeepSpeed's habit);
// a path -> its absolute path; a bare name -> looked up in PATH on each host. `--local_rank=N`
// is added for plugins and Python scripts, as DeepSpeed adds it, unless no_local_rank;
// never for other executables (it would break `dscpp -- hostname`).
ProgramSpec resolve_program(const std::vector<std::string>& program, bool no_local_rank, const std::string& dscpp_path);

// argv of one rank: the program with --local_rank=N inserted where it belongs.
std::vector<std::string> rank_argv(const ProgramSpec& program, int local_rank);

// Shell-style word splitting for --launcher_args (quotes and backslashes, no expansion).
std::vector<std::string> split_shell_words(const std::string& text);

// mpirun running `dscpp rank-shim` once per rank on the plan's hosts; `env_names` are
// forwarded with -x (their values are set in mpirun's own environment).
std::vector<std::string> mpirun_argv(const WorldPlan& plan, const std::vector<std::string>& env_names,
                                     const std::string& launcher_args, const std::string& dscpp_path,
                                     const ProgramSpec& program, bool no_local_rank, bool as_root);

// srun running `dscpp rank-shim` per task with the plan's node and task counts; the
// environment travels with --export=ALL from srun's own environment.
std::vector<std::string> srun_argv(const WorldPlan& plan, bool restrict_nodes, const std::string& launcher_args,
                                   const std::string& dscpp_path, const ProgramSpec& program, bool no_local_rank);

// The first line a local shell command prints (without the newline), or "" when it prints
// nothing or cannot run. For small queries: versions, sha256sum, scontrol.
std::string first_line_of(const std::string& command);

// The remote shell command that starts the per-host agent: cd to the launch directory
// (the same on every host, as DeepSpeed requires) and exec dscpp node-agent ARGS.
std::string agent_command(const std::string& cwd, const std::string& dscpp_path,
                          const std::vector<std::string>& agent_args);

}  // namespace dscpp::launcher
