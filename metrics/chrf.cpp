#include "metrics/chrf.h"

#include "core/error.h"
#include "metrics/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace dscpp::metrics {

namespace {

using Counts = std::unordered_map<std::string, int64_t>;

bool is_ascii_punct(char c) {
  return std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").find(c) != std::string_view::npos;
}

// Character n-grams of orders 1..max_order over code points; whitespace dropped first unless kept.
std::vector<Counts> char_ngrams(std::string_view line, int max_order, bool whitespace) {
  std::string text;
  if (whitespace) {
    text = line;
  } else {
    for (std::string_view word : split_py(line)) text.append(word);
  }
  std::vector<size_t> at;  // the byte offset of each code point, and the end
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    at.push_back(i);
    code_point_at(text, i, &n);
  }
  at.push_back(text.size());
  const size_t len = at.size() - 1;
  std::vector<Counts> out(static_cast<size_t>(max_order));
  for (size_t n = 1; n <= static_cast<size_t>(max_order); ++n)
    for (size_t i = 0; i + n <= len; ++i) ++out[n - 1][text.substr(at[i], at[i + n] - at[i])];
  return out;
}

// chrF++'s words: punctuation split off a word's end, or else off its start, once.
std::vector<std::string> chrf_words(std::string_view line) {
  std::vector<std::string> out;
  for (std::string_view w : split_py(line)) {
    if (code_point_count(w) == 1) {
      out.emplace_back(w);
    } else if (is_ascii_punct(w.back())) {
      out.emplace_back(w.substr(0, w.size() - 1));
      out.emplace_back(w.substr(w.size() - 1));
    } else if (is_ascii_punct(w.front())) {
      out.emplace_back(w.substr(0, 1));
      out.emplace_back(w.substr(1));
    } else {
      out.emplace_back(w);
    }
  }
  return out;
}

Counts word_ngrams(const std::vector<std::string>& words, size_t n) {
  Counts out;
  for (size_t i = 0; i + n <= words.size(); ++i) {
    std::string key = words[i];
    for (size_t k = 1; k < n; ++k) key += ' ' + words[i + k];
    ++out[key];
  }
  return out;
}

std::vector<Counts> all_ngrams(std::string_view line, const ChrfOptions& o) {
  std::vector<Counts> out = char_ngrams(line, o.char_order, o.whitespace);
  if (o.word_order > 0) {
    const std::vector<std::string> words = chrf_words(line);
    for (int n = 1; n <= o.word_order; ++n) out.push_back(word_ngrams(words, static_cast<size_t>(n)));
  }
  return out;
}

}  // namespace

std::string ChrfScore::name() const {
  return fmt::format("chrF{}{}", beta, std::string(word_order, '+'));
}

std::string ChrfScore::format(int width, bool score_only) const {
  const std::string sc = fmt::format("{:.{}f}", score, width);
  return score_only ? sc : name() + " = " + sc;
}

double chrf_f_score(const ChrfStats& stats, const ChrfOptions& o) {
  const int order = o.char_order + o.word_order;
  if (stats.size() != static_cast<size_t>(3 * order))
    fail("chrF: {} statistics for {} orders (expected {})", stats.size(), order, 3 * order);
  const double eps = 1e-16;
  const double factor = static_cast<double>(o.beta) * o.beta;
  double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (int i = 0; i < order; ++i) {
    const int64_t n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / static_cast<double>(n_hyp) : eps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / static_cast<double>(n_ref) : eps;
    const double denom = factor * prec + rec;
    score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (o.eps_smoothing) return 100 * score / order;
  if (effective_order == 0) {
    avg_prec = avg_rec = 0.0;
  } else {
    avg_prec /= effective_order;
    avg_rec /= effective_order;
  }
  if (avg_prec + avg_rec == 0) return 0.0;
  score = (1 + factor) * avg_prec * avg_rec;
  score /= (factor * avg_prec) + avg_rec;
  return 100 * score;
}

ChrfStats chrf_segment_stats(std::string_view hypothesis, const std::vector<std::string_view>& references,
                             const ChrfOptions& o) {
  if (references.empty()) fail("chrF: a segment needs at least one reference");
  auto prepared = [&](std::string_view s) { return o.lowercase ? lower_py(s) : std::string(s); };
  const std::vector<Counts> hyp = all_ngrams(prepared(hypothesis), o);
  ChrfStats best;
  double best_f = -1.0;
  for (std::string_view reference : references) {
    const std::vector<Counts> ref = all_ngrams(prepared(reference), o);
    ChrfStats stats;
    for (size_t i = 0; i < hyp.size(); ++i) {
      int64_t hyp_count = 0, ref_count = 0, match = 0;
      for (const auto& [ngram, count] : hyp[i]) {
        hyp_count += count;
        const auto hit = ref[i].find(ngram);
        if (hit != ref[i].end()) match += std::min(count, hit->second);
      }
      for (const auto& [ngram, count] : ref[i]) ref_count += count;
      // A hypothesis's n-grams count only where the reference has some of that order.
      stats.insert(stats.end(), {ref[i].empty() ? 0 : hyp_count, ref_count, match});
    }
    const double f = chrf_f_score(stats, o);
    if (f > best_f) {
      best_f = f;
      best = std::move(stats);
    }
  }
  return best;
}

Chrf::Chrf(ChrfOptions options) : options_(options), stats_(3 * (options.char_order + options.word_order), 0) {
  if (options.char_order < 1 || options.word_order < 0)
    fail("chrF: char_order {} and word_order {}: need char_order >= 1, word_order >= 0", options.char_order,
         options.word_order);
}

void Chrf::add(std::string_view hypothesis, const std::vector<std::string_view>& references) {
  add_stats(chrf_segment_stats(hypothesis, references, options_));
}

void Chrf::add_stats(const ChrfStats& stats) {
  if (stats.size() != stats_.size()) fail("chrF: {} statistics added to {}", stats.size(), stats_.size());
  for (size_t i = 0; i < stats.size(); ++i) stats_[i] += stats[i];
}

ChrfScore Chrf::score() const {
  return {chrf_f_score(stats_, options_), options_.beta, options_.word_order};
}

}  // namespace dscpp::metrics
