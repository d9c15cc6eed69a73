// The exact command lines of the runners, as --dry_run prints them.
#include "core/error.h"
#include "launcher/job_commands.h"
#include "launcher/restart.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

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
        "mpirun --allow-run-as-root -n 4 --host node1:2,node2:2 --map-by slot --mca orte_abort_on_non_zero_status 0 "
        "-x MASTER_ADDR -x MASTER_PORT "
        "-x NCCL_DEBUG --mca btl self,tcp /opt/dscpp rank-shim --local_rank_at=3 --stop_on_usr1 -- python3 -u "
        "/opt/train.py");
  argv = mpirun_argv(two_hosts(), {}, "", "/opt/dscpp", resolve_program({"hostname"}, false, "/opt/dscpp"), false,
                     false);
  CHECK(joined(argv) == "mpirun -n 4 --host node1:2,node2:2 --map-by slot --mca orte_abort_on_non_zero_status 0 "
                        "/opt/dscpp rank-shim --local_rank_at=-1 --stop_on_usr1 -- hostname");
  // user@host entries (for ssh logins) reach mpirun as host names
  WorldPlan with_users = two_hosts();
  with_users.hosts[0].host = "bob@node1";
  CHECK(joined(mpirun_argv(with_users, {}, "", "/opt/dscpp", resolve_program({"hostname"}, false, "/opt/dscpp"),
                           false, false))
            .find("--host node1:2,node2:2 ") != std::string::npos);
}

TEST_CASE("srun: node and task counts; dscpp, not srun, ends the step; stdin stops the shims", "[launcher]") {
  ProgramSpec p = resolve_program({"hostname"}, false, "/opt/dscpp");
  CHECK(joined(srun_argv(two_hosts(), false, "", "/opt/dscpp", p, false)) ==
        "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --kill-on-bad-exit=0 --wait=0 --input=all --export=ALL "
        "/opt/dscpp rank-shim --local_rank_at=-1 --stop_on_stdin -- hostname");
  WorldPlan uneven = two_hosts();
  uneven.hosts[1].slots = {0};
  uneven.hosts[0].host = "bob@node1";
  CHECK(joined(srun_argv(uneven, true, "--mpi=pmix", "/opt/dscpp", p, false)) ==
        "srun --nodes=2 --ntasks=3 --nodelist=node1,node2 --kill-on-bad-exit=0 --wait=0 --input=all --export=ALL "
        "--mpi=pmix /opt/dscpp rank-shim --local_rank_at=-1 --stop_on_stdin -- hostname");
}

TEST_CASE("the agent command is quoted for the remote shell", "[launcher]") {
  CHECK(agent_command("/home/u/my run", "/opt/dscpp", {"--node_rank", "1", "--", "sh", "-c", "echo 'hi'"}) ==
        "cd '/home/u/my run' && exec /opt/dscpp node-agent --node_rank 1 -- sh -c 'echo '\\''hi'\\'''");
}

namespace {
// run_with_restarts over scripted attempt outcomes; returns {exit code, attempts run, messages}.
struct RestartRun {
  int code = 0;
  std::vector<int> attempts;
  std::string messages;
};
RestartRun run_restarts(int max_restarts, const std::vector<AttemptResult>& outcomes) {
  RestartRun run;
  std::FILE* err = std::tmpfile();
  run.code = run_with_restarts(
      max_restarts,
      [&](int restart) {
        run.attempts.push_back(restart);
        return outcomes.at(std::min<size_t>(static_cast<size_t>(restart), outcomes.size() - 1));
      },
      fileno(err));
  std::rewind(err);
  for (int c; (c = std::fgetc(err)) != EOF;) run.messages += static_cast<char>(c);
  std::fclose(err);
  return run;
}
const AttemptResult kRank2Fails{3, false, "rank 2 on node1 exited with code 3"};
}  // namespace

TEST_CASE("--max_restarts: failures restart the whole job, stops and successes do not", "[launcher]") {
  SECTION("a failure, then success") {
    RestartRun r = run_restarts(2, {kRank2Fails, {0, false, ""}});
    CHECK(r.code == 0);
    CHECK(r.attempts == std::vector<int>{0, 1});
    CHECK(r.messages == "dscpp: rank 2 on node1 exited with code 3; restarting the job (restart 1 of 2)\n");
  }
  SECTION("always failing: K+1 attempts, then the failure's code") {
    RestartRun r = run_restarts(2, {kRank2Fails});
    CHECK(r.code == 3);
    CHECK(r.attempts == std::vector<int>{0, 1, 2});
    CHECK(r.messages ==
          "dscpp: rank 2 on node1 exited with code 3; restarting the job (restart 1 of 2)\n"
          "dscpp: rank 2 on node1 exited with code 3; restarting the job (restart 2 of 2)\n"
          "dscpp: rank 2 on node1 exited with code 3; no restarts left (2 used)\n");
  }
  SECTION("K = 0: one attempt, nothing said (as before --max_restarts)") {
    RestartRun r = run_restarts(0, {kRank2Fails});
    CHECK(r.code == 3);
    CHECK(r.attempts == std::vector<int>{0});
    CHECK(r.messages.empty());
  }
  SECTION("a stop (SIGTERM to dscpp) is never restarted") {
    RestartRun r = run_restarts(5, {{143, true, ""}});
    CHECK(r.code == 143);
    CHECK(r.attempts == std::vector<int>{0});
    CHECK(r.messages.empty());
  }
  SECTION("a failure without a description still says what happened") {
    RestartRun r = run_restarts(1, {{7, false, ""}, {0, false, ""}});
    CHECK(r.messages == "dscpp: the job exited with code 7; restarting the job (restart 1 of 1)\n");
  }
  CHECK_THROWS_WITH(run_restarts(-1, {kRank2Fails}), Catch::Contains("--max_restarts -1: expected 0 or more"));
}

TEST_CASE("--max_restarts: the restart variables every rank gets", "[launcher]") {
  CHECK(restart_env(0, 0) ==
        EnvList{{"DSCPP_RESTART_COUNT", "0"}, {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_MAX_RESTARTS", "0"}});
  CHECK(restart_env(2, 3) ==
        EnvList{{"DSCPP_RESTART_COUNT", "2"}, {"TORCHELASTIC_RESTART_COUNT", "2"}, {"TORCHELASTIC_MAX_RESTARTS", "3"}});
}

namespace {
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    char tmpl[] = "/tmp/dscpp-invoked.XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
void touch(const std::filesystem::path& p, std::filesystem::perms perms = std::filesystem::perms::owner_all) {
  std::filesystem::create_directories(p.parent_path());
  std::FILE* f = std::fopen(p.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fclose(f);
  std::filesystem::permissions(p, perms);
}
}  // namespace

TEST_CASE("other hosts get dscpp's path as typed, symlinks kept, when it is this very binary", "[launcher]") {
  namespace fs = std::filesystem;
  ScratchDir tmp;
  const std::string self = self_executable();
  REQUIRE(fs::path(self).is_absolute());
  fs::create_directories(tmp.path / "bin");
  fs::create_symlink(self, tmp.path / "bin" / "dscpp");
  fs::create_directory_symlink(tmp.path / "bin", tmp.path / "shared");  // a symlinked mount point
  const std::string link = (tmp.path / "shared" / "dscpp").string();

  CHECK(invoked_path(link, "", self) == link);
  CHECK(invoked_path((tmp.path / "shared" / "." / "dscpp").string(), "", self) == link);
  // relative to the working directory, made absolute without resolving
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof cwd) != nullptr);
  REQUIRE(chdir(tmp.path.c_str()) == 0);
  std::string relative = invoked_path("shared/dscpp", "", self);
  REQUIRE(chdir(cwd) == 0);
  CHECK(relative == link);
  // a bare name: the first PATH entry that has an executable of that name, as execvp picks it
  touch(tmp.path / "noexec" / "dscpp", fs::perms::owner_read);  // not executable: skipped
  const std::string path_env = "/nonexistent:" + (tmp.path / "noexec").string() + ":" + (tmp.path / "shared").string();
  CHECK(invoked_path("dscpp", path_env, self) == link);
  CHECK(invoked_path("dscpp", "/nonexistent", self) == self);
  // another program of that name first in PATH, or argv[0] naming another file: not this binary
  fs::create_directories(tmp.path / "other");
  fs::create_symlink("/bin/sh", tmp.path / "other" / "dscpp");
  CHECK(invoked_path("dscpp", (tmp.path / "other").string() + ":" + path_env, self) == self);
  CHECK(invoked_path("/bin/sh", "", self) == self);
  CHECK(invoked_path("", path_env, self) == self);

  set_invoked_as(link);
  CHECK(invoked_executable() == link);
  set_invoked_as("");
  CHECK(invoked_executable() == self);
}

TEST_CASE("dscpp-runtime is found next to dscpp as typed, else next to the file it resolves to", "[launcher]") {
  namespace fs = std::filesystem;
  ScratchDir tmp;
  // installed: bin/dscpp and bin/dscpp-runtime, reached through a symlinked directory
  touch(tmp.path / "inst" / "bin" / "dscpp");
  touch(tmp.path / "inst" / "bin" / "dscpp-runtime");
  fs::create_directory_symlink(tmp.path / "inst", tmp.path / "shared");
  CHECK(runtime_executable((tmp.path / "shared" / "bin" / "dscpp").string()) ==
        (tmp.path / "shared" / "bin" / "dscpp-runtime").string());
  // dscpp alone symlinked into another directory: the runtime next to the real binary
  fs::create_directories(tmp.path / "usr" / "bin");
  fs::create_symlink(tmp.path / "inst" / "bin" / "dscpp", tmp.path / "usr" / "bin" / "dscpp");
  CHECK(runtime_executable((tmp.path / "usr" / "bin" / "dscpp").string()) ==
        (tmp.path / "inst" / "bin" / "dscpp-runtime").string());
  // the build tree: build/launcher/dscpp and build/runtime/dscpp-runtime
  touch(tmp.path / "build" / "launcher" / "dscpp");
  touch(tmp.path / "build" / "runtime" / "dscpp-runtime");
  fs::create_directory_symlink(tmp.path / "build", tmp.path / "b");
  CHECK(runtime_executable((tmp.path / "b" / "launcher" / "dscpp").string()) ==
        (tmp.path / "b" / "runtime" / "dscpp-runtime").string());
  // nowhere: the build tree's place next to the path given
  CHECK(runtime_executable("/nonexistent/launcher/dscpp") == "/nonexistent/runtime/dscpp-runtime");
}
