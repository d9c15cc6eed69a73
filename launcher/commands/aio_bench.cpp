// `dscpp aio-bench`: hands its arguments to dscpp-aio-bench. The benchmark needs the async I/O
// engine (offload/, liburing, libaio), and the launcher links no engine code, so it lives in
// its own executable installed next to dscpp (as dscpp-runtime does for `dscpp estimate --model`).
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

}  // namespace dscpp::launcher
