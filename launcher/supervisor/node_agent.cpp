#include "launcher/supervisor/node_agent.h"

#include "core/error.h"
#include "core/job_secret.h"
#include "launcher/job_commands.h"
#include "launcher/resources.h"
#include "launcher/supervisor/supervisor.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

namespace dscpp::launcher {

namespace {

namespace fs = std::filesystem;

// psutil.cpu_count(logical=False), which DeepSpeed's default core list uses: distinct
// (package, core) pairs of the online CPUs; the online count if topology is unreadable.
int physical_core_count() {
  std::set<std::pair<std::string, std::string>> cores;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/cpu", ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
        name.find_first_not_of("0123456789", 3) != std::string::npos)
      continue;
    std::ifstream package(entry.path() / "topology/physical_package_id"), core(entry.path() / "topology/core_id");
    std::string p, c;
    if (package >> p && core >> c) cores.emplace(p, c);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::string timestamp_now() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d%H%M%S", &local);
  return text;
}

// The pid file exists exactly while the agent runs.
class PidFile {
 public:
  explicit PidFile(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    std::string temp = path_ + ".tmp";
    std::FILE* f = std::fopen(temp.c_str(), "w");
    if (!f || std::fprintf(f, "%d\n", static_cast<int>(getpid())) < 0 || std::fclose(f) != 0 ||
        std::rename(temp.c_str(), path_.c_str()) != 0)
      fail("cannot write the pid file {}: {}", path_, std::strerror(errno));
  }
  ~PidFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;

 private:
  std::string path_;
};

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty())
    fail("node-agent: {} expects a number, got '{}'", flag, text);
  return value;
}

}  // namespace

int run_node_agent(const NodeAgentArgs& args) {
  return run_node_agent_group(args).exit_code;
}

GroupResult run_node_agent_group(const NodeAgentArgs& args) {
  WorldPlan plan;
  plan.hosts = decode_world_info(args.world_info);
  plan.master_addr = args.master_addr;
  plan.master_port = args.master_port;
  plan.devices_are_gpus = args.devices_are_gpus;
  if (args.node_rank < 0 || args.node_rank >= plan.node_count())
    fail("node-agent: --node_rank {} is outside the world info's {} host{}", args.node_rank, plan.node_count(),
         plan.node_count() == 1 ? "" : "s");
  if (args.program.empty()) fail("node-agent: no PROGRAM after --");
  const std::string& host = plan.hosts[args.node_rank].host;
  const std::vector<RankInfo> infos = plan.ranks_on(args.node_rank);

  EnvOptions env_options{args.env, false, 0};
  std::vector<std::vector<int>> cores;
  if (args.bind_cores_to_rank) {
    bool kmp_exported =
        std::any_of(args.env.begin(), args.env.end(), [](auto& kv) { return kv.first == "KMP_AFFINITY"; });
    if (std::getenv("KMP_AFFINITY") || kmp_exported)
      fail("KMP_AFFINITY is set, which conflicts with --bind_cores_to_rank (as in DeepSpeed); unset one of them");
    std::vector<int> all;
    if (args.bind_core_list.empty()) {
      for (int c = 0, n = physical_core_count(); c < n; ++c) all.push_back(c);
    } else {
      all = parse_core_list(args.bind_core_list);
    }
    cores = split_cores(all, static_cast<int>(infos.size()));
    env_options.omp_threads = true;
    env_options.cores_per_rank = cores.empty() ? 0 : static_cast<int>(cores.front().size());
  }

  std::string log_prefix;
  if (!args.each_rank_log_dir.empty()) {
    std::error_code ec;
    if (fs::exists(args.each_rank_log_dir, ec) && !fs::is_directory(args.each_rank_log_dir, ec))
      fail("--enable_each_rank_log {} is a file; it must be a directory (created if missing)", args.each_rank_log_dir);
    fs::create_directories(args.each_rank_log_dir, ec);
    if (ec) fail("cannot create the rank log directory {}: {}", args.each_rank_log_dir, ec.message());
    log_prefix = (fs::path(args.each_rank_log_dir) / (timestamp_now() + "_rank")).string();
  }

  const bool multi_node = plan.node_count() > 1;
  const ProgramSpec program{args.program, args.local_rank_at, ""};
  std::vector<RankLaunch> launches;
  for (size_t k = 0; k < infos.size(); ++k) {
    const RankInfo& info = infos[k];
    RankLaunch launch;
    launch.rank = info.rank;
    launch.label = multi_node ? fmt::format("[rank {} {}]", info.rank, host) : fmt::format("[rank {}]", info.rank);
    launch.argv = rank_argv(program, info.local_rank);
    launch.env = rank_env(plan, info, env_options);
    if (!args.job_secret.empty()) launch.env.emplace_back(kJobSecretVar, args.job_secret);
    if (!log_prefix.empty()) launch.log_file = log_prefix + std::to_string(info.rank) + ".log";
    if (!cores.empty()) launch.cpus = cores[k];
    launches.push_back(std::move(launch));
  }

  SupervisorOptions options;
  options.grace_seconds = args.grace_seconds;
  options.stop_fd = args.stop_on_stdin_eof ? 0 : -1;
  options.stop_fd_name = "stdin (the launcher's connection)";
  options.host = host;
  options.report_exits = args.report_exits;
  PidFile pid_file(args.save_pid_file);
  return run_rank_group(launches, options);
}

std::vector<std::string> node_agent_argv(const NodeAgentArgs& args) {
  std::vector<std::string> argv = {"--world_info=" + args.world_info, "--node_rank=" + std::to_string(args.node_rank),
                                   "--master_addr=" + args.master_addr,
                                   "--master_port=" + std::to_string(args.master_port)};
  if (args.devices_are_gpus) argv.push_back("--gpus");
  for (const auto& [key, value] : args.env) {
    argv.push_back("--env");
    argv.push_back(key + "=" + value);
  }
  if (args.local_rank_at >= 0) argv.push_back("--local_rank_at=" + std::to_string(args.local_rank_at));
  if (args.bind_cores_to_rank) argv.push_back("--bind_cores_to_rank");
  if (!args.bind_core_list.empty()) argv.push_back("--bind_core_list=" + args.bind_core_list);
  if (!args.each_rank_log_dir.empty()) argv.push_back("--enable_each_rank_log=" + args.each_rank_log_dir);
  if (!args.save_pid_file.empty()) argv.push_back("--save_pid=" + args.save_pid_file);
  if (args.grace_seconds != NodeAgentArgs{}.grace_seconds)
    argv.push_back(fmt::format("--grace_seconds={}", args.grace_seconds));
  if (!args.stop_on_stdin_eof) argv.push_back("--no_stdin_stop");
  if (!args.report_exits) argv.push_back("--no_exit_reports");
  argv.push_back("--");
  argv.insert(argv.end(), args.program.begin(), args.program.end());
  return argv;
}

NodeAgentArgs parse_node_agent_argv(const std::vector<std::string>& argv) {
  NodeAgentArgs args;
  bool world_info_seen = false;
  size_t i = 0;
  for (; i < argv.size() && argv[i] != "--"; ++i) {
    const std::string& arg = argv[i];
    if (arg.compare(0, 2, "--") != 0)
      fail("node-agent: unexpected '{}'; expected options, then `-- PROGRAM [ARGS...]`", arg);
    std::string key = arg.substr(0, arg.find('=')), value;
    const std::set<std::string> switches = {"--gpus", "--bind_cores_to_rank", "--no_stdin_stop", "--no_exit_reports"};
    if (switches.count(key)) {
      if (key != arg) fail("node-agent: {} takes no value (got '{}')", key, arg);
    } else if (key != arg) {
      value = arg.substr(key.size() + 1);
    } else if (i + 1 < argv.size() && argv[i + 1] != "--") {
      value = argv[++i];
    } else {
      fail("node-agent: {} needs a value", key);
    }
    if (key == "--world_info")
      args.world_info = value, world_info_seen = true;
    else if (key == "--node_rank")
      args.node_rank = parse_number<int>(key, value);
    else if (key == "--master_addr")
      args.master_addr = value;
    else if (key == "--master_port")
      args.master_port = parse_number<int>(key, value);
    else if (key == "--gpus")
      args.devices_are_gpus = true;
    else if (key == "--local_rank_at")
      args.local_rank_at = parse_number<int>(key, value);
    else if (key == "--bind_cores_to_rank")
      args.bind_cores_to_rank = true;
    else if (key == "--bind_core_list")
      args.bind_core_list = value;
    else if (key == "--enable_each_rank_log")
      args.each_rank_log_dir = value;
    else if (key == "--save_pid")
      args.save_pid_file = value;
    else if (key == "--grace_seconds")
      args.grace_seconds = parse_number<double>(key, value);
    else if (key == "--no_stdin_stop")
      args.stop_on_stdin_eof = false;
    else if (key == "--no_exit_reports")
      args.report_exits = false;
    else if (key == "--env") {
      size_t eq = value.find('=');
      if (eq == 0 || eq == std::string::npos) fail("node-agent: --env expects NAME=VALUE, got '{}'", value);
      args.env.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      fail("node-agent: unknown argument '{}'", arg);
    }
  }
  if (!world_info_seen) fail("node-agent: --world_info is required");
  if (i == argv.size()) fail("node-agent: expected `-- PROGRAM [ARGS...]` after the options");
  args.program.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
  if (args.program.empty()) fail("node-agent: no PROGRAM after --");
  return args;
}

}  // namespace dscpp::launcher
