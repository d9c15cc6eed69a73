// The per-host agent (DeepSpeed's launch.py): from the whole job's plan, start this host's
// ranks under run_rank_group and exit with the group's code. The ssh runner starts it on every
// host as `dscpp node-agent ARGS -- PROGRAM...`, keeping its stdin open: EOF on stdin (the
// launcher stopped the job or the connection dropped) stops this host's ranks.
#pragma once

#include "launcher/launch_plan.h"
#include "launcher/supervisor/supervisor.h"

#include <string>
#include <vector>

namespace dscpp::launcher {

struct NodeAgentArgs {
  std::string world_info{};  // DeepSpeed's base64 world info: ordered host -> slots (encode_world_info)
  int node_rank = 0;         // which host of world_info this agent runs
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool devices_are_gpus = false;       // slots are CUDA devices (ranks get CUDA_VISIBLE_DEVICES)
  EnvList env{};                       // exported to every rank, after the plan's variables
  std::vector<std::string> program{};  // what each rank runs (argv[0] searched in PATH if bare)
  int local_rank_at = -1;              // insert "--local_rank=N" at this argv index; -1 = never (--no_local_rank)
  bool bind_cores_to_rank = false;     // pin ranks to disjoint core slices and set OMP_NUM_THREADS
  std::string bind_core_list{};        // "0-3,8-11"; empty = cores 0..physical_cores-1
  std::string each_rank_log_dir{};     // non-empty: rank R writes <dir>/<YYYYmmddHHMMSS>_rank<R>.log, no console
  std::string save_pid_file{};         // non-empty: the agent's pid is written there while it runs
  double grace_seconds = 5.0;          // SIGTERM -> SIGKILL when stopping ranks
  bool stop_on_stdin_eof = true;       // stdin readable/EOF stops the ranks (false for the local runner)
  bool report_exits = true;            // each rank exit as a report line on stderr (false for the local runner)
  // The job's secret, given to every rank as DSCPP_JOB_SECRET. Never an argument: node_agent_argv
  // leaves it out, and an agent started over ssh has it in its environment already (ssh.h).
  std::string job_secret{};
};

// Starts this host's ranks (labels "[rank R]", or "[rank R HOST]" when the job spans hosts;
// host = the world info's name for it) and returns the exit status for the agent process:
// 0, the first failing rank's code (128+N for signal N), 130/143 when stopped.
// Throws dscpp::Error for a bad plan (node_rank out of range, no program, unusable log dir,
// a core list too short for the ranks) before anything starts.
int run_node_agent(const NodeAgentArgs& args);
// The same, with the whole result (the local runner tells a failure from a stop with it).
GroupResult run_node_agent_group(const NodeAgentArgs& args);

// The arguments after `dscpp node-agent`, as the ssh runner sends them:
//   --world_info=B64 --node_rank=N --master_addr=A --master_port=P [--gpus]
//   [--env K=V]... [--local_rank_at=I] [--bind_cores_to_rank] [--bind_core_list=L]
//   [--enable_each_rank_log=DIR] [--save_pid=FILE] [--grace_seconds=S] [--no_stdin_stop]
//   [--no_exit_reports] -- PROGRAM [ARGS...]
std::vector<std::string> node_agent_argv(const NodeAgentArgs& args);
// The inverse; also accepts `--key value` for every `--key=value`. Throws dscpp::Error naming
// an unknown or malformed argument.
NodeAgentArgs parse_node_agent_argv(const std::vector<std::string>& argv);

}  // namespace dscpp::launcher
