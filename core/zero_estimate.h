// DeepSpeed's ZeRO memory estimators (estimate_zero2/3_model_states_mem_needs and their
// *_all_cold table printers), reproduced to the digit.
//
// Inputs as DeepSpeed takes them: P = total parameters, Lp = parameters of the largest layer
// (stage 3), g = GPUs per node, n = nodes, f = additional_buffer_factor (DeepSpeed: 1.5).
// Every expression is evaluated in double, left to right as DeepSpeed writes it, and
// int()-truncated toward zero exactly where DeepSpeed truncates, so the bytes (and the
// printed GiB with two decimals) are DeepSpeed's.
//
// These count model states only (fp16 params, fp32 master, Adam moments, gradients); not
// activations, temporary buffers or fragmentation. Both the launcher (`dscpp estimate`) and
// the runtime use them, hence core/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp {

struct MemEstimate {
  int64_t cpu_bytes = 0;  // per node
  int64_t gpu_bytes = 0;  // per GPU
};

// ZeRO-2: optimizer state offloaded to the CPU (`offload_optimizer=cpu`) or not.
MemEstimate estimate_zero2(double total_params, int64_t gpus_per_node, int64_t num_nodes, bool offload_optimizer,
                           double additional_buffer_factor = 1.5);

// ZeRO-3. DeepSpeed has no row for offload_param=cpu with offload_optimizer=none; its
// function treats that case as none/none, and so does this one.
MemEstimate estimate_zero3(double total_params, double largest_layer_params, int64_t gpus_per_node, int64_t num_nodes,
                           bool offload_param, bool offload_optimizer, bool zero_init,
                           double additional_buffer_factor = 1.5);

// The text DeepSpeed's estimate_zero{2,3}_model_states_mem_needs_all_cold print, byte for
// byte, newline-terminated. An offloaded device prints as "cpu " (the enum formatted to width
// 4, as Python <= 3.10 renders it and as DeepSpeed's docs show); Python >= 3.11 would print
// "OffloadDeviceEnum.cpu", which nobody wants to read.
std::string format_zero2_estimates(double total_params, int64_t gpus_per_node, int64_t num_nodes,
                                   double additional_buffer_factor = 1.5);
std::string format_zero3_estimates(double total_params, double largest_layer_params, int64_t gpus_per_node,
                                   int64_t num_nodes, double additional_buffer_factor = 1.5);

// A model's parameter counts as the estimators want them: P = the sum over layers (a plugin's
// parameters never share storage), Lp = the largest layer's own count (DeepSpeed's
// non-recursive per-module count; a plugin's layers do not nest).
struct LayerParamCount {
  std::string name;
  int64_t params = 0;
};

struct ModelParamCounts {
  int64_t total = 0;
  int64_t largest_layer = 0;
  std::string largest_layer_name;  // the first layer with the largest count; "" without layers
  std::vector<LayerParamCount> layers;
};

ModelParamCounts count_model_params(std::vector<LayerParamCount> layers);

}  // namespace dscpp
