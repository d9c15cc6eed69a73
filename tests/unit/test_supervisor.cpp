// run_rank_group with real processes (/bin/sh programs): output relay, failure propagation,
// teardown of whole process trees, stop requests, exec failures, log files, CPU pinning.
// "Nothing left" is checked through /proc: every rank prints the pids it owns, and every
// process of a test carries a unique token in its environment.
#include "core/error.h"
#include "launcher/resources.h"
#include "launcher/supervisor/node_agent.h"
#include "launcher/supervisor/supervisor.h"
#include "supervisor_fixture.h"

#include <catch2/catch.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

using namespace dscpp::launcher;

using namespace supervisor_test;

namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mine)) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

TEST_CASE("all ranks succeed: exit 0, every line prefixed and whole") {
  Capture out, err;
  std::vector<RankLaunch> ranks;
  // Long lines in many small writes: any mid-line interleaving would break the pattern.
  for (int r = 0; r < 4; ++r)
    ranks.push_back(sh_rank(r,
                            "i=0; while [ $i -lt 300 ]; do printf 'rank %s line %s ' $RANK $i; printf "
                            "'%0200d\\n' 0; i=$((i+1)); done; echo to-stderr >&2"));
  for (auto& rank : ranks) rank.env.emplace_back("RANK", std::to_string(rank.rank));
  GroupResult result = run_rank_group(ranks, to(out, err));
  CHECK(result.exit_code == 0);
  CHECK_FALSE(result.first_failure);
  CHECK_FALSE(result.stopped);
  std::istringstream lines(out.text());
  std::regex whole(R"(\[rank (\d)\] rank (\d) line \d+ 0{200})");
  int count[4] = {0, 0, 0, 0};
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, whole));
    CHECK(m[1] == m[2]);
    ++count[std::stoi(m[1])];
  }
  for (int n : count) CHECK(n == 300);
  for (int r = 0; r < 4; ++r) CHECK(count_of(err.text(), "[rank " + std::to_string(r) + "] to-stderr\n") == 1);
}

TEST_CASE("a partial last line is flushed with a newline, on both streams") {
  Capture out, err;
  GroupResult result = run_rank_group({sh_rank(0, "printf 'first\\nno newline'; printf 'err tail' >&2")}, to(out, err));
  CHECK(result.exit_code == 0);
  CHECK(out.text() == "[rank 0] first\n[rank 0] no newline\n");
  CHECK(err.text() == "[rank 0] err tail\n");
}

TEST_CASE("rank 2 of 4 exits 4: the others are stopped, their process trees gone") {
  Capture out, err;
  std::string token = unique_token();
  std::vector<RankLaunch> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(
        sh_rank(r, r == 2 ? "echo pid $$; sleep 0.3; echo bye >&2; exit 4" : "echo pid $$; sleep 60", token));
  auto start = Clock::now();
  GroupResult result = run_rank_group(ranks, to(out, err, 2, "nodeA"));
  double elapsed = seconds_since(start);
  std::fprintf(stderr, "[timing] failure -> all 3 other ranks gone: %.0f ms after the failing rank's 300 ms\n",
               (elapsed - 0.3) * 1000);
  CHECK(result.exit_code == 4);
  REQUIRE(result.first_failure);
  CHECK(result.first_failure->rank == 2);
  CHECK(result.first_failure->exit_code == 4);
  CHECK_FALSE(result.stopped);
  CHECK(elapsed < 2 + 1);
  // The failing rank's last words come before the verdict.
  CHECK(err.text() == "[rank 2] bye\ndscpp: rank 2 on nodeA exited with code 4; stopping the other ranks\n");
  CHECK(count_of(out.text(), "pid ") == 4);
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
}

TEST_CASE("a rank that ignores SIGTERM is killed after the grace period") {
  Capture out, err;
  std::string token = unique_token();
  std::vector<RankLaunch> ranks = {sh_rank(0, "trap '' TERM; echo pid $$; sleep 60", token),
                                   sh_rank(1, "sleep 0.2; exit 1", token)};
  auto start = Clock::now();
  GroupResult result = run_rank_group(ranks, to(out, err, 1));
  double elapsed = seconds_since(start);
  std::fprintf(stderr, "[timing] TERM-ignoring rank gone %.0f ms after the failure (grace 1 s)\n",
               (elapsed - 0.2) * 1000);
  CHECK(result.exit_code == 1);
  CHECK(elapsed >= 0.2 + 1);
  CHECK(elapsed < 0.2 + 1 + 1);
  CHECK_THAT(err.text(), Catch::Contains("dscpp: rank 0 still running 1 s after SIGTERM; sending SIGKILL"));
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
}

TEST_CASE("a rank killed by a signal: 128+N and the signal's name") {
  Capture out, err;
  auto [script, code, name] = GENERATE(table<std::string, int, std::string>(
      {{"kill -SEGV $$", 139, "SEGV"}, {"kill -KILL $$", 137, "KILL"}, {"kill -ABRT $$", 134, "ABRT"}}));
  GroupResult result = run_rank_group({sh_rank(0, "sleep 60"), sh_rank(1, script)}, to(out, err, 2, "h"));
  CHECK(result.exit_code == code);
  REQUIRE(result.first_failure);
  CHECK(result.first_failure->signal == code - 128);
  CHECK(result.first_failure->describe() == "rank 1 on h killed by signal " + name);
  CHECK(result.failure == "rank 1 on h killed by signal " + name);
  CHECK_THAT(err.text(), Catch::Contains("dscpp: rank 1 on h killed by signal " + name + "; stopping the other ranks"));
}

TEST_CASE("a rank's own background children are killed with it, even ones that left its group") {
  Capture out, err;
  std::string token = unique_token();
  // `setsid` puts the second sleep in a session of its own: only the subreaper finds it.
  std::string script = "sleep 60 & echo child $!; setsid sleep 61 & echo child $!; sleep 0.3; exit ";
  SECTION("the rank fails") {
    GroupResult result = run_rank_group({sh_rank(0, script + "4", token)}, to(out, err));
    CHECK(result.exit_code == 4);
  }
  SECTION("the rank succeeds but leaves them running") {
    GroupResult result = run_rank_group({sh_rank(0, script + "0", token)}, to(out, err));
    CHECK(result.exit_code == 0);
    CHECK_FALSE(result.first_failure);
    CHECK_THAT(err.text(), Catch::Contains("every rank has exited; stopping the 2 processes they left running"));
  }
  CHECK(count_of(out.text(), "child ") == 2);
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
}

TEST_CASE("a leftover process writing without pause does not hold up the teardown") {
  Capture out, err;
  auto start = Clock::now();
  GroupResult result = run_rank_group({sh_rank(0, "yes & sleep 0.2; exit 4")}, to(out, err));
  CHECK(result.exit_code == 4);
  CHECK(seconds_since(start) < 5);  // an unbounded drain would never end (~0.3 s here, ~1.5 s under ASan)
  CHECK_THAT(err.text(), Catch::Contains("rank 0 exited with code 4"));
}

TEST_CASE("blame: a rank that exits 3 (stopped by a peer's failure) yields to one that failed on its own") {
  Capture out, err;
  // Rank 0 notices first and exits 3; rank 1, the cause, exits 1 half a second later.
  GroupResult result = run_rank_group({sh_rank(0, "sleep 0.2; exit 3"), sh_rank(1, "sleep 0.7; exit 1")},
                                      to(out, err, 2, "nodeA"));
  REQUIRE(result.first_failure);
  CHECK(result.first_failure->rank == 1);
  CHECK(result.exit_code == 1);
  CHECK_THAT(err.text(), Catch::Contains("rank 1 on nodeA exited with code 1 (rank 0 had stopped because of a peer's "
                                         "failure)"));
  // Alone, after the 3 s wait, the code-3 rank is named, saying why.
  Capture out2, err2;
  auto start = Clock::now();
  result = run_rank_group({sh_rank(0, "sleep 0.2; exit 3"), sh_rank(1, "sleep 60")}, to(out2, err2, 2, "nodeA"));
  const double elapsed = seconds_since(start);
  REQUIRE(result.first_failure);
  CHECK(result.first_failure->rank == 0);
  CHECK(result.exit_code == 3);
  CHECK(elapsed > 3.0);
  CHECK(elapsed < 3.2 + 2 + 1);
  CHECK_THAT(err2.text(), Catch::Contains("rank 0 on nodeA exited with code 3 (it stopped because a peer failed, and "
                                          "no rank failed on its own within 3 s)"));
}

TEST_CASE("a supervisor killed by SIGKILL leaves nothing behind: PDEATHSIG and the watchdog") {
  Capture out, err;
  std::string token = unique_token();
  // The supervisor runs in a forked copy of this process, which we SIGKILL once the ranks run.
  // We are the subreaper meanwhile, so that the dead processes come to us to be reaped
  // (PID 1 here does not reap them promptly).
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  pid_t supervisor = fork();
  if (supervisor == 0) {
    run_rank_group({sh_rank(0, "sleep 60 & echo child $!; echo pid $$; wait", token),
                    sh_rank(1, "sleep 61 & echo child $!; echo pid $$; wait", token)},
                   to(out, err));
    _exit(0);
  }
  auto start = Clock::now();
  while (count_of(out.text(), "pid ") < 2 && seconds_since(start) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(count_of(out.text(), "child ") == 2);
  kill(supervisor, SIGKILL);
  auto killed = Clock::now();
  while (seconds_since(killed) < 3 && (!surviving_pids(out.text()).empty() || !processes_with(token).empty())) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "[timing] supervisor SIGKILLed -> ranks and their children gone: %.0f ms\n",
               seconds_since(killed) * 1000);
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  while (waitpid(-1, nullptr, WNOHANG) > 0) continue;
}

TEST_CASE("stop requests: stop_fd closed, SIGINT, SIGTERM") {
  Capture out, err;
  std::string token = unique_token();
  std::vector<RankLaunch> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(sh_rank(r, "echo pid $$; sleep 60", token));
  int stop[2];
  REQUIRE(pipe2(stop, O_CLOEXEC) == 0);
  auto [how, code] = GENERATE(table<std::string, int>({{"stop_fd", 143}, {"INT", 130}, {"TERM", 143}}));
  std::thread requester([&, how = how] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (how == "stop_fd")
      close(stop[1]);
    else
      kill(getpid(), how == "INT" ? SIGINT : SIGTERM);
  });
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  auto start = Clock::now();
  SupervisorOptions options = to(out, err, 3);
  options.stop_fd = stop[0];
  GroupResult result = run_rank_group(ranks, options);
  double elapsed = seconds_since(start);
  requester.join();
  close(stop[0]);
  if (how != "stop_fd") close(stop[1]);
  std::fprintf(stderr, "[timing] stop (%s) -> 4 ranks gone: %.0f ms\n", how.c_str(), (elapsed - 0.3) * 1000);
  CHECK(result.stopped);
  CHECK(result.exit_code == code);
  CHECK_FALSE(result.first_failure);
  CHECK(elapsed < 3);
  CHECK_THAT(err.text(), Catch::Contains("stopping 4 ranks"));
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
  // The caller's signal handling and subreaper status are back.
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
  int subreaper = -1;
  prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
  CHECK(subreaper == 0);
}

TEST_CASE("an ignored SIGHUP stays ignored (nohup)") {
  Capture out, err;
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &before);
  GroupResult result = run_rank_group({sh_rank(0, "kill -HUP $PPID; sleep 0.3; echo survived")}, to(out, err));
  CHECK(result.exit_code == 0);
  CHECK_FALSE(result.stopped);
  CHECK(out.text() == "[rank 0] survived\n");
  struct sigaction after {};
  sigaction(SIGHUP, &before, &after);
  CHECK(after.sa_handler == SIG_IGN);
}

TEST_CASE("exec failure: 127 and the reason") {
  Capture out, err;
  SECTION("not in PATH") {
    RankLaunch rank = sh_rank(1, "");
    rank.argv = {"dscpp-no-such-program", "--flag"};
    GroupResult result = run_rank_group({sh_rank(0, "sleep 60"), rank}, to(out, err));
    CHECK(result.exit_code == 127);
    CHECK(err.text() ==
          "[rank 1] cannot run dscpp-no-such-program: No such file or directory\n"
          "dscpp: rank 1 exited with code 127; stopping the other ranks\n");
  }
  SECTION("not executable") {
    char path[] = "/tmp/dscpp_sup_noexec_XXXXXX";
    int fd = mkstemp(path);  // mode 0600: not executable, even for root
    REQUIRE(fd >= 0);
    close(fd);
    RankLaunch rank = sh_rank(0, "");
    rank.argv = {path};
    GroupResult result = run_rank_group({rank}, to(out, err));
    unlink(path);
    CHECK(result.exit_code == 127);
    CHECK_THAT(err.text(), Catch::Contains("[rank 0] cannot run " + std::string(path) + ": Permission denied"));
  }
  SECTION("an empty argv is refused before anything starts") {
    RankLaunch rank;
    CHECK_THROWS_AS(run_rank_group({rank}, {}), dscpp::Error);
  }
}

TEST_CASE("the environment: inherited, extended, overridden; argv[0] found through PATH") {
  Capture out, err;
  setenv("DSCPP_TEST_INHERITED", "from-parent", 1);
  setenv("DSCPP_TEST_OVERRIDDEN", "old", 1);
  RankLaunch rank = sh_rank(0, "");
  rank.argv = {"sh", "-c", "echo $DSCPP_TEST_INHERITED $DSCPP_TEST_OVERRIDDEN $DSCPP_TEST_NEW; cat"};
  rank.env = {{"DSCPP_TEST_OVERRIDDEN", "new"}, {"DSCPP_TEST_NEW", "x"}, {"DSCPP_TEST_NEW", "y"}};
  GroupResult result = run_rank_group({rank}, to(out, err));
  CHECK(result.exit_code == 0);
  CHECK(out.text() == "[rank 0] from-parent new y\n");  // and stdin is /dev/null: `cat` ends at once
  unsetenv("DSCPP_TEST_INHERITED");
  unsetenv("DSCPP_TEST_OVERRIDDEN");
}

TEST_CASE("log-file mode: unprefixed output in the rank's file, not on the console") {
  Capture out, err;
  char path[] = "/tmp/dscpp_sup_log_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  RankLaunch rank = sh_rank(0, "echo hello; echo oops >&2; printf tail");
  rank.log_file = path;
  GroupResult result = run_rank_group({rank, sh_rank(1, "echo console")}, to(out, err));
  CHECK(result.exit_code == 0);
  std::ifstream log(path);
  std::string content((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(content == "hello\noops\ntail");
  CHECK(out.text() == "[rank 1] console\n");
  unlink(path);
  SECTION("an unwritable log file is an error before anything starts") {
    rank.log_file = "/nonexistent-dir/rank0.log";
    CHECK_THROWS_WITH(run_rank_group({rank}, {}), Catch::Contains("/nonexistent-dir/rank0.log"));
  }
}

TEST_CASE("CPU pinning shows in the rank's Cpus_allowed_list") {
  int last = allowed_cpus().back();
  Capture out, err;
  RankLaunch rank = sh_rank(0, "grep Cpus_allowed_list /proc/self/status");
  rank.cpus = {last};
  GroupResult result = run_rank_group({rank}, to(out, err));
  CHECK(result.exit_code == 0);
  CHECK(out.text() == "[rank 0] Cpus_allowed_list:\t" + std::to_string(last) + "\n");
}

// ---- the node agent ----------------------------------------------------------------------

namespace {

// Runs the agent with fds 1 and 2 (and 0 when `stdin_fd` >= 0) pointed at the given files.
int run_agent_captured(const NodeAgentArgs& args, const Capture& out, const Capture& err, int stdin_fd = -1) {
  std::fflush(stdout);
  std::fflush(stderr);
  int saved[3] = {dup(0), dup(1), dup(2)};
  if (stdin_fd >= 0) dup2(stdin_fd, 0);
  dup2(out.fd(), 1);
  dup2(err.fd(), 2);
  int code = -1;
  try {
    code = run_node_agent(args);
  } catch (...) {
    for (int fd = 0; fd < 3; ++fd) dup2(saved[fd], fd), close(saved[fd]);
    throw;
  }
  for (int fd = 0; fd < 3; ++fd) dup2(saved[fd], fd), close(saved[fd]);
  return code;
}

NodeAgentArgs two_host_agent(int node_rank, const std::string& script) {
  NodeAgentArgs args;
  args.world_info = encode_world_info({{"alpha", {0, 1}}, {"beta", {2, 3}}});
  args.node_rank = node_rank;
  args.master_addr = "10.1.2.3";
  args.master_port = 29611;
  args.program = {"sh", "-c", script};
  args.stop_on_stdin_eof = false;
  args.grace_seconds = 2;
  return args;
}

}  // namespace

TEST_CASE("node agent argv: every field survives the round trip") {
  NodeAgentArgs args = two_host_agent(1, "echo 'a b' \"$X\"");
  args.devices_are_gpus = true;
  args.env = {{"A", "1"}, {"B", "x=y z"}, {"EMPTY", ""}};
  args.program.push_back("--flag=--");
  args.local_rank_at = 2;
  args.bind_cores_to_rank = true;
  args.bind_core_list = "0-3,8";
  args.each_rank_log_dir = "/tmp/logs dir";
  args.save_pid_file = "/tmp/123.deepspeed";
  args.grace_seconds = 7.5;
  args.report_exits = false;
  std::vector<std::string> argv = node_agent_argv(args);
  CHECK(argv.front() == "--world_info=" + args.world_info);
  NodeAgentArgs back = parse_node_agent_argv(argv);
  CHECK(back.world_info == args.world_info);
  CHECK(back.node_rank == 1);
  CHECK(back.master_addr == "10.1.2.3");
  CHECK(back.master_port == 29611);
  CHECK(back.devices_are_gpus);
  CHECK(back.env == args.env);
  CHECK(back.program == args.program);
  CHECK(back.local_rank_at == 2);
  CHECK(back.bind_cores_to_rank);
  CHECK(back.bind_core_list == "0-3,8");
  CHECK(back.each_rank_log_dir == "/tmp/logs dir");
  CHECK(back.save_pid_file == "/tmp/123.deepspeed");
  CHECK(back.grace_seconds == 7.5);
  CHECK_FALSE(back.stop_on_stdin_eof);
  CHECK_FALSE(back.report_exits);
  CHECK(parse_node_agent_argv(node_agent_argv(two_host_agent(0, "true"))).report_exits);
  CHECK(parse_node_agent_argv({"--world_info", "e30=", "--node_rank", "0", "--", "true"}).program ==
        std::vector<std::string>{"true"});
}

TEST_CASE("node agent argv: mistakes are named") {
  auto wi = "--world_info=" + encode_world_info({{"h", {0}}});
  CHECK_THROWS_WITH(parse_node_agent_argv({wi, "--bogus=1", "--", "true"}),
                    Catch::Contains("unknown argument '--bogus=1'"));
  CHECK_THROWS_WITH(parse_node_agent_argv({wi, "--node_rank=x", "--", "true"}),
                    Catch::Contains("--node_rank expects a number"));
  CHECK_THROWS_WITH(parse_node_agent_argv({wi, "--env", "NOVALUE", "--", "true"}), Catch::Contains("NAME=VALUE"));
  CHECK_THROWS_WITH(parse_node_agent_argv({wi, "true"}), Catch::Contains("-- PROGRAM"));
  CHECK_THROWS_WITH(parse_node_agent_argv({wi, "--"}), Catch::Contains("no PROGRAM"));
  CHECK_THROWS_WITH(parse_node_agent_argv({"--", "true"}), Catch::Contains("--world_info is required"));
}

TEST_CASE("node agent: this host's ranks, their environment, host-qualified labels") {
  Capture out, err;
  NodeAgentArgs args = two_host_agent(1, "echo $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $FOO \"$@\"");
  args.program.push_back("arg0");  // $0 of sh -c
  args.program.push_back("user-arg");
  args.local_rank_at = 4;
  args.env = {{"FOO", "bar"}};
  CHECK(run_agent_captured(args, out, err) == 0);
  std::string text = out.text();
  CHECK_THAT(text, Catch::Contains("[rank 2 beta] 2 0 4 10.1.2.3 29611 bar --local_rank=0 user-arg\n"));
  CHECK_THAT(text, Catch::Contains("[rank 3 beta] 3 1 4 10.1.2.3 29611 bar --local_rank=1 user-arg\n"));
  CHECK(count_of(text, "\n") == 2);
  SECTION("a single-host job labels by rank only; a failure is reported, naming the host") {
    Capture out1, err1;
    NodeAgentArgs single = two_host_agent(0, "echo hi; [ $RANK = 1 ] && sleep 0.3 && exit 5; sleep 60");
    single.world_info = encode_world_info({{"solo", {0, 1}}});
    CHECK(run_agent_captured(single, out1, err1) == 5);
    CHECK_THAT(out1.text(), Catch::Contains("[rank 0] hi\n") && Catch::Contains("[rank 1] hi\n"));
    // over ssh the launcher reads these and says which rank failed itself
    CHECK(err1.text() ==
          "dscpp-rank-exit rank=1 code=5 signal=0 stopped=0 host=solo\n"
          "dscpp-rank-exit rank=0 code=0 signal=15 stopped=1 host=solo\n");
    Capture out2, err2;
    single.report_exits = false;  // the local runner's agent says it itself
    CHECK(run_agent_captured(single, out2, err2) == 5);
    CHECK(err2.text() == "dscpp: rank 1 on solo exited with code 5; stopping the other ranks\n");
  }
  SECTION("node_rank outside the world") {
    args.node_rank = 2;
    CHECK_THROWS_WITH(run_agent_captured(args, out, err), Catch::Contains("outside the world info's 2 hosts"));
  }
}

TEST_CASE("node agent: stdin EOF stops the ranks (how the launcher stops remote hosts)") {
  Capture out, err;
  std::string token = unique_token();
  NodeAgentArgs args = two_host_agent(0, "echo pid $$; sleep 60");
  args.stop_on_stdin_eof = true;
  args.env = {{"DSCPP_TEST_TOKEN", token}};
  int in[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  std::thread launcher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    close(in[1]);
  });
  int code = run_agent_captured(args, out, err, in[0]);
  launcher.join();
  close(in[0]);
  CHECK(code == 143);
  CHECK(count_of(out.text(), "pid ") == 2);
  CHECK(surviving_pids(out.text()).empty());
  CHECK(processes_with(token).empty());
}

TEST_CASE("node agent: per-rank log files, core binding, pid file") {
  Capture out, err;
  char dir_template[] = "/tmp/dscpp_agent_XXXXXX";
  REQUIRE(mkdtemp(dir_template));
  std::string dir = dir_template, pid_file = dir + "/agent.pid";
  NodeAgentArgs args =
      two_host_agent(0, "grep Cpus_allowed_list /proc/self/status; echo omp=$OMP_NUM_THREADS; cat " + pid_file);
  // One rank per core this process may use (at most two), each pinned to its own.
  std::vector<int> cores = allowed_cpus();
  cores.resize(std::min<size_t>(cores.size(), 2));
  args.world_info = encode_world_info({{"solo", cores}});
  args.each_rank_log_dir = dir + "/logs";  // created
  args.bind_cores_to_rank = true;
  args.bind_core_list = format_id_ranges(cores);
  args.save_pid_file = pid_file;
  CHECK(run_agent_captured(args, out, err) == 0);
  CHECK(out.text().empty());
  CHECK(access(pid_file.c_str(), F_OK) != 0);  // removed when the agent ends
  std::vector<std::string> logs;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/logs")) logs.push_back(entry.path().filename());
  std::sort(logs.begin(), logs.end());
  REQUIRE(logs.size() == cores.size());
  for (size_t r = 0; r < cores.size(); ++r) {
    CHECK(std::regex_match(logs[r], std::regex("\\d{14}_rank" + std::to_string(r) + "\\.log")));
    std::ifstream file(dir + "/logs/" + logs[r]);
    std::string content((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    CHECK(content == fmt::format("Cpus_allowed_list:\t{}\nomp=1\n{}\n", cores[r], getpid()));
  }
  std::filesystem::remove_all(dir);
}
