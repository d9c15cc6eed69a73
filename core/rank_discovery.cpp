#include "core/rank_discovery.h"

#include "core/error.h"

#include <fmt/core.h>

#include <charconv>
#include <cstdlib>

namespace dscpp {
namespace {

std::optional<int> read_int(const EnvGetter& env, const std::string& name) {
  auto v = env(name);
  if (!v || v->empty()) return std::nullopt;
  int out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || end != v->data() + v->size() || out < 0)
    fail("environment variable {}={} is not a non-negative integer", name, *v);
  return out;
}

// Names of one launcher's variables, in RankIdentity's field order; "" = not provided.
struct Scheme {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_size;
  const char* node_rank;
  const char* node_count;
};

constexpr Scheme kSchemes[] = {
    {"RANK/WORLD_SIZE (dscpp, DeepSpeed, torchrun)", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK",
     "CROSS_SIZE"},
    {"OMPI_COMM_WORLD_* (OpenMPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "", ""},  // OMPI's NODE_RANK is a local rank, not a node index
    {"SLURM_* (srun)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", "SLURM_NODEID", "SLURM_NNODES"},
    {"PMIX_* (PMIx)", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE", "PMIX_NODE_RANK", ""},
    {"PMI_* (MPICH/Hydra)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "", ""},
};

}  // namespace

EnvGetter process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

std::optional<RankIdentity> discover_rank(const EnvGetter& env) {
  for (const Scheme& s : kSchemes) {
    auto rank = read_int(env, s.rank);
    auto world = read_int(env, s.world_size);
    // SLURM sets SLURM_NTASKS in a batch script too; only a task (SLURM_PROCID) is a rank.
    if (!rank) continue;
    if (!world) fail("{} is set but {} is not; both are needed to know the job's size", s.rank, s.world_size);
    if (*world < 1 || *rank >= *world)
      fail("{}={} is outside the job of {}={} ranks", s.rank, *rank, s.world_size, *world);
    RankIdentity id;
    id.rank = *rank;
    id.world_size = *world;
    id.source = s.source;
    auto optional_int = [&](const char* name) { return *name ? read_int(env, name) : std::nullopt; };
    id.local_rank = optional_int(s.local_rank).value_or(0);
    if (auto local_size = optional_int(s.local_size)) {
      id.local_size = *local_size;
    } else if (std::string(s.source).rfind("SLURM", 0) == 0) {
      // SLURM_TASKS_PER_NODE is a run-length list ("2(x3),1"); the task's own node count
      // is SLURM_NTASKS_PER_NODE when uniform, else world / nodes is the best estimate.
      id.local_size =
          optional_int("SLURM_NTASKS_PER_NODE").value_or(std::max(1, id.world_size / std::max(1, id.node_count)));
    } else {
      id.local_size = std::max(1, id.world_size / std::max(1, id.node_count));
    }
    // Launchers that do not name the node assign ranks to nodes in blocks of local_size.
    id.node_rank = optional_int(s.node_rank).value_or(id.rank / id.local_size);
    id.node_count = optional_int(s.node_count).value_or((id.world_size + id.local_size - 1) / id.local_size);
    if (id.local_rank >= id.local_size)
      fail("{}: local rank {} is not below the local size {}", s.source, id.local_rank, id.local_size);
    return id;
  }
  return std::nullopt;
}

}  // namespace dscpp
