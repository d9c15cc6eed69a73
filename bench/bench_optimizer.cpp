// CPU AdamW step throughput, in bytes moved per second, against the machine's limit and torch.
//
// Traffic per element: read w, g, m, v and write w, m, v = 28 bytes (fp32). Measured in one run:
//   fused loop  one vectorised, threaded pass with exactly that traffic and trivial arithmetic
//               (kernels::cpu::traffic_step): the practical limit of this machine
//   dscpp AdamW runtime::Optimizer (make_optimizer, type AdamW), what the engine calls
//   torch AdamW torch.optim.AdamW (foreach when available) via bench/torch_adamw.py, same
//               thread count, when PyTorch is importable by /usr/bin/python3
// Best of --reps timed steps after a warm-up step, the fused loop and AdamW alternating. Target:
// dscpp ≥ 0.9 × fused loop.
//
//   bench_optimizer [--params N=50000000] [--threads T=2] [--reps R=10] [--all-levels]
//                   [--torch-script PATH] [--no-torch]
#include "build_config.h"
#include "configs/ds_config.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "runtime/optim/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr double kBytesPerElement = 28.0;

template <typename F>
double best_seconds(int reps, F fn) {
  fn();  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct TorchResult {
  bool ok = false;
  double seconds = 0;
  bool foreach = false;
  std::string version, message;
};

TorchResult run_torch(const std::string& script, int64_t n, int threads, int reps) {
  TorchResult r;
  const char* python = "/usr/bin/python3";
  if (FILE* f = std::fopen(python, "r")) {
    std::fclose(f);
  } else {
    r.message = "/usr/bin/python3 not found";
    return r;
  }
  std::string cmd = std::string(python) + " -c 'import torch' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    r.message = "PyTorch is not importable by /usr/bin/python3";
    return r;
  }
  cmd = std::string(python) + " '" + script + "' --params " + std::to_string(n) + " --threads " +
        std::to_string(threads) + " --reps " + std::to_string(reps) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    r.message = "popen failed";
    return r;
  }
  char line[512];
  std::string all;
  while (std::fgets(line, sizeof line, p)) {
    all += line;
    std::string s(line);
    if (s.rfind("seconds ", 0) == 0) r.seconds = std::atof(s.c_str() + 8), r.ok = true;
    if (s.rfind("foreach ", 0) == 0) r.foreach = std::atoi(s.c_str() + 8) != 0;
    if (s.rfind("torch ", 0) == 0) r.version = s.substr(6, s.find_last_not_of("\n") - 5);
  }
  int status = pclose(p);
  if (status != 0 || !r.ok) {
    r.ok = false;
    r.message = "torch_adamw.py failed: " + all;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 50'000'000;
  int threads = 2, reps = 10;
  bool torch = true, all_levels = false;
  std::string script = std::string(DSCPP_SOURCE_ROOT) + "/bench/torch_adamw.py";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--params") n = std::atoll(next().c_str());
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--torch-script") script = next();
    else if (a == "--no-torch") torch = false;
    else if (a == "--all-levels") all_levels = true;
    else {
      std::fprintf(
          stderr, "usage: %s [--params N] [--threads T] [--reps R] [--all-levels] [--torch-script PATH] [--no-torch]\n",
          argv[0]);
      return 2;
    }
  }
  dscpp::set_num_threads(threads);
  const double bytes = kBytesPerElement * static_cast<double>(n);

  auto device = dscpp::make_cpu_device();
  dscpp::DeviceBuffer wb(*device, n * sizeof(float), dscpp::MemCategory::params);
  dscpp::DeviceBuffer gb(*device, n * sizeof(float), dscpp::MemCategory::grads);
  float* w = wb.as<float>();
  float* g = gb.as<float>();
  // First touch on the pool's threads (the same chunks the steps use).
  dscpp::parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      w[i] = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
      g[i] = static_cast<float>((i * 104729) % 2001 - 1000) * 1e-4f;
    }
  }, 64);

  dscpp::config::OptimizerConfig config;
  config.type = "AdamW";
  config.kind = dscpp::config::OptimizerKind::adamw;
  config.params.lr = 1e-3;
  config.params.weight_decay = 0.01;
  auto opt = dscpp::runtime::make_optimizer(config, *device);
  int group = opt->add_group(n, {});
  auto state = opt->state(group);
  float* m = state[0].data;
  float* v = state[1].data;
  dscpp::parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {  // state pages touched by the pool too
    std::memset(m + b, 0, (e - b) * sizeof(float));
    std::memset(v + b, 0, (e - b) * sizeof(float));
  }, 64);

  std::printf("optimizer step: %lld fp32 parameters, %d threads, %.0f bytes/element, best of %d after warm-up\n",
              static_cast<long long>(n), threads, kBytesPerElement, reps);
  const std::string level = dscpp::kernels::cpu::optimizer_simd_level();
  std::printf("SIMD level: %s (available:", level.c_str());
  for (const auto& l : dscpp::kernels::cpu::optimizer_simd_levels()) std::printf(" %s", l.c_str());
  std::printf(")\n");

  // The two loops alternate rep by rep so that both see the same background load; each keeps
  // its best. (The fused loop leaves m, v in a range an Adam step handles normally: v >= 0.)
  double fused = 1e30, adam = 1e30;
  auto timed = [](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto fused_step = [&] { dscpp::kernels::cpu::traffic_step(w, g, m, v, n); };
  auto adam_step = [&] { opt->step(group, w, g, {}); };
  fused_step();  // warm-up
  adam_step();
  for (int r = 0; r < reps; ++r) {
    fused = std::min(fused, timed(fused_step));
    adam = std::min(adam, timed(adam_step));
  }

  auto gbs = [&](double s) { return bytes / s / 1e9; };
  std::printf("%-28s %8.2f ms  %7.2f GB/s\n", "fused read/write loop", fused * 1e3, gbs(fused));
  std::printf("%-28s %8.2f ms  %7.2f GB/s\n", ("dscpp AdamW (" + level + ")").c_str(), adam * 1e3, gbs(adam));
  if (all_levels) {
    for (const auto& l : dscpp::kernels::cpu::optimizer_simd_levels()) {
      if (l == level) continue;
      dscpp::kernels::cpu::set_optimizer_simd_level(l);
      double s = best_seconds(reps, [&] { opt->step(group, w, g, {}); });
      std::printf("%-28s %8.2f ms  %7.2f GB/s\n", ("dscpp AdamW (" + l + ")").c_str(), s * 1e3, gbs(s));
    }
    dscpp::kernels::cpu::set_optimizer_simd_level(level);
  }
  double ratio = fused / adam;
  std::printf("ratio dscpp AdamW / fused loop: %.3f (target >= 0.9: %s)\n", ratio, ratio >= 0.9 ? "met" : "NOT met");

  if (!torch) {
    std::printf("torch AdamW: skipped (--no-torch)\n");
    return 0;
  }
  // Free our arrays before torch allocates its own.
  opt.reset();
  wb.reset();
  gb.reset();
  TorchResult t = run_torch(script, n, threads, reps);
  if (!t.ok) {
    std::printf("torch AdamW: skipped (%s)\n", t.message.c_str());
    return 0;
  }
  std::printf("%-28s %8.2f ms  %7.2f GB/s  (torch %s, foreach %s)\n", "torch.optim.AdamW", t.seconds * 1e3,
              gbs(t.seconds), t.version.c_str(), t.foreach ? "on" : "off");
  std::printf("ratio dscpp AdamW / torch AdamW: %.2fx\n", t.seconds / adam);
  return 0;
}
