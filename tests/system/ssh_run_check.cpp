// A tiny CLI over run_remote / ssh_capture for the SSH system test (tests/system/launch_ssh.sh).
//
//   ssh_run_check [options] HOST 'CMD' [HOST 'CMD' ...]
//     --key FILE          identity file (repeatable; SshOptions::identity_files, as --ssh_identity)
//     --known_hosts FILE  SshOptions::known_hosts (as --ssh_known_hosts)
//     --ssh_config FILE   SshOptions::config_file (default ~/.ssh/config; none = read none)
//     --user U --port P --no-agent --grace S --connect-timeout S --login-timeout S --prefix
//     --env K=V           exported to every command (repeatable)
//     --stop-on-stdin     stdin readable/EOF stops every host (RemoteRunOptions::stop_fd = 0)
//     --watches-stdin     every command keeps the channel's stdin (RemoteCommand::watches_stdin)
//     --capture           one HOST: ssh_capture (print its stdout, or the error); several:
//                         ssh_capture_all (print "capture: HOST ok" + stdout, or "capture: HOST FAILED: why")
//     --report-children   at the end, print "children: N" to stderr: processes this one started that
//                         are still there, zombies included (a ProxyCommand must be killed and reaped)
// Relayed output goes to stdout/stderr; the RemoteRunResult is printed to stderr as lines
// starting with "result:". Exit status: the result's exit_code (capture: 0, or 1 on error).
#include "core/error.h"
#include "launcher/ssh/ssh.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

using namespace dscpp::launcher;

namespace {

int usage(const char* why) {
  std::fprintf(
      stderr,
      "ssh_run_check: %s\nusage: ssh_run_check [--key F] [--known_hosts F] [--ssh_config F] [--user U] [--port P] "
      "[--no-agent] [--grace S] [--connect-timeout S] [--login-timeout S] [--prefix] [--env K=V] [--stop-on-stdin] "
      "[--watches-stdin] [--capture] [--report-children] "
      "HOST 'CMD' [HOST 'CMD' ...]\n",
      why);
  return 2;
}

// Processes whose parent is this one, from /proc (field 4 of /proc/PID/stat).
int count_children() {
  int n = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  while (dirent* e = readdir(proc)) {
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string text;
    if (!std::getline(stat, text)) continue;
    size_t close = text.rfind(')');
    int ppid = 0;
    if (close != std::string::npos && std::sscanf(text.c_str() + close + 1, " %*c %d", &ppid) == 1 && ppid == getpid())
      ++n;
  }
  closedir(proc);
  return n;
}

int finish(int status, bool report_children) {
  if (report_children) std::fprintf(stderr, "children: %d\n", count_children());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  SshOptions ssh;
  RemoteRunOptions run;
  EnvList env;
  bool capture = false, watches_stdin = false, report_children = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dscpp::Error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--key")
        ssh.identity_files.push_back(value());
      else if (a == "--known_hosts")
        ssh.known_hosts = value();
      else if (a == "--ssh_config")
        ssh.config_file = value();
      else if (a == "--login-timeout")
        ssh.login_timeout_seconds = std::stod(value());
      else if (a == "--report-children")
        report_children = true;
      else if (a == "--user")
        ssh.user = value();
      else if (a == "--port")
        ssh.port = std::stoi(value());
      else if (a == "--no-agent")
        ssh.use_agent = false;
      else if (a == "--grace")
        run.grace_seconds = std::stod(value());
      else if (a == "--connect-timeout")
        ssh.connect_timeout_seconds = std::stod(value());
      else if (a == "--prefix")
        run.prefix_host = true;
      else if (a == "--stop-on-stdin")
        run.stop_fd = 0;
      else if (a == "--watches-stdin")
        watches_stdin = true;
      else if (a == "--capture")
        capture = true;
      else if (a == "--env") {
        std::string kv = value();
        size_t eq = kv.find('=');
        if (eq == std::string::npos) return usage("--env wants K=V");
        env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      } else if (a.rfind("--", 0) == 0)
        return usage(("unknown option " + a).c_str());
      else
        positional.push_back(a);
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (positional.empty() || positional.size() % 2) return usage("want HOST 'CMD' pairs");

  if (capture && positional.size() == 2) {
    try {
      std::fputs(ssh_capture(positional[0], positional[1], ssh).c_str(), stdout);
      return finish(0, report_children);
    } catch (const dscpp::Error& e) {
      std::fprintf(stderr, "ssh_run_check: error: %s\n", e.what());
      return finish(1, report_children);
    }
  }

  std::vector<RemoteCommand> commands;
  for (size_t i = 0; i < positional.size(); i += 2)
    commands.push_back({positional[i], positional[i + 1], env, watches_stdin});
  if (capture) {
    int status = 0;
    std::vector<RemoteCapture> all;
    try {
      all = ssh_capture_all(commands, ssh);
    } catch (const dscpp::Error& e) {
      std::fprintf(stderr, "ssh_run_check: error: %s\n", e.what());
      return 2;
    }
    for (size_t i = 0; i < all.size(); ++i) {
      std::string why = all[i].failure(commands[i].command);
      if (why.empty())
        std::printf("capture: %s ok\n%s", commands[i].host.c_str(), all[i].out.c_str());
      else
        std::printf("capture: %s FAILED: %s\n", commands[i].host.c_str(), why.c_str()), status = 1;
    }
    return finish(status, report_children);
  }
  RemoteRunResult r;
  try {
    r = run_remote(commands, ssh, run);
  } catch (const dscpp::Error& e) {
    std::fprintf(stderr, "ssh_run_check: error: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr, "result: exit_code=%d stopped=%d first_failure=%s\n", r.exit_code, r.stopped ? 1 : 0,
               r.first_failure ? r.first_failure->host.c_str() : "-");
  for (const RemoteExit& e : r.exits)
    std::fprintf(stderr, "result: host=%s exit_code=%d signal=%s error=%s\n", e.host.c_str(), e.exit_code,
                 e.signal.empty() ? "-" : e.signal.c_str(), e.error.empty() ? "-" : e.error.c_str());
  return finish(r.exit_code, report_children);
}
