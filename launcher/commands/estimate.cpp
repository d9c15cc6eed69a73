// `dscpp estimate`. The launcher never loads a plugin itself (plugins may carry engine code,
// and the launcher must not link it), so `--model` runs `dscpp-runtime --describe_model`
// and reads the JSON line it prints.
#include "configs/json.h"
#include "core/error.h"
#include "core/zero_estimate.h"
#include "launcher/commands/commands.h"
#include "launcher/env_export.h"
#include "launcher/job_commands.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace dscpp::launcher {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxCount = 9007199254740992.0;  // 2^53: counts stay exact in double

void check_count(const char* flag, double v) {
  if (!std::isfinite(v) || v < 0 || v != std::floor(v) || v > kMaxCount)
    fail("{} must be a whole number of parameters between 0 and 2^53, got {}", flag, v);
}

// Runs `command` through the shell; returns its stdout (stderr passes through to the user).
std::string run_capture(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) fail("cannot run {}", command);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int raw = pclose(p);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0);
  return out;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, end + 1 - begin);
}

const config::JsonValue& member(const config::JsonValue& v, std::string_view key, config::JsonValue::Kind kind,
                                const std::string& what) {
  const config::JsonValue* m = v.find(key);
  if (!m || m->kind != kind)
    fail("{}: expected \"{}\" ({}) in the model description, found {}", what, key,
         config::kind_name(kind), m ? m->describe() : "nothing");
  return *m;
}

struct DescribedModel {
  std::string name;
  ModelParamCounts counts;
  int64_t frozen = 0;  // of counts.total: parameters that do not train
};

DescribedModel describe_model(const std::string& model, const EstimateArgs& a) {
  const std::vector<std::string>& plugin_args = a.plugin_args;
  if (!fs::is_regular_file(model)) fail("--model {}: no such file", model);
  std::string runtime = runtime_executable(self_executable());
  if (!fs::exists(runtime))
    fail("--model needs dscpp-runtime, which loads the plugin; it is not at {} (install it next to "
         "dscpp)",
         runtime);
  std::string cmd =
      shell_quote(runtime) + " --model " + shell_quote(fs::absolute(model).string()) + " --describe_model";
  for (const auto& f : a.freeze) cmd += " --freeze " + shell_quote(f);
  for (const auto& t : a.train_only) cmd += " --train_only " + shell_quote(t);
  if (!plugin_args.empty()) {
    cmd += " --";
    for (const auto& a : plugin_args) cmd += " " + shell_quote(a);
  }
  int status = 0;
  std::string out = run_capture(cmd, &status);
  if (status != 0)
    fail("could not read the parameter counts of {}: `{}` exited with status {} (its messages are above)", model, cmd,
         status);
  // The description is the last line: plugins may print to stdout before it.
  std::string line = last_line(out);
  if (line.empty() || line.front() != '{')
    fail("`{}` printed no model description (expected a JSON line, got '{}')", cmd, line);
  config::JsonValue v;
  try {
    v = config::parse_json(line);
  } catch (const config::JsonSyntaxError& e) {
    fail("the model description from dscpp-runtime is not JSON ({} at column {}): {}", e.what(),
         e.loc.column, line);
  }
  using Kind = config::JsonValue::Kind;
  DescribedModel d;
  d.name = member(v, "model", Kind::string, model).text;
  std::vector<LayerParamCount> layers;
  for (const auto& layer : member(v, "layers", Kind::array, model).items)
    layers.push_back(
        {member(layer, "name", Kind::string, model).text, member(layer, "params", Kind::integer, model).integer});
  d.counts = count_model_params(std::move(layers));
  if (const config::JsonValue* f = v.find("frozen_params"); f && f->kind == Kind::integer) d.frozen = f->integer;
  // A mismatch means dscpp and dscpp-runtime disagree on the format (different builds).
  int64_t total = member(v, "total_params", Kind::integer, model).integer;
  int64_t largest = member(v, "largest_layer_params", Kind::integer, model).integer;
  if (total != d.counts.total || largest != d.counts.largest_layer)
    fail("{}: dscpp-runtime reports {} params (largest layer {}) but its layers sum to {} (largest {}); "
         "are dscpp and dscpp-runtime from the same build?",
         model, total, largest, d.counts.total, d.counts.largest_layer);
  return d;
}

// DeepSpeed's estimators count every parameter as trained. Frozen ones (requires_grad=False)
// keep only their 16-bit copy, partitioned at stage 3: the no-offload rows with the gradient and
// optimizer terms (DeepSpeed's 18 bytes per parameter spread over the GPUs, of which the 16-bit
// copy is 2) taken over the trained parameters only.
std::string frozen_note(const EstimateArgs& a, double total, double largest, double frozen) {
  const double gpus = static_cast<double>(a.num_gpus_per_node * a.num_nodes), trained = total - frozen;
  const double gpu = a.stage == 2 ? 2 * total + std::trunc(18 * trained / gpus)
                                  : 4 * largest + std::trunc((18 * trained + 2 * frozen) / gpus);
  return fmt::format(
      "Frozen: {:.0f} of the {:.0f} parameters do not train ({:.2f}% train); without offload, with gradients and "
      "optimizer state for the trained ones only: {:.2f}GB per GPU (the table above counts every parameter as "
      "trained, as DeepSpeed's estimator does)\n",
      frozen, total, 100 * trained / total, gpu / 1073741824.0);
}

}  // namespace

int run_estimate(const EstimateArgs& a) {
  if (a.stage != 2 && a.stage != 3)
    fail("--stage must be 2 or 3 (DeepSpeed has memory estimators for ZeRO-2 and ZeRO-3), got {}",
         a.stage);
  if (a.num_gpus_per_node < 1) fail("--num_gpus_per_node must be at least 1, got {}", a.num_gpus_per_node);
  if (a.num_nodes < 1) fail("--num_nodes must be at least 1, got {}", a.num_nodes);
  if (!std::isfinite(a.additional_buffer_factor) || a.additional_buffer_factor <= 0)
    fail("--additional_buffer_factor must be a positive number (DeepSpeed's default 1.5), got {}",
         a.additional_buffer_factor);
  if (a.stage == 2 && a.largest_layer_params)
    fail("--largest_layer_params is used by --stage 3 only (ZeRO-2 keeps whole parameters on every GPU)");

  if (a.model.empty() && (!a.freeze.empty() || !a.train_only.empty()))
    fail("--freeze and --train_only choose parameters of a --model");
  double total = 0, largest = 0, frozen = 0;
  if (!a.model.empty()) {
    if (a.total_params || a.largest_layer_params)
      fail("give either --model (which supplies both counts) or --total_params/--largest_layer_params, "
           "not both");
    DescribedModel d = describe_model(a.model, a);
    total = static_cast<double>(d.counts.total);
    largest = static_cast<double>(d.counts.largest_layer);
    frozen = static_cast<double>(d.frozen);
    std::printf("Model %s (%s): %lld total params in %zu layers; largest layer %s with %lld params.\n", d.name.c_str(),
                a.model.c_str(), static_cast<long long>(d.counts.total), d.counts.layers.size(),
                d.counts.largest_layer_name.c_str(), static_cast<long long>(d.counts.largest_layer));
  } else {
    if (!a.plugin_args.empty()) fail("arguments after -- go to a plugin, but no --model was given");
    if (!a.total_params)
      fail("give --total_params P (the model's parameter count) or --model M.so to read it from a plugin");
    check_count("--total_params", *a.total_params);
    total = *a.total_params;
    if (a.stage == 3) {
      if (!a.largest_layer_params)
        fail("--stage 3 needs --largest_layer_params L (the parameter count of the biggest layer, which "
             "ZeRO-3 gathers whole on each GPU), or --model M.so to read both counts from a plugin");
      check_count("--largest_layer_params", *a.largest_layer_params);
      largest = *a.largest_layer_params;
      if (largest > total)
        fail("--largest_layer_params {} exceeds --total_params {}", largest, total);
    }
  }
  std::string table = a.stage == 2 ? format_zero2_estimates(total, a.num_gpus_per_node, a.num_nodes,
                                                            a.additional_buffer_factor)
                                   : format_zero3_estimates(total, largest, a.num_gpus_per_node, a.num_nodes,
                                                            a.additional_buffer_factor);
  std::fputs(table.c_str(), stdout);
  if (frozen > 0) std::fputs(frozen_note(a, total, largest, frozen).c_str(), stdout);
  return 0;
}

}  // namespace dscpp::launcher
