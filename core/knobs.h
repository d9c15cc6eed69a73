// Every DSCPP_* environment variable dscpp's programs read, declared once (as NCCL declares its
// parameters in one table): the name, what it takes, what unset means and what it does. Code
// reads one only through knob(), which refuses a name the table lacks, so this table is the
// complete list — `dscpp report` prints it with the values set now, docs/knobs.md lists it, and
// tests/unit/test_knobs.cpp checks that no source names a DSCPP_ variable the table lacks and
// that the document and the table agree.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace dscpp {

struct Knob {
  std::string_view name;
  std::string_view area;    // communication, compute, memory, training, launch, logging, testing
  std::string_view values;  // what it takes
  std::string_view unset;   // what happens when it is not set
  std::string_view what;    // what it does, in a sentence
  bool secret = false;      // its value is never printed (`dscpp report` shows that it is set)
};

std::span<const Knob> knobs();

// getenv for a declared knob: the value, or nullptr when unset. Throws dscpp::Error for a name
// that is not in the table (a dscpp bug: declare it there).
const char* knob(std::string_view name);

// A declared knob as a whole number of at least `min`: nullopt when unset; throws dscpp::Error
// naming the variable, `what` it takes and what it holds otherwise.
std::optional<int64_t> knob_int(std::string_view name, int64_t min, std::string_view what);

// The table as text, one knob per paragraph, with "(set: VALUE)" where the variable is set in
// this process's environment ("(set)" for a secret one): what `dscpp report` prints.
std::string format_knobs();

}  // namespace dscpp
