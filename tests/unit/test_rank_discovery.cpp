// Rank discovery from each launcher's variables, with the values those launchers really set
// (the SLURM and OpenMPI values were recorded from srun and mpirun runs on a Debian 12 machine).
#include "core/error.h"
#include "core/rank_discovery.h"

#include <catch2/catch.hpp>

#include <map>

namespace {
dscpp::EnvGetter env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}
}  // namespace

TEST_CASE("no launcher variables: a single process", "[rank]") {
  CHECK_FALSE(dscpp::discover_rank(env_of({{"SLURM_NTASKS", "4"}, {"PATH", "/bin"}})).has_value());
}

TEST_CASE("DeepSpeed/torchrun variables win over the others", "[rank]") {
  auto id = dscpp::discover_rank(env_of({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_SIZE", "4"},
                                         {"CROSS_RANK", "1"}, {"CROSS_SIZE", "2"}, {"SLURM_PROCID", "0"},
                                         {"SLURM_NTASKS", "1"}}));
  REQUIRE(id);
  CHECK(id->rank == 5);
  CHECK(id->world_size == 8);
  CHECK(id->local_rank == 1);
  CHECK(id->local_size == 4);
  CHECK(id->node_rank == 1);
  CHECK(id->node_count == 2);
}

TEST_CASE("srun task: rank 3 of --nodes=2 --ntasks-per-node=2", "[rank]") {
  auto id = dscpp::discover_rank(env_of({{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
                                         {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}, {"SLURM_NTASKS_PER_NODE", "2"},
                                         {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  REQUIRE(id);
  CHECK(id->rank == 3);
  CHECK(id->local_rank == 1);
  CHECK(id->local_size == 2);
  CHECK(id->node_rank == 1);
  CHECK(id->node_count == 2);
  CHECK(id->source.find("SLURM") != std::string::npos);
}

TEST_CASE("mpirun rank: OpenMPI's variables, nodes in blocks", "[rank]") {
  auto id = dscpp::discover_rank(env_of({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_NODE_RANK", "1"}}));
  REQUIRE(id);
  CHECK(id->rank == 5);
  CHECK(id->local_size == 2);
  CHECK(id->node_rank == 2);
  CHECK(id->node_count == 3);
}

TEST_CASE("PMI variables", "[rank]") {
  auto id = dscpp::discover_rank(env_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"},
                                         {"MPI_LOCALNRANKS", "2"}}));
  REQUIRE(id);
  CHECK(id->rank == 2);
  CHECK(id->node_rank == 1);
}

TEST_CASE("malformed or contradictory variables are errors naming them", "[rank]") {
  CHECK_THROWS_WITH(dscpp::discover_rank(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("RANK=x is not a non-negative integer"));
  CHECK_THROWS_WITH(dscpp::discover_rank(env_of({{"RANK", "1"}})), Catch::Contains("WORLD_SIZE is not"));
  CHECK_THROWS_WITH(dscpp::discover_rank(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
                    Catch::Contains("RANK=4 is outside the job of WORLD_SIZE=4 ranks"));
}
