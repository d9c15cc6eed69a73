// Rank exit reports and blame across supervisors: the report line's format, Blame's rule on
// its own, a supervisor in report mode (what a node agent or rank shim writes), and a
// supervisor running a backend child whose stderr carries its ranks' reports (what dscpp does
// with mpirun or srun): the blamed rank, its code, the gentle stop, and the backend's own
// failure when its ranks did not all report.
#include "core/error.h"
#include "launcher/supervisor/rank_exit.h"
#include "launcher/supervisor/supervisor.h"
#include "supervisor_fixture.h"

#include <catch2/catch.hpp>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace supervisor_test;
using dscpp::kExitPeerFailed;

namespace {

// A backend stand-in: a shell script that prints report lines on stderr as its ranks "exit".
RankLaunch backend(const std::string& script, int ranks, RankLaunch::Stop stop, const std::string& token = "") {
  RankLaunch launch = sh_rank(-1, script, token);
  launch.label.clear();  // a backend's ranks prefix their own lines
  launch.reported_ranks = ranks;
  launch.stop = stop;
  return launch;
}

std::string report(int rank, int code, int signal = 0, bool stopped = false, const std::string& host = "nodeB") {
  std::string line = exit_report_line({rank, host, code, signal, stopped});
  line.pop_back();
  return "echo '" + line + "' >&2; ";
}

}  // namespace

TEST_CASE("report lines: written and read back; other lines are not reports") {
  RankExit exit{7, "node-2.example", 0, 9, true};
  std::string line = exit_report_line(exit);
  CHECK(line == "dscpp-rank-exit rank=7 code=0 signal=9 stopped=1 host=node-2.example\n");
  auto back = parse_exit_report(line);
  REQUIRE(back);
  CHECK(back->rank == 7);
  CHECK(back->host == "node-2.example");
  CHECK(back->signal == 9);
  CHECK(back->stopped);
  CHECK(back->status() == 137);
  CHECK(back->describe() == "rank 7 on node-2.example killed by signal KILL");
  CHECK_FALSE(parse_exit_report("[rank 7] dscpp-rank-exit rank=7 code=0 signal=9 stopped=1 host=h"));
  CHECK_FALSE(parse_exit_report("dscpp-rank-exit rank=x code=0 signal=0 stopped=0 host=h"));
  CHECK_FALSE(parse_exit_report("dscpp-rank-exit rank=1 code=0 signal=0 host=h"));
  CHECK_FALSE(parse_exit_report("dscpp: rank 1 on h exited with code 4"));
  CHECK(RankExit{-1, "srun", 1, 0, false}.describe() == "srun exited with code 1");
  CHECK(RankExit{2, "", 4, 0, false}.describe() == "rank 2 exited with code 4");
}

TEST_CASE("Blame: the first failure of its own; a bystander waits; stopped and clean exits decide nothing") {
  using C = Blame::Clock;
  const C::time_point t0 = C::now();
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<C::duration>(std::chrono::duration<double>(s)); };
  SECTION("a failure of its own decides at once") {
    Blame blame;
    CHECK_FALSE(blame.exited({0, "a", 0, 0, false}, at(0)));
    CHECK_FALSE(blame.exited({1, "a", 0, 15, true}, at(0)));  // stopped: not its own failure
    auto v = blame.exited({2, "b", 4, 0, false}, at(0.1));
    REQUIRE(v);
    CHECK(v->describe() == "rank 2 on b exited with code 4");
    CHECK_FALSE(blame.exited({3, "b", 5, 0, false}, at(0.2)));  // after the verdict
    CHECK(blame.decided());
  }
  SECTION("a bystander yields to the failure that follows within the wait") {
    Blame blame;
    CHECK_FALSE(blame.exited({0, "a", kExitPeerFailed, 0, false}, at(0)));
    CHECK(blame.deadline() == at(Blame::kBystanderWaitSeconds));
    CHECK_FALSE(blame.due(false, at(2.9)));
    auto v = blame.exited({1, "b", 1, 0, false}, at(2.9));
    REQUIRE(v);
    CHECK(v->describe() == "rank 1 on b exited with code 1 (rank 0 had stopped because of a peer's failure)");
    CHECK_FALSE(blame.deadline());
  }
  SECTION("a bystander alone is blamed after the wait, or when nothing is left") {
    Blame blame;
    blame.exited({0, "a", kExitPeerFailed, 0, false}, at(0));
    auto v = blame.due(false, at(3.0));
    REQUIRE(v);
    CHECK(v->exit.rank == 0);
    CHECK(
        v->describe() ==
        "rank 0 on a exited with code 3 (it stopped because a peer failed, and no rank failed on its own within 3 s)");
    Blame early;
    early.exited({0, "a", kExitPeerFailed, 0, false}, at(0));
    CHECK(early.due(true, at(0.1)));
  }
}

TEST_CASE("Blame: a rank its supervisor stopped is blamed last, only when no rank failed and none is left") {
  Blame blame;
  CHECK_FALSE(blame.exited({2, "b", 0, 15, true}));  // stopped: a signal to its shim from outside
  CHECK_FALSE(blame.due(false));
  CHECK_FALSE(blame.exited({3, "b", 0, 15, true}));
  auto v = blame.due(true);
  REQUIRE(v);
  CHECK(v->exit.rank == 2);
  CHECK(v->exit.status() == 143);
  CHECK(v->describe() ==
        "rank 2 on b killed by signal TERM (its supervisor stopped it: a signal from outside the job?)");
  // A bystander, and any failure of its own, comes before a stopped rank.
  Blame second;
  second.exited({1, "a", 0, 15, true});
  second.exited({0, "a", kExitPeerFailed, 0, false});
  auto b = second.due(true);
  REQUIRE(b);
  CHECK(b->exit.rank == 0);
  Blame third;
  third.exited({1, "a", 0, 15, true});
  auto own = third.exited({4, "c", 2, 0, false});
  REQUIRE(own);
  CHECK(own->exit.rank == 4);
}

TEST_CASE("a backend whose ranks were all stopped from outside (scancel of the step) fails the job with their status") {
  Capture out, err;
  GroupResult result = run_rank_group(
      {backend(report(0, 0, 15, true) + report(1, 0, 15, true) + "exit 143", 2, RankLaunch::Stop::close_stdin)},
      to(out, err, 2, "srun"));
  CHECK(result.exit_code == 143);
  CHECK_FALSE(result.stopped);
  CHECK(result.failure ==
        "rank 0 on nodeB killed by signal TERM (its supervisor stopped it: a signal from outside the job?)");
}

TEST_CASE("report mode: each rank exit is reported on err_fd, the verdict left to the launcher") {
  Capture out, err;
  SupervisorOptions options = to(out, err, 2, "nodeA");
  options.report_exits = true;
  GroupResult result = run_rank_group({sh_rank(0, "sleep 60"), sh_rank(1, "sleep 0.2; exit 4")}, options);
  CHECK(result.exit_code == 4);
  CHECK(result.failure == "rank 1 on nodeA exited with code 4");
  CHECK(err.text() ==
        "dscpp-rank-exit rank=1 code=4 signal=0 stopped=0 host=nodeA\n"
        "dscpp-rank-exit rank=0 code=0 signal=15 stopped=1 host=nodeA\n");
}

TEST_CASE("a backend's reports blame the rank that failed on its own; a closed stdin stops it") {
  Capture out, err;
  std::string token = unique_token();
  // Rank 0 stops because of a peer (3); rank 1, the cause, fails 0.5 s later; rank 2 runs on
  // until the backend is told to stop (EOF on its stdin), then says it was stopped.
  std::string script = "echo pid $$; echo '[rank 2 nodeB] training'; " + report(0, 3) + "sleep 0.5; " + report(1, 1) +
                       "cat >/dev/null; " + report(2, 0, 15, true) + "exit 3";
  auto start = Clock::now();
  GroupResult result =
      run_rank_group({backend(script, 3, RankLaunch::Stop::close_stdin, token)}, to(out, err, 2, "srun"));
  double elapsed = seconds_since(start);
  REQUIRE(result.first_failure);
  CHECK(result.first_failure->rank == 1);
  CHECK(result.exit_code == 1);
  CHECK(result.failure == "rank 1 on nodeB exited with code 1 (rank 0 had stopped because of a peer's failure)");
  CHECK_FALSE(result.stopped);
  CHECK(elapsed < 2);  // the stop reached the backend through its stdin, not after the 6 s ask period
  CHECK(out.text().find("[rank 2 nodeB] training\n") != std::string::npos);
  CHECK(err.text() ==
        "dscpp: rank 1 on nodeB exited with code 1 (rank 0 had stopped because of a peer's failure); stopping the "
        "other ranks\n");  // no report line relayed
  CHECK(processes_with(token).empty());
}

TEST_CASE("a backend asked with SIGUSR1; one that ignores the request is terminated after the ask period") {
  Capture out, err;
  auto [stop, script, min_s, max_s] = GENERATE(table<RankLaunch::Stop, std::string, double, double>(
      {{RankLaunch::Stop::usr1,
        "trap 'echo \"dscpp-rank-exit rank=0 code=0 signal=15 stopped=1 host=n\" >&2; exit 0' USR1; "
        "echo 'dscpp-rank-exit rank=1 code=9 signal=0 stopped=0 host=n' >&2; while :; do sleep 0.05; done",
        0.0, 1.5},
       {RankLaunch::Stop::usr1,
        "trap '' USR1; echo 'dscpp-rank-exit rank=1 code=9 signal=0 stopped=0 host=n' >&2; "
        "while :; do sleep 0.05; done",
        2 * 0.5 + 2.0, 2 * 0.5 + 2.0 + 1.5}}));
  auto start = Clock::now();
  GroupResult result = run_rank_group({backend(script, 2, stop)}, to(out, err, 0.5, "mpirun"));
  double elapsed = seconds_since(start);
  CHECK(result.exit_code == 9);
  CHECK(result.failure == "rank 1 on n exited with code 9");
  CHECK(elapsed >= min_s);
  CHECK(elapsed < max_s);
  if (min_s > 0) CHECK_THAT(err.text(), Catch::Contains("still running 3 s after the stop request; sending SIGTERM"));
}

TEST_CASE("a backend that fails before its ranks all reported is named itself") {
  Capture out, err;
  GroupResult result = run_rank_group({backend(report(0, 0) + "echo 'srun: error: bad' >&2; exit 2", 2,
                                               RankLaunch::Stop::close_stdin)},
                                      to(out, err, 2, "srun"));
  CHECK(result.exit_code == 2);
  CHECK(result.failure == "srun exited with code 2");
  CHECK(err.text() == "srun: error: bad\ndscpp: srun exited with code 2\n");
  // ... but once every rank reported, its own code (srun's is its tasks' highest) says nothing new.
  Capture out2, err2;
  result = run_rank_group({backend(report(0, 0) + report(1, 0) + "exit 7", 2, RankLaunch::Stop::close_stdin)},
                          to(out2, err2, 2, "srun"));
  CHECK(result.exit_code == 0);
  CHECK_FALSE(result.first_failure);
  // mpirun exits 0 when it no longer aborts on a failed rank: missing reports still fail the job.
  Capture out3, err3;
  result = run_rank_group({backend(report(0, 0) + "exit 0", 2, RankLaunch::Stop::usr1)}, to(out3, err3, 2, "mpirun"));
  CHECK(result.exit_code == 1);
  CHECK(result.failure ==
        "mpirun exited with code 0 when only 1 of its 2 ranks had reported their exit (is its stderr redirected by "
        "--launcher_args?)");
}

TEST_CASE("report lines behind a backend's own tag are reports; behind a rank's prefix they are not") {
  CHECK(parse_exit_report("[1,2]<stderr>:dscpp-rank-exit rank=2 code=4 signal=0 stopped=0 host=h"));
  CHECK(parse_exit_report("12: dscpp-rank-exit rank=12 code=4 signal=0 stopped=0 host=h"));
  CHECK_FALSE(parse_exit_report("[1,2]<stdout>:dscpp-rank-exit rank=2 code=4 signal=0 stopped=0 host=h"));
  CHECK_FALSE(parse_exit_report("[1,2]<stderr>:[rank 2] dscpp-rank-exit rank=2 code=4 signal=0 stopped=0 host=h"));
  CHECK_FALSE(parse_exit_report(": dscpp-rank-exit rank=2 code=4 signal=0 stopped=0 host=h"));
}

TEST_CASE("SIGUSR1 stops the ranks only where it is dscpp's stop request (a shim under mpirun)") {
  Capture out, err;
  auto [stops, code] = GENERATE(table<bool, int>({{true, 128 + SIGUSR1}, {false, 0}}));
  SupervisorOptions options = to(out, err, 2, "n");
  options.usr1_stops = stops;
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(getpid(), SIGUSR1);
  });
  GroupResult result = run_rank_group({sh_rank(0, "sleep 0.8; exit 0")}, options);
  sender.join();
  CHECK(result.exit_code == code);
  CHECK(result.stopped == stops);
}
