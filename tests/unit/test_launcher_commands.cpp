// The exact command lines of the runners, as --dry_run prints them.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "launcher/job_commands.h"

using namespace dscpp::launcher;

namespace {
WorldPlan two_hosts() {
  WorldPlan plan;
  plan.hosts = {{"node1", {0, 1}}, {"node2", {0, 1}}};
  plan.master_addr = "10.0.0.1";
  return plan;
}
std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}
}  // namespace

TEST_CASE("PROGRAM becomes what a rank runs", "[launcher]") {
  ProgramSpec p = resolve_program({"hostname", "-f"}, false, "/opt/dscpp/bin/dscpp");
  CHECK(joined(p.argv) == "hostname -f");
  CHECK(p.local_rank_at == -1);
  CHECK(p.file.empty());
  CHECK(joined(rank_argv(p, 3)) == "hostname -f");

  p = resolve_program({"/opt/train.py", "--epochs", "2"}, false, "/opt/dscpp/bin/dscpp");
  CHECK(joined(rank_argv(p, 1)) == "python3 -u /opt/train.py --local_rank=1 --epochs 2");
  CHECK(p.file == "/opt/train.py");
  p = resolve_program({"/opt/train.py"}, true, "/opt/dscpp/bin/dscpp");
  CHECK(joined(rank_argv(p, 1)) == "python3 -u /opt/train.py");

  p = resolve_program({"/models/libgpt.so", "--", "--data", "x.txt"}, false, "/opt/dscpp/bin/dscpp");
  CHECK(joined(rank_argv(p, 0)).find("dscpp-runtime --model /models/libgpt.so --local_rank=0 -- --data x.txt") !=
        std::string::npos);
  CHECK(p.file == "/models/libgpt.so");
}

TEST_CASE("--launcher_args split like a shell", "[launcher]") {
  CHECK(split_shell_words("--mca btl self,tcp  -x 'A B' \"C \\\"D\\\"\" e\\ f") ==
        std::vector<std::string>{"--mca", "btl", "self,tcp", "-x", "A B", "C \"D\"", "e f"});
  CHECK(split_shell_words("").empty());
  CHECK_THROWS_WITH(split_shell_words("a 'b"), Catch::Contains("unclosed ' quote"));
}

TEST_CASE("mpirun: the plan's hosts and slots, the env forwarded, a shim per rank", "[launcher]") {
  ProgramSpec p = resolve_program({"/opt/train.py"}, false, "/opt/dscpp");
  auto argv = mpirun_argv(two_hosts(), {"MASTER_ADDR", "MASTER_PORT", "NCCL_DEBUG"}, "--mca btl self,tcp", "/opt/dscpp",
                          p, false, true);
  CHECK(joined(argv) ==
        "mpirun --allow-run-as-root -n 4 --host node1:2,node2:2 --map-by slot -x MASTER_ADDR -x MASTER_PORT "
        "-x NCCL_DEBUG --mca btl self,tcp /opt/dscpp rank-shim --local_rank_at=3 -- python3 -u /opt/train.py");
  argv = mpirun_argv(two_hosts(), {}, "", "/opt/dscpp", resolve_program({"hostname"}, false, "/opt/dscpp"), false,
                     false);
  CHECK(joined(argv) == "mpirun -n 4 --host node1:2,node2:2 --map-by slot /opt/dscpp rank-shim --local_rank_at=-1 -- "
                        "hostname");
}

TEST_CASE("srun: node and task counts, one failure ends the step", "[launcher]") {
  ProgramSpec p = resolve_program({"hostname"}, false, "/opt/dscpp");
  CHECK(joined(srun_argv(two_hosts(), false, "", "/opt/dscpp", p, false)) ==
        "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --kill-on-bad-exit=1 --export=ALL /opt/dscpp rank-shim "
        "--local_rank_at=-1 -- hostname");
  WorldPlan uneven = two_hosts();
  uneven.hosts[1].slots = {0};
  CHECK(joined(srun_argv(uneven, true, "--mpi=pmix", "/opt/dscpp", p, false)) ==
        "srun --nodes=2 --ntasks=3 --nodelist=node1,node2 --kill-on-bad-exit=1 --export=ALL --mpi=pmix /opt/dscpp "
        "rank-shim --local_rank_at=-1 -- hostname");
}

TEST_CASE("the agent command is quoted for the remote shell", "[launcher]") {
  CHECK(agent_command("/home/u/my run", "/opt/dscpp", {"--node_rank", "1", "--", "sh", "-c", "echo 'hi'"}) ==
        "cd '/home/u/my run' && exec /opt/dscpp node-agent --node_rank 1 -- sh -c 'echo '\\''hi'\\'''");
}
