// Reading a SLURM allocation from its environment: hostlist expressions, tasks-per-node
// lists, GPUs per node — and telling whether this process is itself already a launched task.
//
// DeepSpeed reads no SLURM variable; dscpp uses them to build the resource
// pool inside `sbatch`/`salloc` without a hostfile. Everything takes an Environment so that
// tests never touch the real one.
#pragma once

#include "launcher/launch_plan.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher {

// Largest expansion accepted (SLURM's own limit is of the same order).
inline constexpr size_t kMaxHostlistHosts = 65536;

// Expands a hostlist the way SLURM 22.05's `scontrol show hostnames` does:
//   "node[001-003,010],gpu-a[1-2]"  -> node001 node002 node003 node010 gpu-a1 gpu-a2
//   "rack[1-2]-node[01-02]"         -> rack1-node01 rack1-node02 rack2-node01 rack2-node02
// Items are separated by ',' or whitespace outside brackets; a range's width is the width
// of its first number ("n[01-10]" pads to 2, "n[1-010]" does not pad); order and duplicates
// are kept. With several brackets the last varies fastest, then the first, second, ... (that
// is SLURM's order for 3+ brackets). Text after the last bracket is an error, as in SLURM.
// `source` names the expression in messages ("SLURM_JOB_NODELIST").
std::vector<std::string> expand_hostlist(std::string_view expr, std::string_view source = "hostlist");

// "2(x3),1" -> {2, 2, 2, 1} (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE).
std::vector<int> expand_tasks_per_node(std::string_view value, std::string_view source = "SLURM_TASKS_PER_NODE");

struct SlurmAllocation {
  ResourcePool pool{};            // nodes in SLURM's order, slots 0..n-1 on each
  bool devices_are_gpus = false;  // n came from a GPU variable: slots are GPU ids
  std::string nodes_from{};       // e.g. "SLURM_JOB_NODELIST=node[1-3]"
  std::string slots_from{};       // e.g. "SLURM_GPUS_ON_NODE=4" or "SLURM_TASKS_PER_NODE=2(x2),1"
};

// The allocation this process runs in, or nullopt when SLURM_JOB_NODELIST/SLURM_NODELIST is
// unset. Nodes: SLURM_JOB_NODELIST, else SLURM_NODELIST. Slots per node: a GPU count when one
// is present — SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_STEP_GPUS (id lists: their length),
// SLURM_GPUS_PER_NODE ("[type:]N[,...]") — the same on every node; else SLURM_TASKS_PER_NODE,
// SLURM_NTASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE. GPU slots are 0..n-1, i.e. indices into the
// devices SLURM leaves visible on each node, not SLURM_JOB_GPUS's physical ids (those name
// the batch node only, and under cgroup device constraints CUDA renumbers from 0).
std::optional<SlurmAllocation> slurm_allocation(const Environment& env);

// Non-empty when this process was itself started as one of several ranks/tasks, so that
// launching ranks again would multiply them (DeepSpeed#1923). Checks, in order: RANK;
// SLURM_PROCID inside a job step (SLURM_STEP_ID/SLURM_STEPID set — the batch script has
// SLURM_PROCID=0 but no step id) with more than one task (a one-task step such as
// `srun --pty bash` is a shell, not a rank); OMPI_COMM_WORLD_RANK; PMI_RANK; PMIX_RANK.
// The text names the variable, its value and the launcher it implies.
std::optional<std::string> launched_task_reason(const Environment& env);

}  // namespace dscpp::launcher
