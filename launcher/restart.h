// Whole-job restarts (`dscpp --max_restarts K`, torchrun's elastic restarts without changing
// the world size): when a rank fails, every rank is stopped and the whole job starts again
// with the same plan, up to K times. A stop the user asked for (SIGINT/SIGTERM to dscpp) is
// never restarted. The runners stay unaware: each attempt is one ordinary run.
#pragma once

#include "launcher/launch_plan.h"

#include <functional>
#include <string>

namespace dscpp::launcher {

// How one attempt of the job ended.
struct AttemptResult {
  int exit_code = 0;     // 0, the failure's code (128+N for signal N), or 130/143 when stopped
  bool stopped = false;  // ended by a stop request (signal to dscpp), not by a failure
  std::string failure;   // what failed, e.g. "rank 2 on node1 exited with code 3" (when exit_code != 0)
};

// What every rank of attempt `restart` (0 = the first) gets on top of the plan's variables:
// DSCPP_RESTART_COUNT (the runtime resumes from the newest checkpoint when it is > 0) and
// torchrun's TORCHELASTIC_RESTART_COUNT / TORCHELASTIC_MAX_RESTARTS.
EnvList restart_env(int restart, int max_restarts);

// Runs attempt(0); while an attempt ends with a failure (not a stop) and restarts remain, says
// "dscpp: <failure>; restarting the job (restart n of K)" on err_fd and runs attempt(n).
// Returns the last attempt's exit code; when restarts ran out (K > 0) it first says
// "dscpp: <failure>; no restarts left (K used)". An exception from attempt() propagates.
int run_with_restarts(int max_restarts, const std::function<AttemptResult(int restart)>& attempt, int err_fd = 2);

}  // namespace dscpp::launcher
