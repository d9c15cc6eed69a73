// Internal to configs/: the visitor that fills typed structs from a JsonValue tree.
#pragma once

#include "configs/load.h"
#include "configs/schema.h"

#include <map>
#include <string>
#include <vector>

namespace dscpp::config {

// An "auto" the reader met; resolve.cpp fills it from RunFacts or reports it.
struct PendingAuto {
  std::string path;
  Location loc;
  bool strict_section = false;  // DeepSpeed's pydantic would fall back to the default
};

struct ReadState {
  Diagnostics& diagnostics;
  std::map<std::string, Origin>& origins;
  std::vector<PendingAuto>& autos;
};

// Reads `root` into `out`. Unknown keys, wrong types and out-of-range values become errors;
// fields not present keep their defaults.
void read_config(const JsonValue& root, DsConfig& out, ReadState& state);

// Joins a section path and a key: ("zero_optimization", "stage") -> "zero_optimization.stage".
std::string join_path(const std::string& parent, std::string_view key);

}  // namespace dscpp::config
