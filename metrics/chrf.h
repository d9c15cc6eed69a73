// chrF and chrF++ as sacreBLEU 2.x computes them (its CHRF class): character n-gram F-scores
// (and word n-grams for chrF++) over code points, whitespace left out, the best-scoring
// reference per segment, orders averaged over those both sides have. Statistics add up per
// segment as BLEU's do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::metrics {

struct ChrfOptions {
  int char_order = 6;
  int word_order = 0;  // 2 makes chrF++
  int beta = 2;        // recall counts beta times as much as precision
  bool lowercase = false;
  bool whitespace = false;     // keep whitespace inside character n-grams
  bool eps_smoothing = false;  // chrF++.py's epsilon smoothing instead of the effective order
};

// [hypothesis n-grams, reference n-grams, matches] per order, character orders first; a
// segment's or a sum's. Sums are elementwise.
using ChrfStats = std::vector<int64_t>;

struct ChrfScore {
  double score = 0;  // 0..100
  int beta = 2;
  int word_order = 0;

  // "chrF2", "chrF2++".
  std::string name() const;
  // sacreBLEU's str(score): "chrF2 = 56.78", or only the score.
  std::string format(int width = 2, bool score_only = false) const;
};

double chrf_f_score(const ChrfStats& stats, const ChrfOptions& options);
ChrfStats chrf_segment_stats(std::string_view hypothesis, const std::vector<std::string_view>& references,
                             const ChrfOptions& options);

// Corpus chrF built up segment by segment.
class Chrf {
 public:
  explicit Chrf(ChrfOptions options = {});
  void add(std::string_view hypothesis, const std::vector<std::string_view>& references);
  void add_stats(const ChrfStats& stats);
  const ChrfStats& stats() const { return stats_; }
  ChrfScore score() const;

 private:
  ChrfOptions options_;
  ChrfStats stats_;
};

}  // namespace dscpp::metrics
