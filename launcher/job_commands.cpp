#include "launcher/job_commands.h"

#include "core/error.h"
#include "launcher/env_export.h"
#include "launcher/hostfile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace dscpp::launcher {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// `stop_flag`: how dscpp's stop reaches the shim (--stop_on_stdin under srun, --stop_on_usr1 under mpirun).
void append_shim(std::vector<std::string>& argv, const std::string& dscpp_path, const ProgramSpec& program,
                 bool no_local_rank, const char* stop_flag) {
  argv.push_back(dscpp_path);
  argv.push_back("rank-shim");
  // The shim inserts --local_rank itself (only it knows the task's local rank).
  argv.push_back("--local_rank_at=" + std::to_string(no_local_rank ? -1 : program.local_rank_at));
  argv.push_back(stop_flag);
  argv.push_back("--");
  argv.insert(argv.end(), program.argv.begin(), program.argv.end());
}

}  // namespace

std::string self_executable() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("cannot find the dscpp executable through /proc/self/exe: {}", ec.message());
  return p.string();
}

static std::string invoked_as;

void set_invoked_as(const std::string& argv0) { invoked_as = argv0; }

std::string invoked_executable() {
  const char* path = std::getenv("PATH");
  return invoked_path(invoked_as, path ? path : "", self_executable());
}

std::string invoked_path(const std::string& argv0, const std::string& path_env, const std::string& self) {
  struct stat self_st {};
  if (argv0.empty() || ::stat(self.c_str(), &self_st) != 0) return self;
  std::string candidate;
  if (argv0.find('/') != std::string::npos) {
    candidate = absolute(argv0);
  } else {
    // As execvp searches: an empty entry is the current directory.
    for (size_t start = 0; start <= path_env.size();) {
      size_t end = path_env.find(':', start);
      if (end == std::string::npos) end = path_env.size();
      std::string dir = path_env.substr(start, end - start);
      std::string p = (dir.empty() ? std::string(".") : dir) + "/" + argv0;
      struct stat st {};
      if (::access(p.c_str(), X_OK) == 0 && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        candidate = absolute(p);
        break;
      }
      start = end + 1;
    }
  }
  struct stat st {};
  if (candidate.empty() || ::stat(candidate.c_str(), &st) != 0 || st.st_dev != self_st.st_dev ||
      st.st_ino != self_st.st_ino)
    return self;
  return candidate;
}

std::string runtime_executable(const std::string& dscpp_path) {
  std::vector<fs::path> places;
  auto add = [&places](const fs::path& dscpp) {
    places.push_back(dscpp.parent_path() / "dscpp-runtime");
    places.push_back(dscpp.parent_path().parent_path() / "runtime" / "dscpp-runtime");
  };
  add(dscpp_path);
  std::error_code ec;
  if (fs::path resolved = fs::canonical(dscpp_path, ec); !ec && resolved != fs::path(dscpp_path)) add(resolved);
  for (const auto& p : places)
    if (fs::exists(p, ec)) return p.string();
  return places[1].string();
}

// A file here that the kernel would refuse to exec but that is an ELF shared object: what a
// plugin built without the .so suffix looks like (exec would say only "Permission denied").
static bool is_plugin_without_suffix(const std::string& path) {
  if (::access(path.c_str(), X_OK) == 0) return false;
  std::ifstream f(path, std::ios::binary);
  unsigned char head[18] = {};
  if (!f.read(reinterpret_cast<char*>(head), sizeof head)) return false;
  const bool elf = head[0] == 0x7f && head[1] == 'E' && head[2] == 'L' && head[3] == 'F';
  return elf && head[16] == 3 && head[17] == 0;  // e_type ET_DYN, little-endian
}

ProgramSpec resolve_program(const std::vector<std::string>& program, bool no_local_rank,
                            const std::string& dscpp_path) {
  if (program.empty()) fail("no PROGRAM to run");
  ProgramSpec spec;
  const std::string& first = program[0];
  std::vector<std::string> rest(program.begin() + 1, program.end());
  if (ends_with(first, ".so")) {
    spec.file = absolute(first);
    spec.argv = {runtime_executable(dscpp_path), "--model", spec.file};
    spec.local_rank_at = 3;
  } else if (ends_with(first, ".py")) {
    spec.file = absolute(first);
    spec.argv = {"python3", "-u", spec.file};
    spec.local_rank_at = 3;
  } else if (first.find('/') != std::string::npos) {
    spec.file = absolute(first);
    spec.argv = {spec.file};
    if (is_plugin_without_suffix(spec.file))
      fail("{} is a shared library that is not executable: a model plugin? dscpp runs a plugin under dscpp-runtime "
           "when its name ends in .so (rename it, or link to it as NAME.so)",
           first);
  } else {
    spec.argv = {first};
  }
  if (no_local_rank) spec.local_rank_at = -1;
  spec.argv.insert(spec.argv.end(), rest.begin(), rest.end());
  return spec;
}

std::vector<std::string> rank_argv(const ProgramSpec& program, int local_rank) {
  std::vector<std::string> argv = program.argv;
  if (program.local_rank_at >= 0)
    argv.insert(argv.begin() + program.local_rank_at, "--local_rank=" + std::to_string(local_rank));
  return argv;
}

std::vector<std::string> split_shell_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\'))
        word += text[++i];
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word), word.clear(), in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) fail("--launcher_args: unclosed {} quote in: {}", quote, text);
  if (in_word) words.push_back(word);
  return words;
}

std::vector<std::string> mpirun_argv(const WorldPlan& plan, const std::vector<std::string>& env_names,
                                     const std::string& launcher_args, const std::string& dscpp_path,
                                     const ProgramSpec& program, bool no_local_rank, bool as_root) {
  std::vector<std::string> argv = {"mpirun"};
  if (as_root) argv.push_back("--allow-run-as-root");
  argv.push_back("-n");
  argv.push_back(std::to_string(plan.world_size()));
  // host:slots grants exactly the plan's slots (more ranks than cores need no --oversubscribe),
  // and by-slot mapping numbers ranks host by host, as the plan does.
  std::string hosts;
  for (const auto& h : plan.hosts)
    hosts += (hosts.empty() ? "" : ",") + host_name_of(h.host) + ":" + std::to_string(h.slots.size());
  argv.insert(argv.end(), {"--host", hosts, "--map-by", "slot"});
  // dscpp stops the job itself (SIGUSR1 to mpirun reaches every shim), after the shims reported
  // which rank failed first; mpirun's own abort would kill a rank that is still failing on its
  // own before it can say so.
  argv.insert(argv.end(), {"--mca", "orte_abort_on_non_zero_status", "0"});
  for (const auto& name : env_names) argv.insert(argv.end(), {"-x", name});
  for (auto& w : split_shell_words(launcher_args)) argv.push_back(w);
  append_shim(argv, dscpp_path, program, no_local_rank, "--stop_on_usr1");
  return argv;
}

std::vector<std::string> srun_argv(const WorldPlan& plan, bool restrict_nodes, const std::string& launcher_args,
                                   const std::string& dscpp_path, const ProgramSpec& program, bool no_local_rank) {
  std::vector<std::string> argv = {"srun", "--nodes=" + std::to_string(plan.node_count()),
                                   "--ntasks=" + std::to_string(plan.world_size())};
  bool uniform = true;
  for (const auto& h : plan.hosts) uniform = uniform && h.slots.size() == plan.hosts.front().slots.size();
  if (uniform && !plan.hosts.empty())
    argv.push_back("--ntasks-per-node=" + std::to_string(plan.hosts.front().slots.size()));
  if (restrict_nodes) {
    std::string nodes;
    for (const auto& h : plan.hosts) nodes += (nodes.empty() ? "" : ",") + host_name_of(h.host);
    argv.push_back("--nodelist=" + nodes);
  }
  // dscpp stops the step itself once the shims reported which rank failed first (closing srun's
  // stdin, which srun hands to every task); srun must neither kill the step on a bad exit (that
  // kills a rank still failing on its own before it can say so) nor time the others out.
  argv.insert(argv.end(), {"--kill-on-bad-exit=0", "--wait=0", "--input=all", "--export=ALL"});
  for (auto& w : split_shell_words(launcher_args)) argv.push_back(w);
  append_shim(argv, dscpp_path, program, no_local_rank, "--stop_on_stdin");
  return argv;
}

std::string first_line_of(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096] = {};
    if (fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string agent_command(const std::string& cwd, const std::string& dscpp_path,
                          const std::vector<std::string>& agent_args) {
  std::string cmd = "cd " + shell_quote(cwd) + " && exec " + shell_quote(dscpp_path) + " node-agent";
  for (const auto& a : agent_args) cmd += " " + shell_quote(a);
  return cmd;
}

}  // namespace dscpp::launcher
