#include "configs/load.h"
#include "core/edit_distance.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::config {
namespace {

// No key or value name is longer; a longer word gets no suggestion rather than an O(n·m) search.
constexpr size_t kLongestSuggestible = 128;

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() > kLongestSuggestible) return {};
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t dist = edit_distance(word, c);
    if (dist < best_distance) best_distance = dist, best = c;
  }
  if (best.empty() || word.empty()) return {};
  // Close enough: a third of the longer word (at least 2 edits), or one is a prefix of the
  // other ("offload" for "offload_optimizer", "stage3_prefetch" for "stage3_prefetch_bucket_size").
  size_t limit = std::max<size_t>(2, std::max(word.size(), best.size()) / 3);
  if (best_distance <= limit) return best;
  for (const auto& c : candidates) {
    if (word.size() >= 4 && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0)) return c;
  }
  return {};
}

}  // namespace dscpp::config
