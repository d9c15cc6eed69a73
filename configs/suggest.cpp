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
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
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
