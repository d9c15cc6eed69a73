// The commands that are other programs: `dscpp aio-bench` hands its arguments to dscpp-aio-bench,
// `dscpp gradcheck` and `dscpp generate` to dscpp-runtime --gradcheck/--generate. The benchmark
// needs the async I/O engine (offload/, liburing, libaio) and the gradient check the runtime's
// layer runner, and the launcher links no engine code, so they live in executables installed next
// to dscpp (as dscpp-runtime does for `dscpp estimate --model`).
#include "core/error.h"
#include "launcher/commands/commands.h"
#include "launcher/job_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dscpp::launcher {

void run_aio_bench(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  fs::path self = self_executable();
  fs::path helper = self.parent_path() / "dscpp-aio-bench";
  if (!fs::exists(helper)) helper = self.parent_path().parent_path() / "offload" / "dscpp-aio-bench";  // build tree
  if (!fs::exists(helper))
    fail("aio-bench needs dscpp-aio-bench, which is not at {} nor in the build tree; install it next to dscpp",
         (self.parent_path() / "dscpp-aio-bench").string());
  std::vector<char*> argv;
  std::string name = helper.string();
  argv.push_back(name.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(name.c_str(), argv.data());
  fail("cannot run {}: {}", name, std::strerror(errno));
}

void run_runtime_tool(const std::string& tool, const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h")
    fail("usage: dscpp {} PLUGIN.so [options] [-- plugin arguments]; the options are dscpp-runtime's (--help there)",
         tool);
  const std::string runtime = runtime_executable(self_executable());
  std::vector<std::string> full{runtime, "--" + tool, "--model", args[0]};
  full.insert(full.end(), args.begin() + 1, args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(runtime.c_str(), argv.data());
  fail("cannot run {}: {}", runtime, std::strerror(errno));
}

}  // namespace dscpp::launcher
