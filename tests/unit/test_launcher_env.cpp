// The launch plan's pure rules, part two: exported environment, rank numbering and rank
// environment, world-info encoding (test_launcher_plan.cpp: hostfile, include/exclude, SLURM).
#include "launcher/launch_plan.h"
#include "launcher/ssh/ssh.h"
#include "launcher/supervisor/node_agent.h"
#include "tests/unit/launcher_fixture.h"

#include <string>
#include <string_view>

using namespace launcher_test;

// -------------------------------------------------------------------------------- exported env

TEST_CASE("env files: comments, export, quotes, errors with file:line", "[env]") {
  const char* text =
      "# settings for every host\n"
      "\n"
      "NCCL_DEBUG=INFO\n"
      "export WANDB_PROJECT=my-run   # trailing comment\n"
      "  export   SPACED='a b  c'\n"
      "DQ=\"say \\\"hi\\\" \\$HOME \\n\"\n"
      "SQ='no $expansion \\ here'\n"
      "MIX=pre'fix 'and\" more\"\n"
      "HASH=a#b\n"
      "EMPTY=\n"
      "EMPTY2=''\n"
      "OLD = style\n"  // DeepSpeed stripped around '='
      "ESC=a\\ b\r\n"
      "NCCL_DEBUG=WARN\n";
  EnvList env = parse_env_file(text, "f");
  CHECK(show(env) ==
        "NCCL_DEBUG=WARN WANDB_PROJECT=my-run SPACED=a b  c DQ=say \"hi\" $HOME \\n SQ=no $expansion \\ here "
        "MIX=prefix and more HASH=a#b EMPTY= EMPTY2= OLD=style ESC=a b");
  struct Bad {
    const char* text;
    const char* error;
  };
  for (Bad b : {Bad{"A=1\nJUSTNAME\n", "f:2: found \"JUSTNAME\"; expected NAME=VALUE"},
                Bad{"1X=2", "f:1: found the name \"1X\"; expected letters, digits and '_'"},
                Bad{"A='open", "f:1: found an unterminated ' quote"},
                Bad{"\n\nA=\"open", "f:3: found an unterminated \" quote"},
                Bad{"A=two words", "f:1: found \"words\" after the value; expected one value per line"},
                Bad{"A=x\\", "f:1: found '\\' at the end of the line"},
                Bad{"RANK=1", "f:1: RANK is set by dscpp for every rank and cannot be exported; remove it"},
                Bad{"export MASTER_ADDR=h", "use --master_addr/--master_port"}}) {
    INFO(b.text);
    CHECK_THAT(error_of([&] { parse_env_file(b.text, "f"); }), Catch::Contains(b.error));
  }
}

TEST_CASE("forwarded launcher environment: the allowlist", "[env]") {
  Environment launcher = {
      {"NCCL_DEBUG", "INFO"},        {"NCCLX", "1"},         {"PYTHONPATH", "/x"},      {"PATH", "/usr/bin"},
      {"LD_LIBRARY_PATH", "/l"},     {"DSCPP_LOG", "debug"}, {"OMP_NUM_THREADS", "4"},  {"GLOO_SOCKET_IFNAME", "eth1"},
      {"CUDA_VISIBLE_DEVICES", "0"}, {"RANK", "3"},          {"MASTER_ADDR", "x"},      {"AZUREML_RUN_ID_2", "r"},
      {"UCX_NET_DEVICES", "mlx5"},   {"HF_HOME", "/hf"},     {"BASH_FUNC_f%%", "() {}"}};
  CHECK(show(forwarded_environment(launcher)) ==
        "AZUREML_RUN_ID_2=r DSCPP_LOG=debug GLOO_SOCKET_IFNAME=eth1 NCCLX=1 NCCL_DEBUG=INFO OMP_NUM_THREADS=4 "
        "PYTHONPATH=/x UCX_NET_DEVICES=mlx5");
  launcher["AISC_JOB_NAME"] = "job";
  launcher["NCCL_IB_HCA"] = "mlx5_0";
  CHECK_FALSE(is_forwarded_name("NCCL_IB_HCA", launcher));
  CHECK_FALSE(is_forwarded_name("UCX_NET_DEVICES", launcher));
  CHECK(is_forwarded_name("NCCL_DEBUG", launcher));
  CHECK(export_rules().size() > 20);
}

TEST_CASE("exported env: environment < ~ file < ./ file < --env", "[env]") {
  TempDir home, cwd;
  home.write(".deepspeed_env", "A=home\nB=home\nC=home\n");
  cwd.write(".deepspeed_env", "# local\nB=local\nNCCL_DEBUG=local\n");
  ExportInputs in{
      .environment = {{"HOME", home.path.string()}, {"NCCL_DEBUG", "env"}, {"NCCL_ALGO", "Ring"}, {"K", "kv"}},
      .cwd = cwd.path.string(),
      .cli_env = {"C=cli", "D=x=y", "K", "E="}};
  CHECK(show(build_exported_env(in)) == "NCCL_ALGO=Ring NCCL_DEBUG=local A=home B=local C=cli D=x=y K=kv E=");

  // DS_ENV_FILE renames both files; an absolute one is read once.
  home.write("my.env", "A=renamed\n");
  in.environment["DS_ENV_FILE"] = "my.env";
  CHECK(show(build_exported_env(in)) == "NCCL_ALGO=Ring NCCL_DEBUG=env A=renamed C=cli D=x=y K=kv E=");
  in.cli_env.clear();
  in.environment["DS_ENV_FILE"] = (home.path / "my.env").string();
  CHECK(env_file_paths(in.environment, in.cwd) == std::vector<std::string>{(home.path / "my.env").string()});
  CHECK(show(build_exported_env(in)) == "NCCL_ALGO=Ring NCCL_DEBUG=env A=renamed");
  in.environment.erase("DS_ENV_FILE");
  in.environment.erase("HOME");
  CHECK(env_file_paths(in.environment, "/w") == std::vector<std::string>{"/w/.deepspeed_env"});

  cwd.write(".deepspeed_env", "ok=1\nbroken\n");
  CHECK_THAT(error_of([&] { build_exported_env(in); }),
             Catch::Contains((cwd.path / ".deepspeed_env").string() + ":2: found \"broken\""));
  auto cli_err = [](std::vector<std::string> cli) {
    return error_of([&] { build_exported_env({.environment = {}, .cwd = "/nonexistent", .cli_env = cli}); });
  };
  CHECK_THAT(cli_err({"NOPE"}), Catch::Contains("--env NOPE: NOPE is not set in the launcher's environment"));
  CHECK_THAT(cli_err({"=1"}), Catch::Contains("--env =1: found the name \"\""));
  CHECK_THAT(cli_err({"WORLD_SIZE=2"}), Catch::Contains("WORLD_SIZE is set by dscpp for every rank"));
}

TEST_CASE("the job's secret never travels as a forwarded variable or an argument", "[env]") {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  Environment launcher = {{"DSCPP_JOB_SECRET", secret}, {"DSCPP_SSH_PASSPHRASE", "pw"}, {"DSCPP_LOG", "info"}};
  CHECK(show(forwarded_environment(launcher)) == "DSCPP_LOG=info");
  CHECK_THAT(error_of([&] {
               build_exported_env({.environment = launcher, .cwd = "/nonexistent", .cli_env = {"DSCPP_JOB_SECRET"}});
             }),
             Catch::Contains("cannot be exported this way") && Catch::Contains("DSCPP_JOB_SECRET_FILE"));
  CHECK_THAT(error_of([&] { parse_env_file("DSCPP_JOB_SECRET=" + secret + "\n", "f"); }),
             Catch::Contains("f:1: DSCPP_JOB_SECRET cannot be exported this way") && !Catch::Contains(secret));
  NodeAgentArgs agent;
  agent.world_info = "e30=";
  agent.program = {"true"};
  agent.job_secret = secret;
  for (const std::string& arg : node_agent_argv(agent)) CHECK(arg.find(secret) == std::string::npos);
  // Over ssh it is read from the channel's stdin, byte by byte, leaving the rest for the command.
  auto [out, ok] = run("printf '%s\\ngo\\n' " + secret + " | sh -c " +
                       shell_quote(stdin_env_prefix({{"DSCPP_JOB_SECRET", secret}}) +
                                   "read -r next; printf '%s %s' \"$DSCPP_JOB_SECRET\" \"$next\""));
  CHECK(ok);
  CHECK(out == secret + " go");
  CHECK(remote_command_line("true", {}, false, "", {{"DSCPP_JOB_SECRET", secret}}).find(secret) == std::string::npos);
}

TEST_CASE("shell quoting survives a real shell", "[env]") {
  CHECK(shell_quote("abc-1.2_x/y:z,@%+=") == "abc-1.2_x/y:z,@%+=");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_exports({{"A", "1"}, {"B", "x y"}}) == "export A=1; export B='x y'; ");
  CHECK_THROWS_AS(shell_exports({{"A B", "1"}}), dscpp::Error);
  const std::string values[] = {
      "plain",       "two  spaces", "quote ' single",       "\"double\"", "$HOME `id` $(id) \\n",
      "line\nbreak", "*?[glob]",    "semi;colon&amp|pipe>", "",           "trailing\\"};
  for (const std::string& v : values) {
    INFO(v);
    auto [out, ok] = run("sh -c " + shell_quote(shell_exports({{"V", v}}) + "printf %s \"$V\""));
    CHECK(ok);
    CHECK(out == v);
  }
}

TEST_CASE("environment snapshot", "[env]") {
  char a[] = "A=1", b[] = "B=x=y", dup[] = "A=2", odd[] = "NOEQUALS";
  char* envp[] = {a, b, dup, odd, nullptr};
  CHECK(environment_from(envp) == Environment{{"A", "1"}, {"B", "x=y"}});
  CHECK(environment_from(nullptr).empty());
}

// --------------------------------------------------------------------------- ranks and rank env

TEST_CASE("rank numbering on uneven hosts", "[world]") {
  WorldPlan plan{.hosts = {{"a", {0, 1, 2}}, {"b", {0, 1}}}};
  CHECK(plan.world_size() == 5);
  CHECK(plan.node_count() == 2);
  std::vector<RankInfo> ranks = plan.ranks();
  REQUIRE(ranks.size() == 5);
  const int expected[5][4] = {
      {0, 0, 0, 0}, {1, 1, 0, 1}, {2, 2, 0, 2}, {3, 0, 1, 0}, {4, 1, 1, 1}};  // rank local node slot
  for (int r = 0; r < 5; ++r) {
    INFO("rank " << r);
    CHECK(ranks[r].rank == expected[r][0]);
    CHECK(ranks[r].local_rank == expected[r][1]);  // b: 3 -> 0, 4 -> 1 (DeepSpeed >= 0.16.4 would rotate)
    CHECK(ranks[r].node_rank == expected[r][2]);
    CHECK(ranks[r].slot == expected[r][3]);
    CHECK(ranks[r].host == (r < 3 ? "a" : "b"));
  }
  auto on_b = plan.ranks_on(1);
  REQUIRE(on_b.size() == 2);
  CHECK(on_b[0].rank == 3);
  CHECK(on_b[1].rank == 4);
  CHECK_THAT(error_of([&] { plan.ranks_on(2); }),
             Catch::Contains("node rank 2 is out of range; the plan has 2 node(s)"));
  CHECK(WorldPlan{}.world_size() == 0);
}

TEST_CASE("rank environment", "[world]") {
  WorldPlan plan{.hosts = {{"a", {0, 1, 2}}, {"b", {4, 6}}},
                 .master_addr = "10.0.0.1",
                 .master_port = 29501,
                 .devices_are_gpus = true};
  EnvOptions options{.exported = {{"NCCL_DEBUG", "INFO"}, {"CUDA_VISIBLE_DEVICES", "9"}, {"NCCL_DEBUG", "WARN"}},
                     .omp_threads = true,
                     .cores_per_rank = 4};
  RankInfo r4 = plan.ranks()[4];
  CHECK(show(rank_env(plan, r4, options)) ==
        "RANK=4 LOCAL_RANK=1 WORLD_SIZE=5 LOCAL_SIZE=2 LOCAL_WORLD_SIZE=2 CROSS_RANK=1 GROUP_RANK=1 CROSS_SIZE=2 "
        "MASTER_ADDR=10.0.0.1 MASTER_PORT=29501 CUDA_VISIBLE_DEVICES=4,6 OMP_NUM_THREADS=4 NCCL_DEBUG=WARN");
  plan.devices_are_gpus = false;
  options.omp_threads = false;
  CHECK(show(rank_env(plan, plan.ranks()[0], options)) ==
        "RANK=0 LOCAL_RANK=0 WORLD_SIZE=5 LOCAL_SIZE=3 LOCAL_WORLD_SIZE=3 CROSS_RANK=0 GROUP_RANK=0 CROSS_SIZE=2 "
        "MASTER_ADDR=10.0.0.1 MASTER_PORT=29501 NCCL_DEBUG=WARN CUDA_VISIBLE_DEVICES=9");
  options.omp_threads = true;
  options.cores_per_rank = 0;
  CHECK_THAT(error_of([&] { rank_env(plan, r4, options); }), Catch::Contains("0 cores per rank; expected at least 1"));
  CHECK(is_rank_variable("LOCAL_WORLD_SIZE"));
  CHECK_FALSE(is_rank_variable("CUDA_VISIBLE_DEVICES"));
}

// ---------------------------------------------------------------------------------- world info

TEST_CASE("world info: DeepSpeed's encoding, byte for byte", "[world]") {
  ResourcePool pool = {{"worker-0", {0, 1}}, {"worker-1", {0, 2}}};
  CHECK(world_info_json(pool) == R"({"worker-0": [0, 1], "worker-1": [0, 2]})");
  // DeepSpeed's own encoding of this map:
  CHECK(encode_world_info(pool) == "eyJ3b3JrZXItMCI6IFswLCAxXSwgIndvcmtlci0xIjogWzAsIDJdfQ==");
  // Expected values from Python: base64.urlsafe_b64encode(json.dumps(d).encode()).
  CHECK(encode_world_info({}) == "e30=");
  CHECK(encode_world_info({{"a", {0, 1, 2}}, {"b", {0, 1}}}) == "eyJhIjogWzAsIDEsIDJdLCAiYiI6IFswLCAxXX0=");
  CHECK(encode_world_info({{"n>>>", {0}}}) == "eyJuPj4-IjogWzBdfQ==");
  CHECK(encode_world_info({{"n???", {0}}}) == "eyJuPz8_IjogWzBdfQ==");
  ResourcePool odd = {{"h\u00f6st\U0001F600\"\\", {0}}, {"b", {}}};
  CHECK(world_info_json(odd) == R"({"h\u00f6st\ud83d\ude00\"\\": [0], "b": []})");
  CHECK(encode_world_info(odd) == "eyJoXHUwMGY2c3RcdWQ4M2RcdWRlMDBcIlxcIjogWzBdLCAiYiI6IFtdfQ==");
  for (const ResourcePool& p : {pool, odd, ResourcePool{}, ResourcePool{{"x", {7, 3}}}})
    CHECK(show(decode_world_info(encode_world_info(p))) == show(p));
  CHECK_THAT(error_of([] { encode_world_info({{"bad\xff", {0}}}); }), Catch::Contains("is not valid UTF-8"));
}

// base64url_encode builds inputs that encode_world_info never writes; the case above pins its
// output byte for byte.
TEST_CASE("world info: decoding any JSON spelling, clear errors", "[world]") {
  constexpr auto b64 = &base64url_encode;
  CHECK(show(decode_world_info("eyJhIjpbMCwxXSAsICJiIiA6IFszXX0=")) == "{a:[0,1], b:[3]}");  // {"a":[0,1] , "b" : [3]}
  CHECK(show(decode_world_info("eyJhIjpbMCwxXSAsICJiIiA6IFszXX0")) == "{a:[0,1], b:[3]}");   // no padding
  CHECK(show(decode_world_info("eyJuPj4+IjogWzBdfQ==")) == "{n>>>:[0]}");                    // standard alphabet
  CHECK(show(decode_world_info(b64("{\n  \"w0\": [ 1 ,0 ],\n  \"w1\": []\n}"))) == "{w0:[1,0], w1:[]}");
  struct Bad {
    std::string encoded;
    const char* error;
  };
  for (const Bad& b : {Bad{"eyJ!", "found '!' at offset 3; expected URL-safe base64"},
                       Bad{"eyJhI", "5 base64 characters cannot be a whole number of bytes"},
                       Bad{b64("{\"a\": [0,"), "decodes to text that is not JSON"},
                       Bad{b64("[[0, 1]]"), "decodes to an array; expected an object"},
                       Bad{b64("{\"a\": 2}"), "host \"a\" maps to an integer (2); expected a list of slot ids"},
                       Bad{b64("{\"a\": [0, 1.5]}"), "host \"a\" has the slot 1.5; expected non-negative integers"},
                       Bad{b64("{\"a\": [-1]}"), "host \"a\" has the slot -1"},
                       Bad{b64("{\"a\": [\"0\"]}"), "host \"a\" has the slot"},
                       Bad{b64("{\"a\": [1, 1]}"), "host \"a\" lists slot 1 twice"},
                       Bad{b64("{\"\": [0]}"), "found an empty host name"}}) {
    INFO(b.encoded);
    CHECK_THAT(error_of([&] { decode_world_info(b.encoded); }), Catch::Contains(b.error));
  }
}
