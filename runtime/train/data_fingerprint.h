// What a checkpoint records about the data it was trained on, so that resuming on other data
// is caught instead of silently continuing a sampler position that means something else: the
// splits' sizes, the sample shapes, and the SHA-256 of up to 64 train samples spread evenly
// over the split (each sample's index, input and target bytes). 64 samples cost nothing next
// to a save; hashing every sample would cost reading an epoch.
#pragma once

#include "runtime/model/plugin.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace dscpp::runtime {

struct DataFingerprint {
  int64_t train_size = 0, eval_size = 0;
  int64_t input_numel = 0, target_numel = 0;
  int64_t samples_hashed = 0;
  std::string samples_sha256;

  nlohmann::json to_json() const;
  // Throws dscpp::Error naming `where` when a field is missing or of another type.
  static DataFingerprint from_json(const nlohmann::json& j, const std::string& where);
  // What differs between the data `saved` described and this, in words ("" when nothing).
  std::string differences_from(const DataFingerprint& saved) const;
};

DataFingerprint data_fingerprint(const Plugin& plugin);

}  // namespace dscpp::runtime
