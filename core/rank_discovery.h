// Who am I in the job? Read from the environment a launcher left behind: dscpp's and
// DeepSpeed's/torchrun's names first (RANK, LOCAL_RANK, WORLD_SIZE, ...), then OpenMPI
// (OMPI_COMM_WORLD_*), SLURM (SLURM_PROCID, ...), PMIx and PMI. The runtime and the rank shim
// that mpirun/srun start both use this, so every way of starting a rank yields the same
// numbers. No MPI library is needed to find out.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace dscpp {

struct RankIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  int node_count = 1;
  std::string source;  // which variables said so: "RANK/WORLD_SIZE", "OMPI_COMM_WORLD_*", "SLURM_*", ...
};

using EnvGetter = std::function<std::optional<std::string>(const std::string&)>;
EnvGetter process_env();

// Nullopt when no launcher variables are present (a single process started by hand).
// Throws dscpp::Error when they are present but contradictory or malformed, naming them.
std::optional<RankIdentity> discover_rank(const EnvGetter& env = process_env());

}  // namespace dscpp
