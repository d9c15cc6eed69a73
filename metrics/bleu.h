// Corpus BLEU as sacreBLEU 2.x computes it (its BLEU class with default arguments, and its
// options): the 13a tokenizer of mteval-v13a, n-grams up to 4 clipped by the references' highest
// counts, the brevity penalty from the closest reference length, and its four smoothing methods.
// Scores are kept as sufficient statistics per segment (`BleuStats`), which add up: an evaluation
// adds segments as they are generated, ranks add their sums, and the score comes from the total.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::metrics {

inline constexpr int kBleuOrder = 4;

enum class BleuTokenizer { k13a, kNone };
enum class BleuSmooth { kExp, kNone, kFloor, kAddK };

// "13a", "none" / "exp", "none", "floor", "add-k"; throws dscpp::Error naming the choices.
BleuTokenizer parse_bleu_tokenizer(std::string_view name);
BleuSmooth parse_bleu_smooth(std::string_view name);
std::string_view bleu_smooth_name(BleuSmooth smooth);

// mteval-v13a's tokenization as sacreBLEU's Tokenizer13a does it: `<skipped>` removed, "-\n"
// joined, newlines as spaces, four HTML entities unescaped, then punctuation and symbols split
// off, except periods and commas between digits and dashes not after a digit. Tokens joined by
// single spaces.
std::string tokenize_13a(std::string_view line);

struct BleuOptions {
  bool lowercase = false;
  BleuTokenizer tokenizer = BleuTokenizer::k13a;
  BleuSmooth smooth = BleuSmooth::kExp;
  // floor's and add-k's value; unset: 0.1 for floor, 1 for add-k (Chen and Cherry's).
  std::optional<double> smooth_value;
  // Average only the orders the hypotheses reach (sacreBLEU's sentence-level BLEU turns it on).
  bool effective_order = false;
};

// The sufficient statistics of one segment or a sum of them, in sacreBLEU's order when flat:
// hypothesis length, reference length, matches per order, hypothesis n-grams per order.
struct BleuStats {
  int64_t hyp_len = 0;
  int64_t ref_len = 0;  // per segment, the reference length closest to the hypothesis's
  std::array<int64_t, kBleuOrder> correct{};
  std::array<int64_t, kBleuOrder> total{};

  BleuStats& operator+=(const BleuStats& other);
  std::array<int64_t, 2 + 2 * kBleuOrder> flat() const;
  static BleuStats from_flat(const std::array<int64_t, 2 + 2 * kBleuOrder>& v);
};

struct BleuScore {
  double score = 0;                             // 0..100
  std::array<double, kBleuOrder> precisions{};  // percent
  double bp = 0;
  int64_t hyp_len = 0;
  int64_t ref_len = 0;
  double ratio = 0;                          // hyp_len / ref_len; 0 without references
  std::array<int64_t, kBleuOrder> counts{};  // matches per order, before smoothing
  std::array<int64_t, kBleuOrder> totals{};  // hypothesis n-grams per order

  // sacreBLEU's str(score) with `width` decimals for the score ("BLEU = 34.21 65.1/40.2/28.3/20.0
  // (BP = 0.950 ratio = 0.951 hyp_len = 1234 ref_len = 1298)"), or only the score.
  std::string format(int width = 2, bool score_only = false) const;
};

// The score of summed statistics (sacreBLEU's BLEU.compute_bleu).
BleuScore compute_bleu(const BleuStats& stats, const BleuOptions& options);

// A segment as the options prepare it: lowercased, trailing whitespace stripped, tokenized.
std::string bleu_preprocess(std::string_view text, const BleuOptions& options);

// Segment statistics: hypothesis n-grams against the highest count of each in any reference,
// and the reference length closest to the hypothesis's (the shorter one on a tie). Needs at
// least one reference.
BleuStats bleu_segment_stats(std::string_view hypothesis, const std::vector<std::string_view>& references,
                             const BleuOptions& options);

// Corpus BLEU built up segment by segment.
class Bleu {
 public:
  explicit Bleu(BleuOptions options = {}) : options_(options) {}
  void add(std::string_view hypothesis, const std::vector<std::string_view>& references) {
    stats_ += bleu_segment_stats(hypothesis, references, options_);
  }
  void add_stats(const BleuStats& stats) { stats_ += stats; }
  const BleuStats& stats() const { return stats_; }
  BleuScore score() const { return compute_bleu(stats_, options_); }
  const BleuOptions& options() const { return options_; }

 private:
  BleuOptions options_;
  BleuStats stats_;
};

// Every segment at once: hypotheses[i] against references[r][i] for each reference stream r
// (sacreBLEU's corpus_bleu). Throws dscpp::Error when a stream's length differs.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const BleuOptions& options = {});

}  // namespace dscpp::metrics
