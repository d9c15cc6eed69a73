#include "runtime/tools/gradcheck.h"

#include "core/error.h"
#include "core/log.h"
#include "device/device_select.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/frozen_params.h"
#include "runtime/model/init.h"
#include "runtime/model/plugin.h"
#include "runtime/rank_device.h"
#include "runtime/tools/model_weights.h"
#include "runtime/train/layer_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>

namespace dscpp::runtime {

int run_gradcheck(const GradcheckOptions& o) {
  // One rank and no world: the backend matters only as DSCPP_COMM_BACKEND names it (sharing a GPU).
  RankDevice rd = make_rank_device(parse_device_choice(o.device), comm_backend_setting(""));
  Device& device = *rd.device;
  rd.ops.dtype = DSCPP_F32;
  Plugin plugin(o.model);
  const std::string device_name = device.name();
  plugin.create(o.plugin_args, standalone_host(device_name, o.seed));
  const dscpp_data_desc& data = plugin.data();
  const int64_t batch = std::max<int64_t>(1, std::min(o.batch, data.train_size));

  // Frozen parameters (the model's, e.g. a LoRA model's base weights) have no gradient to check:
  // they live in a layout of their own, and the layers get null gradient pointers for them.
  const bool frozen = count_frozen(plugin.layers()).frozen_params > 0;
  const FlatLayout layout = make_flat_layout(plugin.layers(), {}, frozen ? ParamSet::trainable : ParamSet::all);
  const FlatLayout frozen_layout = frozen ? make_flat_layout(plugin.layers(), {}, ParamSet::frozen) : FlatLayout{};
  std::vector<float> params = model_weights(plugin, layout, o.seed);
  const size_t bytes = static_cast<size_t>(layout.total) * sizeof(float);
  DeviceBuffer params_d(device, bytes, MemCategory::params), grads_d(device, bytes, MemCategory::grads, true);
  device.copy_from_host(params_d.data(), params.data(), bytes);
  const size_t frozen_bytes = static_cast<size_t>(frozen_layout.total) * sizeof(float);
  DeviceBuffer frozen_d(device, std::max<size_t>(frozen_bytes, 4), MemCategory::params);
  if (frozen) {
    const std::vector<float> values = model_weights(plugin, frozen_layout, o.seed);
    device.copy_from_host(frozen_d.data(), values.data(), frozen_bytes);
  }
  LayerRunner runner(plugin, device, rd.ops, layout, batch, DType::f32, DType::f32, {}, nullptr,
                     frozen ? &frozen_layout : nullptr);
  runner.bind(params_d.data(), grads_d.data(), frozen ? frozen_d.data() : nullptr);

  // One micro-batch of the train split, on the device.
  std::vector<char> input(static_cast<size_t>(batch * data.input_numel) * 4);
  std::vector<int32_t> target(static_cast<size_t>(batch * data.target_numel));
  for (int64_t i = 0; i < batch; ++i)
    plugin.load_sample(0, i, input.data() + i * data.input_numel * 4, target.data() + i * data.target_numel);
  DeviceBuffer input_d(device, input.size(), MemCategory::buffers),
      target_d(device, target.size() * 4, MemCategory::buffers);
  device.copy_from_host(input_d.data(), input.data(), input.size());
  device.copy_from_host(target_d.data(), target.data(), target.size() * 4);
  auto loss = [&] {
    const dscpp_metrics m =
        runner.forward(input_d.data(), static_cast<const int32_t*>(target_d.data()), batch, true, o.seed);
    if (m.counted <= 0) fail("gradcheck: the loss layer counted no positions in the batch (every target ignored?)");
    return m.loss_sum / static_cast<double>(m.counted);
  };

  const double l0 = loss();
  runner.backward(1.0f);
  std::vector<float> grads(params.size());
  device.copy_to_host(grads.data(), grads_d.data(), bytes);
  std::printf("%s", fmt::format("gradcheck {}: {} layers, {} parameters ({} values), {} sample(s) of the train split "
                                "on {}, loss {:.6f}\n",
                                plugin.name(), plugin.layers().size(), layout.params.size(), layout.numel, batch,
                                device_name, l0)
                        .c_str());
  if (frozen)
    std::printf("%s", fmt::format("  {} frozen parameters ({} values) have no gradient and are not checked\n",
                                  frozen_layout.params.size(), frozen_layout.numel)
                          .c_str());

  int failed = 0;
  double worst = 0;
  std::string worst_name;
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const ParamSlot& s = layout.params[k];
    const float* g = &grads[size_t(s.offset)];
    std::vector<int64_t> order(static_cast<size_t>(s.numel));
    std::iota(order.begin(), order.end(), 0);
    const auto top =
        static_cast<size_t>(std::min<int64_t>(o.elements_per_tensor / 2 + o.elements_per_tensor % 2, s.numel));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                      [&](int64_t a, int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    std::vector<int64_t> picked(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top));
    std::mt19937_64 rng(o.seed + k);
    for (int r = 0; r < o.elements_per_tensor / 2 && s.numel > 0; ++r)
      picked.push_back(static_cast<int64_t>(rng() % uint64_t(s.numel)));
    const double scale = std::fabs(g[order[0]]);
    double err = 0;
    for (int64_t e : picked) {
      float& p = params[size_t(s.offset + e)];
      float* dev = static_cast<float*>(params_d.data()) + s.offset + e;
      const float theta = p, h = 1e-2f * std::max(1.0f, std::fabs(theta));
      const float up = theta + h, down = theta - h;
      device.copy_from_host(dev, &up, 4);
      const double lu = loss();
      device.copy_from_host(dev, &down, 4);
      const double ld = loss();
      device.copy_from_host(dev, &theta, 4);
      const double fd = (lu - ld) / (static_cast<double>(up) - static_cast<double>(down));
      err = std::max(err, std::fabs(fd - static_cast<double>(g[e])));
    }
    const bool ok = err <= 1e-2 * scale + 1e-5;
    const double rel = scale > 0 ? err / scale : 0;
    if (!ok) ++failed;
    if (rel > worst) worst = rel, worst_name = s.name;
    std::printf("%s", fmt::format("  {:<48} [{}]  max|g| {:.2e}  {} elements  max|fd - g| {:.2e} ({:.2f}%)  {}\n",
                                  s.name, fmt::join(s.shape, ", "), scale, picked.size(), err, 100 * rel,
                                  ok ? "ok" : "FAIL")
                          .c_str());
  }
  for (const LayerDecl& l : plugin.layers())
    for (const TiedParam& t : l.tied) {
      const ParamDecl& owner = plugin.layers()[size_t(t.owner_layer)].params[size_t(t.owner_param)];
      std::printf("%s", fmt::format("  {:<48} shared with {} ({})\n", t.name, owner.name,
                                    owner.frozen ? "frozen" : "checked there, both uses summed")
                            .c_str());
    }
  if (failed)
    std::printf("%s", fmt::format("gradcheck: FAILED: {} of {} parameters disagree with finite differences by more "
                                  "than 1% of their largest gradient\n",
                                  failed, layout.params.size())
                          .c_str());
  else
    std::printf("%s", fmt::format("gradcheck: all {} parameters of {} layers agree with finite differences (worst "
                                  "{:.3f}% of a tensor's largest gradient, in {})\n",
                                  layout.params.size(), plugin.layers().size(), 100 * worst,
                                  worst_name.empty() ? "-" : worst_name)
                          .c_str());
  return failed ? 1 : 0;
}

}  // namespace dscpp::runtime
