// compare_safetensors A B [--rtol R] [--atol T] [--prefix P] [--match S] [--skip S]... [--b_prefix Q]
//                     [--minus_from C] [--normwise 1] [--complete 1]: compares every tensor of A
// with B's of the same name (Q + name with --b_prefix), prints the largest absolute and relative
// differences, and exits 1 when any element differs by more than atol + rtol·|b| (both 0 =
// bit-for-bit), or with --normwise by more than atol + rtol·max|b| of its tensor (the scale of
// a gradient's rounding error). --prefix keeps only names starting with P, --match only names
// containing S; --skip leaves out names containing S. --minus_from C compares C − A instead of A
// (the gradient an SGD step of lr 1 took); --complete fails when B has a Q-prefixed tensor A
// lacks. --where R --above T compares only the elements whose B tensor R + name exceeds T in
// magnitude (e.g. Adam's results where the gradient is not ~0: there the update is
// sign(noise)·lr, and two correct implementations differ by up to 2·lr). Used by the runtime's
// system tests. `compare_safetensors --print FILE NAME` prints tensor NAME's values, one per line
// (%.9g: every fp32 value exactly), for scripts that check a number against a reference.
#include "checkpoint/safetensors.h"
#include "core/error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace dscpp;

int main(int argc, char** argv) {
  if (argc == 4 && !std::strcmp(argv[1], "--print")) {
    try {
      ckpt::SafetensorsFile f(argv[2]);
      const auto* t = f.find(argv[3]);
      if (t == nullptr) {
        std::fprintf(stderr, "compare_safetensors: %s has no tensor %s\n", argv[2], argv[3]);
        return 2;
      }
      if (t->dtype == DType::i32) {  // ids, e.g. a reference's end-of-document token
        std::vector<int32_t> v(static_cast<size_t>(t->numel));
        f.read(t->name, 0, t->numel, v.data(), DType::i32);
        for (int32_t x : v) std::printf("%d\n", x);
        return 0;
      }
      std::vector<double> v(static_cast<size_t>(t->numel));
      f.read(t->name, 0, t->numel, v.data(), DType::f64);
      for (double x : v) std::printf("%.9g\n", x);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "compare_safetensors: %s\n", e.what());
      return 2;
    }
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: compare_safetensors A B [--rtol R] [--atol T] [--prefix P] [--match S] [--skip S]...\n");
    return 2;
  }
  double rtol = 0, atol = 0;
  std::string prefix;
  std::string match;
  std::vector<std::string> skip;
  std::string b_prefix, minus_from, where;
  double above = 0;
  bool normwise = false, complete = false;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--b_prefix")) b_prefix = argv[i + 1];
    else if (!std::strcmp(argv[i], "--minus_from")) minus_from = argv[i + 1];
    else if (!std::strcmp(argv[i], "--normwise")) normwise = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--complete")) complete = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--where")) where = argv[i + 1];
    else if (!std::strcmp(argv[i], "--above")) above = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rtol")) rtol = std::atof(argv[i + 1]);
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
    std::unique_ptr<ckpt::SafetensorsFile> c;
    if (!minus_from.empty()) c = std::make_unique<ckpt::SafetensorsFile>(minus_from);
    int bad = 0;
    double worst_abs = 0, worst_rel = 0;
    std::string worst_name;
    size_t compared = 0;
    for (const auto& ta : a.tensors()) {
      if (ta.name.rfind(prefix, 0) != 0 || skipped(ta.name)) continue;
      const auto* tb = b.find(b_prefix + ta.name);
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
      b.read(b_prefix + ta.name, 0, ta.numel, vb.data(), DType::f64);
      if (c) {
        std::vector<double> vc(va.size());
        c->read(ta.name, 0, ta.numel, vc.data(), DType::f64);
        for (size_t i = 0; i < va.size(); ++i) va[i] = vc[i] - va[i];
      }
      double scale = 0;
      for (double v : vb) scale = std::max(scale, std::fabs(v));
      std::vector<double> mask;
      if (!where.empty()) {
        mask.resize(va.size());
        b.read(where + ta.name, 0, ta.numel, mask.data(), DType::f64);
      }
      int64_t over = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        if (!mask.empty() && !(std::fabs(mask[i]) > above)) continue;
        double d = std::fabs(va[i] - vb[i]);
        double rel = d / std::max(std::fabs(vb[i]), 1e-30);
        if (d > worst_abs) {
          worst_abs = d;
          worst_name = ta.name;
        }
        if (d > 0) worst_rel = std::max(worst_rel, rel);
        if (d > atol + rtol * (normwise ? scale : std::fabs(vb[i])) || std::isnan(va[i]) != std::isnan(vb[i])) ++over;
      }
      if (over) {
        std::fprintf(stderr, "%s: %lld of %lld elements outside tolerance\n", ta.name.c_str(),
                     static_cast<long long>(over), static_cast<long long>(ta.numel));
        ++bad;
      }
      ++compared;
    }
    if (complete)
      for (const auto& tb : b.tensors())
        if (tb.name.rfind(b_prefix, 0) == 0 && !a.find(tb.name.substr(b_prefix.size()))) {
          std::fprintf(stderr, "%s: only in %s\n", tb.name.c_str(), argv[2]);
          ++bad;
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
