#include "runtime/train/data_fingerprint.h"

#include "checkpoint/checksums.h"
#include "core/dtype.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace dscpp::runtime {

namespace {
constexpr int64_t kSamples = 64;
}  // namespace

DataFingerprint data_fingerprint(const Plugin& plugin) {
  const dscpp_data_desc& d = plugin.data();
  DataFingerprint f;
  f.train_size = d.train_size;
  f.eval_size = d.eval_size;
  f.input_numel = d.input_numel;
  f.target_numel = d.target_numel;
  f.samples_hashed = std::min(kSamples, d.train_size);
  const size_t input_bytes = static_cast<size_t>(d.input_numel) * dtype_size(dtype_of(d.input_dtype));
  const size_t target_bytes = static_cast<size_t>(d.target_numel) * sizeof(int32_t);
  std::vector<unsigned char> input(input_bytes);
  std::vector<int32_t> target(static_cast<size_t>(d.target_numel));
  std::string bytes;
  for (int64_t k = 0; k < f.samples_hashed; ++k) {
    // Evenly spread, first and last included.
    const int64_t index = f.samples_hashed == 1 ? 0 : k * (d.train_size - 1) / (f.samples_hashed - 1);
    plugin.load_sample(0, index, input.data(), target.data());  // split 0: train
    bytes.append(reinterpret_cast<const char*>(&index), sizeof(index));
    bytes.append(reinterpret_cast<const char*>(input.data()), input_bytes);
    bytes.append(reinterpret_cast<const char*>(target.data()), target_bytes);
  }
  f.samples_sha256 = ckpt::sha256_hex(bytes);
  return f;
}

nlohmann::json DataFingerprint::to_json() const {
  return {{"train_size", train_size},     {"eval_size", eval_size},           {"input_numel", input_numel},
          {"target_numel", target_numel}, {"samples_hashed", samples_hashed}, {"samples_sha256", samples_sha256}};
}

DataFingerprint DataFingerprint::from_json(const nlohmann::json& j, const std::string& where) {
  DataFingerprint f;
  try {
    f.train_size = j.at("train_size").get<int64_t>();
    f.eval_size = j.at("eval_size").get<int64_t>();
    f.input_numel = j.at("input_numel").get<int64_t>();
    f.target_numel = j.at("target_numel").get<int64_t>();
    f.samples_hashed = j.at("samples_hashed").get<int64_t>();
    f.samples_sha256 = j.at("samples_sha256").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: data: {}", where, e.what());
  }
  return f;
}

std::string DataFingerprint::differences_from(const DataFingerprint& saved) const {
  std::vector<std::string> out;
  auto differ = [&](const char* what, int64_t then, int64_t now) {
    if (then != now) out.push_back(fmt::format("{} {} then, {} now", what, then, now));
  };
  differ("train split", saved.train_size, train_size);
  differ("eval split", saved.eval_size, eval_size);
  differ("input elements per sample", saved.input_numel, input_numel);
  differ("target elements per sample", saved.target_numel, target_numel);
  if (out.empty() && saved.samples_sha256 != samples_sha256)
    out.push_back(fmt::format("the same sizes, but {} samples spread over the train split differ (SHA-256 {} then, "
                              "{} now)",
                              samples_hashed, saved.samples_sha256, samples_sha256));
  std::string text;
  for (const std::string& s : out) text += (text.empty() ? "" : "; ") + s;
  return text;
}

}  // namespace dscpp::runtime
