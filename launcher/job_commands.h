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

// The running dscpp binary (/proc/self/exe).
std::string self_executable();
// dscpp-runtime for this dscpp: next to it (installed), else in the build tree's runtime/
// (dscpp is build/launcher/dscpp). The path is returned even if it does not exist.
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
