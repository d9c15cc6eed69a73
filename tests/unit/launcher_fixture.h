// Helpers shared by the launch-plan tests (test_launcher_plan.cpp: hostfile, include/exclude,
// SLURM; test_launcher_env.cpp: exported environment, rank numbering, world info).
#pragma once

#include "core/error.h"
#include "launcher/env_export.h"
#include "launcher/resources.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>

namespace launcher_test {

using namespace dscpp::launcher;
namespace fs = std::filesystem;

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dscpp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// {w0:[0,1], w1:[2]} — the notation of DeepSpeed's launcher documentation.
inline std::string show(const ResourcePool& pool) {
  std::string out = "{";
  for (const auto& h : pool) {
    out += (out.size() > 1 ? ", " : "") + h.host + ":[";
    for (size_t i = 0; i < h.slots.size(); ++i) out += (i ? "," : "") + std::to_string(h.slots[i]);
    out += "]";
  }
  return out + "}";
}

inline std::string show(const EnvList& env) {
  std::string out;
  for (const auto& [k, v] : env) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dscpp-plan-" + std::to_string(getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

// Output of a shell command, and whether it exited 0.
inline std::pair<std::string, bool> run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {"", false};
  std::array<char, 4096> buf{};
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  return {out, pclose(p) == 0};
}

}  // namespace launcher_test
