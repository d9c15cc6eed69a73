#include "runtime/train/fault_injection.h"

#include "core/error.h"
#include "core/knobs.h"

#include <cstdint>
#include <string>

namespace dscpp::runtime {

std::set<int64_t> parse_step_list(std::string_view text, std::string_view variable) {
  std::set<int64_t> out;
  for (std::string_view rest = text; !rest.empty();) {
    size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    size_t dash = item.find('-', 1);
    try {
      int64_t lo = std::stoll(item.substr(0, dash)),
              hi = dash == std::string::npos ? lo : std::stoll(item.substr(dash + 1));
      for (int64_t v = lo; v <= hi; ++v) out.insert(v);
    } catch (const std::exception&) {
      fail("{}: '{}' is not a step or a range of steps (expected e.g. 3,5,9-12)", variable, item);
    }
  }
  return out;
}

namespace {

struct FaultSettings {
  std::set<int64_t> overflow_steps;
  std::set<int64_t> nan_grad_steps, nan_loss_steps, nan_weight_steps;
  int64_t divergence_step = -1;
  bool die_before_commit = false;
  bool fail_slowly = false;
  int64_t crash_step = -1;
};

FaultSettings read_settings() {
  FaultSettings f;
  if (const char* v = knob("DSCPP_INJECT_OVERFLOW")) f.overflow_steps = parse_step_list(v);
  if (const char* v = knob("DSCPP_INJECT_NAN"); v && *v) {
    const std::string_view text(v);
    if (text.rfind("grads:", 0) == 0)
      f.nan_grad_steps = parse_step_list(text.substr(6), "DSCPP_INJECT_NAN");
    else if (text.rfind("loss:", 0) == 0)
      f.nan_loss_steps = parse_step_list(text.substr(5), "DSCPP_INJECT_NAN");
    else if (text.rfind("weights:", 0) == 0)
      f.nan_weight_steps = parse_step_list(text.substr(8), "DSCPP_INJECT_NAN");
    else
      fail("DSCPP_INJECT_NAN='{}': expected grads:STEPS, loss:STEPS or weights:STEPS (e.g. grads:20-40)", v);
  }
  if (auto step = knob_int("DSCPP_INJECT_DIVERGENCE", INT64_MIN, "a step number")) f.divergence_step = *step;
  if (const char* v = knob("DSCPP_FAULT_INJECT"); v && *v) {
    if (std::string_view(v) == "save_before_commit")
      f.die_before_commit = true;
    else if (std::string_view(v) == "fail_slowly")
      f.fail_slowly = true;
    else if (std::string_view(v).rfind("crash_after_step:", 0) == 0 &&
             parse_step_list(std::string_view(v).substr(17), "DSCPP_FAULT_INJECT").size() == 1)
      f.crash_step = *parse_step_list(std::string_view(v).substr(17), "DSCPP_FAULT_INJECT").begin();
    else
      fail("DSCPP_FAULT_INJECT='{}': expected save_before_commit, fail_slowly or crash_after_step:N", v);
  }
  return f;
}

const FaultSettings& settings() {
  static const FaultSettings s = read_settings();
  return s;
}

}  // namespace

void check_fault_settings() { settings(); }

bool slow_exit_injected() {
  try {
    return settings().fail_slowly;
  } catch (const std::exception&) {
    return false;
  }
}

void inject_fault(FaultPoint point, int64_t step, int rank, int world_size, const std::function<void()>& fault) {
  const FaultSettings& s = settings();
  const bool last_rank = rank == world_size - 1;
  bool now = false;
  switch (point) {
    case FaultPoint::gradients_reduced: now = last_rank && s.overflow_steps.count(step) > 0; break;
    case FaultPoint::gradients_nan: now = last_rank && s.nan_grad_steps.count(step) > 0; break;
    case FaultPoint::loss_nan: now = last_rank && s.nan_loss_steps.count(step) > 0; break;
    case FaultPoint::weights_nan: now = last_rank && s.nan_weight_steps.count(step) > 0; break;
    case FaultPoint::step_end: now = last_rank && step == s.divergence_step; break;
    case FaultPoint::checkpoint_commit: now = s.die_before_commit; break;
    case FaultPoint::rank_failure: now = last_rank && step == 2 && s.fail_slowly; break;
    case FaultPoint::crash:
      now = step == s.crash_step;
      break;
  }
  if (now) fault();
}

}  // namespace dscpp::runtime
