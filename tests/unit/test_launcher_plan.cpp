// The launch plan's pure rules, part one: hostfile, include/exclude, SLURM variables
// (test_launcher_env.cpp: exported env, rank numbering and environment, world info). Rows of
// DeepSpeed's documented hostfile and include/exclude examples are written in its own notation
// ({w0:[0,1], w1:[2]}) so they can be read side by side.
#include "build_config.h"
#include "core/error.h"
#include "launcher/env_export.h"
#include "launcher/hostfile.h"
#include "launcher/launch_plan.h"
#include "launcher/resources.h"
#include "launcher/slurm_env.h"
#include "tests/unit/launcher_fixture.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

using namespace launcher_test;

namespace {

const fs::path kData = fs::path(DSCPP_SOURCE_ROOT) / "tests" / "data" / "launcher";

Environment env_from_file(const fs::path& path) {
  Environment env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

}  // namespace

// ---------------------------------------------------------------------------------------- hostfile

TEST_CASE("hostfile: every documented row of DeepSpeed's grammar", "[hostfile]") {
  struct Row {
    const char* text;
    const char* expected;  // show() of the pool, or a fragment of the error
  };
  const Row rows[] = {
      {"worker-0 slots=4", "{worker-0:[0,1,2,3]}"},
      {"worker-0\tslots=4", "{worker-0:[0,1,2,3]}"},
      {"worker-0   slots=4", "{worker-0:[0,1,2,3]}"},
      {"worker-0 slots=4 # comment", "{worker-0:[0,1,2,3]}"},
      {"worker-0 slots=4x", "{worker-0:[0,1,2,3]}"},
      {"  # comment\n\nworker-0 slots=2\n   \n", "{worker-0:[0,1]}"},
      {"worker-0 slots=0", "{worker-0:[]}"},
      {"  w1 slots=2  \r\nw0 slots=1\r\n", "{w1:[0,1], w0:[0]}"},  // file order, CRLF
      {"w0 slots=007", "{w0:[0,1,2,3,4,5,6]}"},
      {"worker-0 slots = 4",
       "h:1: found \"worker-0 slots = 4\"; expected \"HOSTNAME slots=N\": no spaces are allowed around '='"},
      {"worker-0 slots=-1",
       "h:1: found \"worker-0 slots=-1\"; expected \"HOSTNAME slots=N\": N must be a non-negative integer"},
      {"worker-0", "h:1: found \"worker-0\"; expected \"HOSTNAME slots=N\": the slot count is missing"},
      {"this is bad slots=1",
       "h:1: found \"this is bad slots=1\"; expected \"HOSTNAME slots=N\": the second word must be slots=N; host names "
       "cannot contain spaces"},
      {"# a\nw0 slots=1\nw1 slots=2\nw0 slots=3", "h:4: found host \"w0\" again (first listed on line 2)"},
      {"# only a comment\n\n", "h: found no hosts (the file is empty or has only comments)"},
      {"", "h: found no hosts"},
      {"w0 slots=999999999999", "h:1: found slots=999999999999 for host \"w0\"; expected at most 65536"},
  };
  for (const Row& row : rows) {
    INFO("hostfile text: " << row.text);
    std::string got;
    try {
      got = show(parse_hostfile(row.text, "h"));
    } catch (const dscpp::Error& e) {
      got = e.what();
    }
    if (row.expected[0] == '{')
      CHECK(got == row.expected);
    else
      CHECK_THAT(got, Catch::Contains(row.expected));
  }
}

TEST_CASE("hostfile: loading from disk, missing file", "[hostfile]") {
  ResourcePool pool = load_hostfile((kData / "hostfile").string());
  CHECK(show(pool) == "{worker-0:[0,1,2,3], worker-1:[0,1,2,3], spare:[]}");
  TempDir dir;
  std::string missing = (dir.path / "nope").string();
  CHECK_THAT(error_of([&] { load_hostfile(missing); }), Catch::Contains("cannot read hostfile '" + missing + "'"));
  CHECK_FALSE(load_hostfile_if_present(missing).has_value());
  CHECK_THAT(error_of([&] { load_hostfile_if_present(dir.write("bad", "w0 slots=x\n").string()); }),
             Catch::Contains("bad:1: found \"w0 slots=x\""));
}

// ----------------------------------------------------------------------------- include / exclude

TEST_CASE("include/exclude: every documented example, documented semantics", "[resources]") {
  const ResourcePool pool = {{"w0", {0, 1, 2, 3}}, {"w1", {0, 1, 2, 3}}};
  struct Row {
    const char* include;
    const char* exclude;
    const char* expected;
  };
  const Row rows[] = {
      {"", "", "{w0:[0,1,2,3], w1:[0,1,2,3]}"},
      {"w1:0,3", "", "{w1:[0,3]}"},
      {"w0@w1:0,2", "", "{w0:[0,1,2,3], w1:[0,2]}"},  // DeepSpeed >= 0.15.2 drops w0 here
      {"w0", "", "{w0:[0,1,2,3]}"},                   // ... and gives {} here
      {"w0:1@w0:0,1", "", "{w0:[0,1]}"},
      {"w1:3,1@w0:2", "", "{w0:[2], w1:[1,3]}"},  // pool order, slots sorted
      {"w0:1@w0", "", "{w0:[0,1,2,3]}"},          // a bare host means all of it
      {" w1 : 2 ", "", "{w1:[2]}"},
      {"", "w1", "{w0:[0,1,2,3]}"},
      {"", "w1:0", "{w0:[0,1,2,3], w1:[1,2,3]}"},
      {"", "w0:0,1@w1:3", "{w0:[2,3], w1:[0,1,2]}"},
      {"", "w0@w1", "{}"},
      {"", "w1:0@w1:0", "{w0:[0,1,2,3], w1:[1,2,3]}"},
  };
  for (const Row& row : rows) {
    INFO("-i '" << row.include << "' -e '" << row.exclude << "'");
    CHECK(show(select_resources(pool, {.include = row.include, .exclude = row.exclude})) == row.expected);
  }
  CHECK(show(select_resources({{"w0", {0, 1}}}, {.exclude = "w0"})) == "{}");  // -e w0 with one host
}

TEST_CASE("include/exclude: errors name the host, the slot and what exists", "[resources]") {
  const ResourcePool pool = {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}, {"idle", {}}};
  auto err = [&](ResourceSelection sel) {
    sel.pool_source = "hostfile hf";
    return error_of([&] { select_resources(pool, sel); });
  };
  CHECK(err({.include = "worker-1:4"}) ==
        "--include \"worker-1:4\": No slot '4' on host 'worker-1' (it has slots 0-3); use slot ids that hostfile hf "
        "lists for it");
  CHECK_THAT(err({.exclude = "worker-1:4"}), Catch::Contains("No slot '4' on host 'worker-1' (it has slots 0-3)"));
  CHECK_THAT(err({.include = "idle:0"}), Catch::Contains("No slot '0' on host 'idle' (it has no slots)"));
  CHECK(err({.include = "worker-2:0"}) ==
        "--include \"worker-2:0\": host 'worker-2' is not in hostfile hf (did you mean 'worker-0'?); its hosts are: "
        "worker-0, worker-1, idle");
  CHECK_THAT(err({.include = "wrker-1"}), Catch::Contains("did you mean 'worker-1'?"));
  CHECK_THAT(err({.include = "worker-0", .exclude = "worker-1"}),
             Catch::Contains("--include \"worker-0\" and --exclude \"worker-1\" were both given"));
  CHECK_THAT(err({.include = "worker-0", .num_nodes = 1}),
             Catch::Contains("--num_nodes/--num_gpus cannot be combined with --include"));
  CHECK_THAT(err({.exclude = "worker-0", .num_gpus = 0}),  // 0 still conflicts, as in DeepSpeed
             Catch::Contains("cannot be combined with --exclude"));
  CHECK_THAT(err({.include = "worker-0:1:2"}), Catch::Contains("found \"worker-0:1:2\" with more than one ':'"));
  CHECK_THAT(err({.include = "worker-0:a"}),
             Catch::Contains("found slot \"a\" in \"worker-0:a\"; expected a non-negative"));
  CHECK_THAT(err({.include = "worker-0:-1"}), Catch::Contains("found slot \"-1\""));
  CHECK_THAT(err({.include = "worker-0:"}), Catch::Contains("found slot \"\""));
  CHECK_THAT(err({.include = "worker-0@@worker-1"}), Catch::Contains("found an empty host entry"));
  CHECK_THAT(err({.include = ":1"}), Catch::Contains("without a host name"));
}

TEST_CASE("--num_nodes / --num_gpus after the filters", "[resources]") {
  const ResourcePool pool = {{"w0", {0, 1, 2, 3}}, {"empty", {}}, {"w1", {0, 1}}, {"w2", {0, 1, 2, 3}}};
  CHECK(show(select_resources(pool, {})) == "{w0:[0,1,2,3], w1:[0,1], w2:[0,1,2,3]}");  // slots=0 host dropped
  CHECK(show(select_resources(pool, {.num_nodes = 2})) == "{w0:[0,1,2,3], w1:[0,1]}");
  CHECK(show(select_resources(pool, {.num_nodes = 0, .num_gpus = 0})) == "{w0:[0,1,2,3], w1:[0,1], w2:[0,1,2,3]}");
  CHECK(show(select_resources(pool, {.num_gpus = 2})) == "{w0:[0,1], w1:[0,1], w2:[0,1]}");
  CHECK(show(select_resources(pool, {.num_nodes = 1, .num_gpus = 3})) == "{w0:[0,1,2]}");
  CHECK_THAT(error_of([&] { select_resources(pool, {.num_nodes = 4, .pool_source = "hostfile hf"}); }),
             Catch::Contains("--num_nodes 4: hostfile hf has only 3 host(s) with slots"));
  CHECK_THAT(error_of([&] { select_resources(pool, {.num_gpus = 3, .pool_source = "hostfile hf"}); }),
             Catch::Contains("--num_gpus 3: host 'w1' has only 2 slot(s) (0,1) in hostfile hf"));
  // DeepSpeed's unchecked behaviour when the pool's slots are not limits.
  CHECK(show(select_resources(pool, {.num_gpus = 3, .slots_are_limits = false})) ==
        "{w0:[0,1,2], w1:[0,1,2], w2:[0,1,2]}");
  // A device pool keeps its physical ids: the first G of them.
  CHECK(show(select_resources({{"localhost", {2, 3, 5}}}, {.num_gpus = 2})) == "{localhost:[2,3]}");
}

TEST_CASE("CUDA_VISIBLE_DEVICES as the local device pool", "[resources]") {
  CHECK(show(local_device_pool("", 4)) == "{localhost:[0,1,2,3]}");
  CHECK(show(local_device_pool("", 0)) == "{localhost:[]}");
  CHECK(show(local_device_pool("2,3", 4)) == "{localhost:[2,3]}");
  CHECK(show(local_device_pool(" 3, 1 ", 4)) == "{localhost:[3,1]}");
  CHECK(show(local_device_pool("7", -1)) == "{localhost:[7]}");  // count unknown: not checked
  CHECK(show(local_device_pool("-1", 4)) == "{localhost:[]}");   // CUDA: no device visible
  CHECK_THAT(
      error_of([] { local_device_pool("0,5", 4); }),
      Catch::Contains("CUDA_VISIBLE_DEVICES=0,5: device 5 does not exist; this machine has 4 device(s) (ids 0-3)"));
  CHECK_THAT(error_of([] { local_device_pool("1,1", 4); }), Catch::Contains("device 1 is listed twice"));
  CHECK_THAT(error_of([] { local_device_pool("0,,1", 4); }), Catch::Contains("found \"\"; expected a comma-separated"));
  CHECK_THAT(error_of([] { local_device_pool("GPU-5e1c7a3b", 4); }), Catch::Contains("found the device UUID"));
  // -i validates physical ids against that pool (DeepSpeed#5818: "No slot '4' specified on host 'localhost'").
  ResourcePool cvd = local_device_pool("2,3", 4);
  CHECK(show(select_resources(cvd, {.include = "localhost:3"})) == "{localhost:[3]}");
  CHECK_THAT(
      error_of([&] { select_resources(cvd, {.include = "localhost:0", .pool_source = "CUDA_VISIBLE_DEVICES"}); }),
      Catch::Contains("No slot '0' on host 'localhost' (it has slots 2,3); use slot ids that CUDA_VISIBLE_DEVICES"));
}

TEST_CASE("--bind_core_list and the split among local ranks", "[resources]") {
  CHECK(parse_core_list("1,3-5,7") == std::vector<int>{1, 3, 4, 5, 7});
  CHECK(parse_core_list("0-3") == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_core_list(" 2 , 4-4 ") == std::vector<int>{2, 4});
  CHECK_THAT(error_of([] { parse_core_list("3,1"); }), Catch::Contains("found \"1\" after core 3; expected ascending"));
  CHECK_THAT(error_of([] { parse_core_list("1-3,2"); }), Catch::Contains("non-overlapping"));
  CHECK_THAT(error_of([] { parse_core_list("5-3"); }), Catch::Contains("ending before it starts"));
  CHECK_THAT(error_of([] { parse_core_list("1,x"); }), Catch::Contains("found \"x\"; expected a core number"));
  CHECK_THAT(error_of([] { parse_core_list("1-"); }), Catch::Contains("found \"1-\""));
  CHECK_THAT(error_of([] { parse_core_list(""); }), Catch::Contains("--bind_core_list is empty"));
  auto slices = split_cores(parse_core_list("0-6"), 3);  // 7 cores, 3 ranks: 2 each, core 6 unused
  CHECK(slices == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}});
  CHECK(split_cores({1, 3, 4, 5, 7}, 1) == std::vector<std::vector<int>>{{1, 3, 4, 5, 7}});
  CHECK_THAT(error_of([] {
               split_cores({0, 1}, 3);
             }),
             Catch::Contains("2 core(s) (0,1) for 3 ranks on this host; expected at least one core per rank"));
  CHECK(format_id_ranges({3, 0, 1, 2}) == "0-3");
  CHECK(format_id_ranges({0, 2, 5, 6, 7}) == "0,2,5-7");
  CHECK(format_id_ranges({5, 6}) == "5,6");
  CHECK(format_id_ranges({}) == "none");
}

// ------------------------------------------------------------------------------------------ SLURM

namespace {
// Hostlists SLURM writes (and a few it accepts), with the expansion of SLURM 22.05.
const std::vector<std::pair<std::string, std::vector<std::string>>> kHostlists = {
    {"node1", {"node1"}},
    {"n1,n2,n3", {"n1", "n2", "n3"}},
    {"node[001-003,010],gpu-a[1-2]", {"node001", "node002", "node003", "node010", "gpu-a1", "gpu-a2"}},
    {"rack[1-2]-node[01-02]", {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
    {"x[1-2]y[1-2]z[1-2]", {"x1y1z1", "x1y1z2", "x2y1z1", "x2y1z2", "x1y2z1", "x1y2z2", "x2y2z1", "x2y2z2"}},
    {"a[1-3]b[5,7]c[8-9]",
     {"a1b5c8", "a1b5c9", "a2b5c8", "a2b5c9", "a3b5c8", "a3b5c9", "a1b7c8", "a1b7c9", "a2b7c8", "a2b7c9", "a3b7c8",
      "a3b7c9"}},
    {"n[09-11]", {"n09", "n10", "n11"}},
    {"n[9-11]", {"n9", "n10", "n11"}},
    {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
    {"n[001-3]", {"n001", "n002", "n003"}},
    {"n[99-101]", {"n99", "n100", "n101"}},
    {"n[00]", {"n00"}},
    {"n[1-3,2]", {"n1", "n2", "n3", "n2"}},
    {"n[1,1],m1", {"n1", "n1", "m1"}},
    {"n1-[1-2]", {"n1-1", "n1-2"}},
    {"[1-2]", {"1", "2"}},
    {"n1 , n2", {"n1", "n2"}},
    {"a,,b", {"a", "b"}},
};
const char* const kBadHostlists[] = {"n[010-1]",
                                     "n[]",
                                     "n[1-2",
                                     "n[1-2]x",
                                     "n[a-b]",
                                     "n[1-3]]",
                                     "n[1-2,]",
                                     "n[-1]",
                                     "n[[1]]",
                                     "a[1-2]-b[1-2]-c",
                                     "ib-gpu[3,7-8].cluster",
                                     "n[1-99999999]"};
}  // namespace

TEST_CASE("SLURM hostlists: hard-coded expansions", "[slurm]") {
  for (const auto& [expr, expected] : kHostlists) {
    INFO(expr);
    CHECK(expand_hostlist(expr) == expected);
  }
  for (const char* expr : kBadHostlists) {
    INFO(expr);
    CHECK_THAT(error_of([&] { expand_hostlist(expr, "SLURM_JOB_NODELIST"); }),
               Catch::StartsWith(std::string("SLURM_JOB_NODELIST \"") + expr + "\": "));
  }
  CHECK_THAT(error_of([] { expand_hostlist("n[1-2]x"); }), Catch::Contains("found \"x\" after the last ']'"));
  CHECK_THAT(error_of([] { expand_hostlist("n[3-1]"); }), Catch::Contains("ending before it starts"));
  CHECK(expand_hostlist("").empty());
}

TEST_CASE("SLURM hostlists: same as scontrol show hostnames (oracle)", "[slurm][oracle]") {
  if (!run("command -v scontrol >/dev/null 2>&1").second) {
    WARN("scontrol not on PATH (apt-get install slurm-client): oracle comparison skipped");
    return;
  }
  // scontrol needs a config to start, not a running cluster (see tests/testbed/slurm-local.sh).
  TempDir dir;
  fs::path conf = dir.write("slurm.conf",
                            "ClusterName=oracle\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\n"
                            "PartitionName=p Nodes=localhost\n");
  auto scontrol = [&](const std::string& expr) {
    return run("SLURM_CONF=" + shell_quote(conf.string()) + " scontrol show hostnames " + shell_quote(expr) + " 2>&1");
  };
  std::vector<std::string> exprs = {"gpu[1-4],login[01-02]", "c[1-2]n[1-3]r[7,9]", "a[1-2]b[3]c[4-5]d[6-7]",
                                    "n[1-2]-s[01-03]-z[0]", "node[0998-1002]"};
  for (const auto& row : kHostlists) exprs.push_back(row.first);
  for (const std::string& expr : exprs) {
    INFO(expr);
    auto [out, ok] = scontrol(expr);
    REQUIRE(ok);
    std::vector<std::string> names;
    for (size_t pos = 0, end; (end = out.find('\n', pos)) != std::string::npos; pos = end + 1)
      names.push_back(out.substr(pos, end - pos));
    CHECK(expand_hostlist(expr) == names);
  }
  for (const char* expr : kBadHostlists) {
    if (std::string(expr) == "n[1-2") continue;  // SLURM prints "n]"; we reject it
    INFO(expr);
    CHECK_THAT(scontrol(expr).first, Catch::Contains("Invalid hostlist") || Catch::Contains("error"));
  }
}

TEST_CASE("SLURM tasks per node", "[slurm]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("2,1(x2)") == std::vector<int>{2, 1, 1});
  CHECK(expand_tasks_per_node("72(x2),36") == std::vector<int>{72, 72, 36});
  for (const char* bad : {"", "2(x)", "2(3)", "x", "2(x0)", "2(x3", "2,,1", "-1"})
    CHECK_THAT(error_of([&] { expand_tasks_per_node(bad); }), Catch::Contains("expected N or N(xM) items"));
}

TEST_CASE("SLURM allocation from the environment", "[slurm]") {
  // Captured in `sbatch --nodes=3 --ntasks=5` on the SLURM testbed.
  Environment batch = env_from_file(kData / "slurm_batch_env.txt");
  auto alloc = slurm_allocation(batch);
  REQUIRE(alloc);
  CHECK(show(alloc->pool) == "{node1:[0,1], node2:[0,1], node3:[0]}");
  CHECK_FALSE(alloc->devices_are_gpus);
  CHECK(alloc->nodes_from == "SLURM_JOB_NODELIST=node[1-3]");
  CHECK(alloc->slots_from == "SLURM_TASKS_PER_NODE=2(x2),1");

  CHECK_FALSE(slurm_allocation({{"PATH", "/bin"}}));
  CHECK(show(slurm_allocation({{"SLURM_NODELIST", "a,b"}, {"SLURM_NTASKS_PER_NODE", "2"}})->pool) ==
        "{a:[0,1], b:[0,1]}");
  CHECK(show(slurm_allocation({{"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_JOB_CPUS_PER_NODE", "3,1"}})->pool) ==
        "{a:[0,1,2], b:[0]}");
  // GPU variables win over task counts; slots become GPU indices.
  struct GpuRow {
    const char* var;
    const char* value;
  };
  for (GpuRow row : {GpuRow{"SLURM_GPUS_ON_NODE", "4"}, GpuRow{"SLURM_JOB_GPUS", "4,5,6,7"},
                     GpuRow{"SLURM_STEP_GPUS", "0,1,2,3"}, GpuRow{"SLURM_JOB_GPUS", "0-1,4-5"},
                     GpuRow{"SLURM_GPUS_PER_NODE", "a100:4"}, GpuRow{"SLURM_GPUS_PER_NODE", "a100:2,v100:2"}}) {
    INFO(row.var << "=" << row.value);
    Environment env = batch;
    env[row.var] = row.value;
    auto gpu = slurm_allocation(env);
    CHECK(show(gpu->pool) == "{node1:[0,1,2,3], node2:[0,1,2,3], node3:[0,1,2,3]}");
    CHECK(gpu->devices_are_gpus);
    CHECK(gpu->slots_from == std::string(row.var) + "=" + row.value);
  }
  Environment zero = batch;
  zero["SLURM_GPUS_ON_NODE"] = "0";
  CHECK_FALSE(slurm_allocation(zero)->devices_are_gpus);

  auto err = [](Environment env) { return error_of([&] { slurm_allocation(env); }); };
  CHECK(err({{"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}) ==
        "SLURM_TASKS_PER_NODE=2(x2) describes 2 node(s) but SLURM_JOB_NODELIST names 3; expected one count per node");
  CHECK_THAT(err({{"SLURM_JOB_NODELIST", "n1,n1"}, {"SLURM_NTASKS_PER_NODE", "1"}}),
             Catch::Contains("names node 'n1' twice"));
  CHECK_THAT(err({{"SLURM_JOB_NODELIST", "n1"}}), Catch::Contains("is set but no per-node count is"));
  CHECK_THAT(err({{"SLURM_JOB_NODELIST", "n1"}, {"SLURM_JOB_GPUS", "0,x"}}),
             Catch::Contains("SLURM_JOB_GPUS=0,x: found \"x\"; expected a comma-separated list of GPU ids"));
}

TEST_CASE("already a launched task?", "[slurm]") {
  CHECK_FALSE(launched_task_reason(env_from_file(kData / "slurm_batch_env.txt")));  // batch script: SLURM_PROCID=0
  auto step = launched_task_reason(env_from_file(kData / "slurm_step_env.txt"));    // task 3 of `srun` (5 tasks)
  REQUIRE(step);
  CHECK(*step == "SLURM_PROCID=3 is set inside job step 1.0 of 5 tasks: srun started this process as one of its tasks");
  CHECK_FALSE(launched_task_reason({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}}));
  CHECK_THAT(*launched_task_reason({{"RANK", "2"}, {"SLURM_PROCID", "1"}}), Catch::StartsWith("RANK=2 is set"));
  CHECK_THAT(*launched_task_reason({{"OMPI_COMM_WORLD_RANK", "1"}}), Catch::Contains("mpirun (OpenMPI)"));
  CHECK_THAT(*launched_task_reason({{"PMI_RANK", "0"}}), Catch::StartsWith("PMI_RANK=0 is set"));
  CHECK_THAT(*launched_task_reason({{"PMIX_RANK", "1"}}), Catch::StartsWith("PMIX_RANK=1 is set"));
  CHECK_FALSE(launched_task_reason({{"HOME", "/root"}, {"RANK", ""}}));
}
