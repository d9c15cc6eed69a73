// compare_safetensors A B [--rtol R] [--atol T] [--prefix P] [--match S] [--skip S]...: compares every
// tensor two safetensors files have in common (and that both have the same names), prints
// the largest absolute and relative differences, and exits 1 when any element differs by
// more than atol + rtol·|b| (both 0 = bit-for-bit). --prefix keeps only names starting with
// P, --match only names containing S; --skip leaves out names containing S. Used by the
// runtime's system tests.
#include "checkpoint/safetensors.h"
#include "core/error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace dscpp;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: compare_safetensors A B [--rtol R] [--atol T] [--prefix P] [--match S] [--skip S]...\n");
    return 2;
  }
  double rtol = 0, atol = 0;
  std::string prefix;
  std::string match;
  std::vector<std::string> skip;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rtol")) rtol = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--atol")) atol = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prefix")) prefix = argv[i + 1];
    else if (!std::strcmp(argv[i], "--match")) match = argv[i + 1];
    else if (!std::strcmp(argv[i], "--skip")) skip.push_back(argv[i + 1]);
  }
  auto skipped = [&](const std::string& name) {
    if (name.find(match) == std::string::npos) return true;
    for (const auto& s : skip)
      if (name.find(s) != std::string::npos) return true;
    return false;
  };
  try {
    ckpt::SafetensorsFile a(argv[1]), b(argv[2]);
    int bad = 0;
    double worst_abs = 0, worst_rel = 0;
    std::string worst_name;
    size_t compared = 0;
    for (const auto& ta : a.tensors()) {
      if (ta.name.rfind(prefix, 0) != 0 || skipped(ta.name)) continue;
      const auto* tb = b.find(ta.name);
      if (!tb) {
        std::fprintf(stderr, "%s: only in %s\n", ta.name.c_str(), argv[1]);
        ++bad;
        continue;
      }
      if (tb->shape != ta.shape) {
        std::fprintf(stderr, "%s: shapes differ\n", ta.name.c_str());
        ++bad;
        continue;
      }
      std::vector<double> va(static_cast<size_t>(ta.numel)), vb(static_cast<size_t>(ta.numel));
      a.read(ta.name, 0, ta.numel, va.data(), DType::f64);
      b.read(ta.name, 0, ta.numel, vb.data(), DType::f64);
      int64_t over = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        double d = std::fabs(va[i] - vb[i]);
        double rel = d / std::max(std::fabs(vb[i]), 1e-30);
        if (d > worst_abs) {
          worst_abs = d;
          worst_name = ta.name;
        }
        if (d > 0) worst_rel = std::max(worst_rel, rel);
        if (d > atol + rtol * std::fabs(vb[i]) || std::isnan(va[i]) != std::isnan(vb[i])) ++over;
      }
      if (over) {
        std::fprintf(stderr, "%s: %lld of %lld elements outside tolerance\n", ta.name.c_str(),
                     static_cast<long long>(over), static_cast<long long>(ta.numel));
        ++bad;
      }
      ++compared;
    }
    std::printf("%s", fmt::format("compared {} tensors: max |a-b| {:.3g} (in {}), max relative {:.3g}; {}\n", compared,
                                  worst_abs, worst_name.empty() ? "-" : worst_name, worst_rel,
                                  bad ? "DIFFERENT" : "within tolerance").c_str());
    return bad || compared == 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_safetensors: %s\n", e.what());
    return 2;
  }
}
