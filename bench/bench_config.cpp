// Config loading cost: dscpp's full load (parse with locations, strict schema, auto
// resolution, rules) against nlohmann::json::parse of the same text, measured in the same
// run. The ratio says what strictness costs over a plain parse; the absolute time says it
// does not matter at start-up.
//   bench_config [CONFIG...]   (default: every template)
#include "build_config.h"
#include "configs/load.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

template <typename F>
double best_seconds_per_call(F fn, int calls) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
    best = std::min(best, s);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) files.emplace_back(argv[i]);
  if (files.empty())
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(DSCPP_SOURCE_ROOT) / "configs/templates"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::printf("%-28s %8s %14s %16s %7s\n", "config", "bytes", "dscpp load us", "nlohmann parse us", "ratio");
  double sum_ratio = 0;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream s;
    s << in.rdbuf();
    std::string text = s.str();
    dscpp::config::RunFacts facts;
    facts.world_size = 8;
    volatile size_t sink = 0;
    double ours = best_seconds_per_call(
        [&] { sink = sink + dscpp::config::load_config_text(text, "b.json", facts).origins.size(); }, 2000);
    double base = best_seconds_per_call([&] { sink = sink + nlohmann::json::parse(text).size(); }, 2000);
    sum_ratio += ours / base;
    std::printf("%-28s %8zu %14.1f %16.1f %6.2fx\n", f.filename().string().c_str(), text.size(), ours * 1e6, base * 1e6,
                ours / base);
  }
  std::printf("mean ratio dscpp load / nlohmann::json::parse: %.2fx\n", sum_ratio / static_cast<double>(files.size()));
  return 0;
}
