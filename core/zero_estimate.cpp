#include "core/zero_estimate.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dscpp {
namespace {

// Python's int(x) for a float: truncation toward zero; refuses what int64 cannot hold.
int64_t py_int(double x) {
  if (!std::isfinite(x) || std::fabs(x) >= 9.2e18)
    fail("memory estimate {} bytes is out of range (inputs too large?)", x);
  return static_cast<int64_t>(std::trunc(x));
}

double as_double(int64_t v) { return static_cast<double>(v); }

const char* device(bool offloaded) { return offloaded ? "cpu " : "none"; }

std::string header(int64_t gpus_per_node, int64_t num_nodes) {
  return fmt::format(
      "Estimated memory needed for params, optim states and gradients for a:\n"
      "HW: Setup with {} {}, {} {} per node.\n",
      num_nodes, num_nodes > 1 ? "nodes" : "node", gpus_per_node, gpus_per_node > 1 ? "GPUs" : "GPU");
}

std::string row(const MemEstimate& m, const std::string& options) {
  const double gib = 1073741824.0;  // 2**30: DeepSpeed's "GB" is GiB
  return fmt::format(" {:7.2f}GB | {:6.2f}GB | {}\n", as_double(m.cpu_bytes) / gib, as_double(m.gpu_bytes) / gib,
                     options);
}

const char* kColumns = "  per CPU  |  per GPU |   Options\n";

}  // namespace

MemEstimate estimate_zero2(double P, int64_t g, int64_t n, bool offload_optimizer, double f) {
  const int64_t total_gpus = n * g;
  double cpu, gpu;
  if (offload_optimizer) {
    gpu = 2 * P;
    cpu = P * as_double(std::max<int64_t>(4 * total_gpus, 16)) * f;
  } else {
    gpu = 2 * P + as_double(py_int(18 * P / as_double(total_gpus)));
    cpu = P * 4 * as_double(g) * f;
  }
  return {py_int(cpu), py_int(gpu)};
}

MemEstimate estimate_zero3(double P, double Lp, int64_t g, int64_t n, bool offload_param, bool offload_optimizer,
                           bool zero_init, double f) {
  const int64_t total_gpus = n * g;
  const double gpus_factor = 1 / as_double(n);
  const double largest_layer_memory = 4 * Lp;
  double cpu, gpu;
  if (offload_optimizer && offload_param) {
    gpu = largest_layer_memory;
    cpu = zero_init ? P * 18 * gpus_factor * f : P * std::max(as_double(4 * g), 18 * gpus_factor) * f;
  } else if (offload_optimizer) {
    gpu = largest_layer_memory + as_double(py_int(2 * P / as_double(total_gpus)));
    cpu = zero_init ? P * 16 * gpus_factor * f : P * std::max(as_double(4 * g), 16 * gpus_factor) * f;
  } else {
    gpu = largest_layer_memory + as_double(py_int(18 * P / as_double(total_gpus)));
    cpu = zero_init ? Lp * 4 * as_double(g) * f : P * 4 * as_double(g) * f;
  }
  return {py_int(cpu), py_int(gpu)};
}

std::string format_zero2_estimates(double P, int64_t g, int64_t n, double f) {
  std::string out = header(g, n);
  out += fmt::format("SW: Model with {}M total params.\n", py_int(P / 1e6));
  out += kColumns;
  for (bool offload : {true, false})
    out += row(estimate_zero2(P, g, n, offload, f), fmt::format("offload_optimizer={}", device(offload)));
  return out;
}

std::string format_zero3_estimates(double P, double Lp, int64_t g, int64_t n, double f) {
  std::string out = header(g, n);
  out += fmt::format("SW: Model with {}M total params, {}M largest layer params.\n", py_int(P / 1e6),
                     py_int(Lp / 1e6));
  out += kColumns;
  // DeepSpeed's loop order: optimizer offload outer, param offload inner (skipping
  // param-on-CPU with optimizer-on-GPU), zero_init 1 before 0.
  for (bool offload_optimizer : {true, false})
    for (bool offload_param : {true, false}) {
      if (!offload_optimizer && offload_param) continue;
      for (bool zero_init : {true, false})
        out += row(estimate_zero3(P, Lp, g, n, offload_param, offload_optimizer, zero_init, f),
                   fmt::format("offload_param={}, offload_optimizer={}, zero_init={}", device(offload_param),
                               device(offload_optimizer), zero_init ? 1 : 0));
    }
  return out;
}

ModelParamCounts count_model_params(std::vector<LayerParamCount> layers) {
  ModelParamCounts c;
  for (size_t i = 0; i < layers.size(); ++i) {
    c.total += layers[i].params;
    if (i == 0 || layers[i].params > c.largest_layer) {
      c.largest_layer = layers[i].params;
      c.largest_layer_name = layers[i].name;
    }
  }
  c.layers = std::move(layers);
  return c;
}

}  // namespace dscpp
