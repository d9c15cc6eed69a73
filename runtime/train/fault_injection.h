// Faults the tests inject, behind one hook. The settings come from the environment, read once
// (DSCPP_INJECT_OVERFLOW, DSCPP_INJECT_NAN, DSCPP_INJECT_DIVERGENCE, DSCPP_FAULT_INJECT: core/knobs.h says what
// each takes); the engine and the checkpoint writer only name the points where a fault may
// happen and what it does there, so no injection rule lives in their code.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string_view>

namespace dscpp::runtime {

enum class FaultPoint {
  gradients_reduced,  // before the overflow check of a step: DSCPP_INJECT_OVERFLOW's steps, last rank
  gradients_nan,      // before the non-finite check of a step: DSCPP_INJECT_NAN=grads:'s steps, last rank
  loss_nan,           // a step's loss as the rank reports it: DSCPP_INJECT_NAN=loss:'s steps, last rank
  weights_nan,        // after a step's update: DSCPP_INJECT_NAN=weights:'s steps, last rank (the save's guard)
  step_end,           // after a step: DSCPP_INJECT_DIVERGENCE's step, last rank
  checkpoint_commit,  // every file of a save written, not yet committed: DSCPP_FAULT_INJECT=save_before_commit
  rank_failure,       // after step 2: DSCPP_FAULT_INJECT=fail_slowly, last rank
  crash,              // after a step (and its save): DSCPP_FAULT_INJECT=crash_after_step:N, every rank
};

// Whether DSCPP_FAULT_INJECT=fail_slowly asked the failing rank to linger 1 s before exiting,
// after its communicators closed: the race in which a peer notices first (the launcher's blame test).
bool slow_exit_injected();

// Runs `fault` when the environment asked for one at `point` of `step` (1-based, as logged) on
// `rank` of `world_size`. Throws dscpp::Error naming the variable when its value is malformed.
void inject_fault(FaultPoint point, int64_t step, int rank, int world_size, const std::function<void()>& fault);

// Reads and checks the settings now, so that a malformed value stops the run at start-up.
void check_fault_settings();

// A step list: "3,4,9-12" → {3, 4, 9, 10, 11, 12}; fails naming `variable` and the bad item.
std::set<int64_t> parse_step_list(std::string_view text, std::string_view variable = "DSCPP_INJECT_OVERFLOW");

}  // namespace dscpp::runtime
