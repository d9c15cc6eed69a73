// The knob table (core/knobs.h) is the whole list of DSCPP_* environment variables: every name a
// source of the project spells as a string literal is declared there, every declared one is
// read (or set) somewhere, nothing but core/knobs.cpp calls getenv on a DSCPP_ name, and
// docs/knobs.md lists exactly the table's names.
#include "build_config.h"
#include "core/error.h"
#include "core/knobs.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using namespace dscpp;

namespace {

const fs::path kRoot = DSCPP_SOURCE_ROOT;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The project's C++ and CUDA sources (tests, build directories and dot-directories left out).
std::vector<fs::path> sources() {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(kRoot); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name == "tests" || name.starts_with("build") || name.starts_with("."))) {
      it.disable_recursion_pending();
      continue;
    }
    const std::string ext = it->path().extension().string();
    if (it->is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".cu" || ext == ".cuh" || ext == ".c"))
      out.push_back(it->path());
  }
  return out;
}

std::set<std::string> declared() {
  std::set<std::string> names;
  for (const Knob& k : knobs()) names.insert(std::string(k.name));
  return names;
}

}  // namespace

TEST_CASE("every DSCPP_ variable a source names is declared, and every declared one is used", "[knobs]") {
  const std::set<std::string> table = declared();
  REQUIRE(table.size() == knobs().size());  // no name twice
  const std::regex literal("\"(DSCPP_[A-Z0-9_]+)\"");
  const std::regex raw_getenv("getenv\\(\\s*\"DSCPP_");
  std::set<std::string> named;
  const auto files = sources();
  REQUIRE(files.size() > 100);
  for (const fs::path& f : files) {
    const std::string text = read(f);
    for (std::sregex_iterator m(text.begin(), text.end(), literal), end; m != end; ++m) {
      const std::string name = (*m)[1];
      named.insert(name);
      INFO(f.string() << " names " << name);
      CHECK(table.count(name) == 1);
    }
    INFO(f.string() << " reads a DSCPP_ variable with getenv instead of knob()");
    CHECK_FALSE(std::regex_search(text, raw_getenv));
  }
  for (const std::string& name : table) {
    INFO(name << " is declared but no source names it");
    CHECK(named.count(name) == 1);
  }
}

TEST_CASE("docs/knobs.md lists exactly the table", "[knobs]") {
  const std::string doc = read(kRoot / "docs" / "knobs.md");
  REQUIRE_FALSE(doc.empty());
  std::set<std::string> rows;
  const std::regex row("\\n\\| `(DSCPP_[A-Z0-9_]+)` \\|");
  for (std::sregex_iterator m(doc.begin(), doc.end(), row), end; m != end; ++m) rows.insert((*m)[1]);
  CHECK(rows == declared());
}

TEST_CASE("knob() reads declared variables and refuses others", "[knobs]") {
  ::setenv("DSCPP_LOG_LEVEL", "warn", 1);
  CHECK(std::string(knob("DSCPP_LOG_LEVEL")) == "warn");
  CHECK(format_knobs().find("DSCPP_LOG_LEVEL (logging) (set: warn)") != std::string::npos);
  ::unsetenv("DSCPP_LOG_LEVEL");
  CHECK(knob("DSCPP_LOG_LEVEL") == nullptr);
  CHECK_THROWS_AS(knob("DSCPP_NOT_A_KNOB"), Error);
}

TEST_CASE("knob_int reads a whole number and names the variable for anything else", "[knobs]") {
  ::unsetenv("DSCPP_MAX_NONFINITE_STEPS");
  CHECK_FALSE(knob_int("DSCPP_MAX_NONFINITE_STEPS", 1, "a positive whole number").has_value());
  ::setenv("DSCPP_MAX_NONFINITE_STEPS", "5", 1);
  CHECK(knob_int("DSCPP_MAX_NONFINITE_STEPS", 1, "a positive whole number") == 5);
  for (const char* bad : {"0", "-2", "3x", "", "99999999999999999999"}) {
    ::setenv("DSCPP_MAX_NONFINITE_STEPS", bad, 1);
    CHECK_THROWS_WITH(knob_int("DSCPP_MAX_NONFINITE_STEPS", 1, "a positive whole number"),
                      Catch::Contains(std::string("DSCPP_MAX_NONFINITE_STEPS='") + bad +
                                      "': expected a positive whole number"));
  }
  ::unsetenv("DSCPP_MAX_NONFINITE_STEPS");
}
