#include "runtime/observe/train_log.h"

#include "core/byte_size.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dscpp::runtime {

std::string Timers::report_and_reset() {
  static const char* order[] = {"fwd", "bwd", "bwd_allreduce", "step", "data"};
  std::string out;
  for (const char* name : order) {
    auto it = totals_.find(name);
    if (it == totals_.end()) continue;
    out += fmt::format("{}{}: {:.2f}", out.empty() ? "" : " | ", name, it->second * 1e3);
  }
  totals_.clear();
  return out;
}

std::string format_step_line(const StepReport& r) {
  std::string line = fmt::format("step {}/{} | loss {:.4f} | lr {:.3e}", r.step, r.total_steps, r.loss, r.lr);
  if (r.grad_norm >= 0) line += fmt::format(" | grad norm {:.3f}", r.grad_norm);
  line += fmt::format(" | {:.1f} samples/s", r.samples_per_s);
  if (r.tokens_per_s > 0) line += fmt::format(" | {:.0f} tokens/s", r.tokens_per_s);
  line += fmt::format(" | mem {} (peak {})", format_bytes(r.memory.total_current), format_bytes(r.memory.total_peak));
  if (r.loss_scale > 0) line += fmt::format(" | loss scale {:g}", r.loss_scale);
  if (r.skipped) line += fmt::format(" | skipped {}", r.skipped);
  if (r.elapsed_s >= 0)
    line += fmt::format(" | {} elapsed{}", format_duration(r.elapsed_s),
                        r.remaining_s >= 0 && r.step < r.total_steps
                            ? fmt::format(", ETA {}", format_duration(r.remaining_s))
                            : std::string());
  return line;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, s % 3600 / 60);
}

}  // namespace dscpp::runtime
