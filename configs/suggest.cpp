#include "configs/load.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::config {
namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

// Optimal-string-alignment distance (Damerau-Levenshtein without repeated edits of one
// substring), case-insensitive: transposed letters are the commonest config typo.
// Three rows of the table are all the recurrence needs, so memory is O(|b|).
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<size_t> before(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

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
