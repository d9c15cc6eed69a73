// The `dscpp` subcommands other than launching (which arrives with the launcher proper).
// CLI parsing lives in main.cpp only: CLI11 is expensive to compile.
#pragma once

#include <string>

#include "configs/load.h"

namespace dscpp::launcher {

struct ConfigCheckArgs {
  std::string file;
  config::RunFacts facts;
  bool json = false;   // print the effective config as JSON instead of the table
  bool quiet = false;  // print only problems
};

// Prints the effective config (stdout) or the problems (stderr). Returns the exit status:
// 0 valid, 1 invalid.
int run_config_check(const ConfigCheckArgs& args);
// Prints every key of the schema with its default.
int run_config_keys();
// Prints what this build contains and what this machine offers (`ds_report`'s role).
int run_report();

}  // namespace dscpp::launcher
