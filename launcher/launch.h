// `dscpp [launcher options] PROGRAM [args]`: from flags to running ranks. Resources come from
// the hostfile, else the SLURM allocation, else this machine; a runner (local, ssh, openmpi,
// slurm: launcher/runners/) starts them; the first failure anywhere stops everything (and,
// with --max_restarts, starts the whole job again: launcher/restart.h).
#pragma once

#include "launcher/launch_plan.h"

#include <map>
#include <string>
#include <vector>

namespace dscpp::launcher {

struct LaunchArgs {
  std::string hostfile = "/job/hostfile";  // DeepSpeed's default; a missing default file means "this machine"
  bool hostfile_given = false;
  std::string include, exclude;
  int num_nodes = -1;
  int num_gpus = -1;
  int num_procs = -1;  // ranks on this machine, each seeing all its GPUs (default: one per GPU, or 1)
  std::string master_addr;
  int master_port = 29500;
  std::string launcher;  // local | ssh | openmpi | slurm; empty = chosen from the resources
  std::string launcher_args;
  // SSH logins (--ssh_*): each given one overrides user@host and the ssh config (launcher/ssh/ssh_config.h).
  int ssh_port = 0;                        // 0 = not given: Port from the ssh config, else 22
  std::string ssh_user;                    // "" = user@host, User from the ssh config, else $USER
  std::vector<std::string> ssh_identity;   // tried before the ssh config's IdentityFile lines
  std::string ssh_known_hosts;             // "" = UserKnownHostsFile, else ~/.ssh/known_hosts
  std::string ssh_config;                  // "" = ~/.ssh/config; "none" = read none
  bool no_ssh_check = false;
  bool force_multi = false;
  bool no_local_rank = false;
  bool bind_cores_to_rank = false;
  std::string bind_core_list;
  std::string each_rank_log_dir;
  bool save_pid = false;
  bool dry_run = false;
  int max_restarts = 0;               // restart the whole job up to this many times after a rank fails
  std::vector<std::string> env;       // --env K=V
  std::vector<std::string> program;   // PROGRAM and its arguments
  bool master_port_given = false;
  // DeepSpeed's --no_ssh --node_rank N: this machine starts only node N's ranks of the plan (the
  // other machines run the same command with their N). -1 = every node, by the runner.
  int node_rank = -1;
  bool no_ssh = false;
  // A plan of this many machines, each with --num_gpus GPUs or --num_procs CPU ranks, without a
  // hostfile (Accelerate's `standard` multi-machine launch, with node_rank). 0 = none.
  int uniform_nodes = 0;
  // Accelerate's config file and `accelerate launch` flags (name -> text), applied to the fields
  // above by launcher/accelerate/launch_mapping.h.
  std::string accelerate_config_file;
  std::map<std::string, std::string> accelerate_flags;
};

// Returns the exit status for the `dscpp` process.
int run_launch(const LaunchArgs& args);

// `dscpp rank-shim [--local_rank_at=I] [--stop_on_stdin|--stop_on_usr1] -- PROGRAM ARGS`: what
// mpirun/srun start per task. Maps the task's OMPI_*/SLURM_* numbers onto RANK, LOCAL_RANK, ...
// and runs PROGRAM with prefixed output, reporting its exit on stderr for dscpp (rank_exit.h).
// `local_rank_at` >= 0 inserts --local_rank=N at that argv index. How dscpp's stop arrives:
// `stop_on_stdin`, EOF on stdin (srun hands every task the EOF of its own stdin);
// `stop_on_usr1`, SIGUSR1 (which mpirun forwards to every task).
int run_rank_shim(const std::vector<std::string>& program, int local_rank_at, bool stop_on_stdin, bool stop_on_usr1);

}  // namespace dscpp::launcher
