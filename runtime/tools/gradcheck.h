// `dscpp gradcheck PLUGIN.so [--device cpu|cuda-sim] [--seed N] [-- plugin args]` (the runtime's
// --gradcheck): the plugin's backward against central finite differences of its own loss, for
// every parameter of every layer, on one micro-batch of its train split, and a verdict.
//
// The loss L is the mean cross-entropy the loss layer reports (accumulated in fp64 over fp32
// logits). For each parameter tensor the elements with the largest analytic gradients and a few
// at random are perturbed by ±h; (L(θ+h) − L(θ−h))/2h is compared with the gradient of one
// backward (loss_grad 1). A tensor passes when max |fd − g| ≤ 1% of its largest |g| (plus 1e-5):
// the fp32 noise of L (~1e-7 relative) over 2h, with h = 1e-2·max(1, |θ|), stays near 1e-5,
// and the truncation error h²·L'''/6 is of the same order, while a wrong backward is off by
// tens of percent. A parameter shared between layers is checked once, with both uses summed.
// Parameters come from the plugin's init_from (e.g. --from_hf) where it has one, else from
// their init rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct GradcheckOptions {
  std::string model;  // the plugin
  std::vector<std::string> plugin_args;
  std::string device = "cpu";
  uint64_t seed = 42;
  int64_t batch = 2;              // samples of the micro-batch (at most the train split)
  int elements_per_tensor = 6;    // half the largest gradients, half at random
};

// Prints a line per parameter and the verdict; returns 0 when every tensor passes, 1 otherwise.
int run_gradcheck(const GradcheckOptions& options);

}  // namespace dscpp::runtime
