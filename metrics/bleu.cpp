#include "metrics/bleu.h"

#include "core/error.h"
#include "metrics/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

namespace dscpp::metrics {

namespace {

// str.replace(from, to): one pass, left to right, matches not overlapping, the output not
// searched again.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(s.substr(at, hit - at));
    out.append(to);
  }
  out.append(s.substr(at));
  return out;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_period_or_comma(char c) {
  return c == '.' || c == ',';
}

// The first rule's class: ASCII punctuation and symbols except the apostrophe, comma, dash
// and period, plus the space; each becomes " c ".
bool is_split_symbol(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) || (u >= 0x28 && u <= 0x2B) ||
         (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

// re.sub of a two-character pattern (first, second) with `emit` writing the replacement: the
// leftmost match wins and the scan resumes after it, as Python's re.sub does. Bytes stand in for
// code points, with the same output: only "not a digit" holds a non-ASCII character, so a match
// can end on a multi-byte character's last byte (the bytes before it were copied unchanged) or
// take its lead byte in second place (the bytes after it are copied unchanged next).
template <typename First, typename Second, typename Emit>
std::string sub_pairs(const std::string& s, First first, Second second, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string join_tokens(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::string_view token : split_py(s)) {
    if (!out.empty()) out += ' ';
    out.append(token);
  }
  return out;
}

// An n-gram of at most kBleuOrder token ids, unused slots -1: within one segment, equal
// n-grams have equal keys.
struct NgramKey {
  std::array<int32_t, kBleuOrder> ids;
  bool operator==(const NgramKey& o) const { return ids == o.ids; }
};
struct NgramHash {
  size_t operator()(const NgramKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t id : k.ids) h = (h ^ static_cast<uint32_t>(id)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
using NgramCounts = std::unordered_map<NgramKey, int64_t, NgramHash>;

// Token ids shared by a segment's hypothesis and references.
class Vocabulary {
 public:
  std::vector<int32_t> ids(const std::string& text) {
    std::vector<int32_t> out;
    for (std::string_view token : split_py(text))
      out.push_back(ids_.try_emplace(std::string(token), static_cast<int32_t>(ids_.size())).first->second);
    return out;
  }

 private:
  std::unordered_map<std::string, int32_t> ids_;
};

NgramCounts count_ngrams(const std::vector<int32_t>& tokens) {
  NgramCounts counts;
  const size_t len = tokens.size();
  for (size_t n = 1; n <= kBleuOrder; ++n) {
    for (size_t i = 0; i + n <= len; ++i) {
      NgramKey key;
      key.ids.fill(-1);
      std::copy(tokens.begin() + i, tokens.begin() + i + n, key.ids.begin());
      ++counts[key];
    }
  }
  return counts;
}

int order_of(const NgramKey& k) {
  return static_cast<int>(std::count_if(k.ids.begin(), k.ids.end(), [](int32_t id) { return id >= 0; }));
}

// sacreBLEU's log, which takes log(0) as -9999999999 rather than failing; the score is then 0.
double floored_log(double x) {
  return x == 0.0 ? -9999999999.0 : std::log(x);
}

}  // namespace

BleuTokenizer parse_bleu_tokenizer(std::string_view name) {
  if (name == "13a") return BleuTokenizer::k13a;
  if (name == "none") return BleuTokenizer::kNone;
  fail("BLEU tokenizer {:?}: expected 13a or none", std::string(name));
}

BleuSmooth parse_bleu_smooth(std::string_view name) {
  if (name == "exp") return BleuSmooth::kExp;
  if (name == "none") return BleuSmooth::kNone;
  if (name == "floor") return BleuSmooth::kFloor;
  if (name == "add-k") return BleuSmooth::kAddK;
  fail("BLEU smoothing method {:?}: expected exp, none, floor or add-k", std::string(name));
}

std::string_view bleu_smooth_name(BleuSmooth smooth) {
  switch (smooth) {
    case BleuSmooth::kExp:
      return "exp";
    case BleuSmooth::kNone:
      return "none";
    case BleuSmooth::kFloor:
      return "floor";
    case BleuSmooth::kAddK:
      return "add-k";
  }
  return "?";
}

std::string tokenize_13a(std::string_view line) {
  std::string s = replace_all(line, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  // One entity after the other, so "&amp;lt;" ends as "<" as it does in sacreBLEU.
  if (s.find('&') != std::string::npos) {
    s = replace_all(s, "&quot;", "\"");
    s = replace_all(s, "&amp;", "&");
    s = replace_all(s, "&lt;", "<");
    s = replace_all(s, "&gt;", ">");
  }
  std::string padded;
  padded.reserve(s.size() * 2 + 2);
  padded += ' ';
  for (char c : s) {
    if (is_split_symbol(c))
      padded.append({' ', c, ' '});
    else
      padded += c;
  }
  padded += ' ';
  auto not_digit = [](char c) { return !is_digit(c); };
  auto is_dash = [](char c) { return c == '-'; };
  // A period or comma is split off unless a digit precedes it, and unless a digit follows it;
  // each rule runs over the whole line before the next, as sacreBLEU's regexes do.
  s = sub_pairs(padded, not_digit, is_period_or_comma, [](std::string& o, char a, char b) {
    o.append({a, ' ', b, ' '});
  });
  s = sub_pairs(s, is_period_or_comma, not_digit, [](std::string& o, char a, char b) { o.append({' ', a, ' ', b}); });
  s = sub_pairs(s, is_digit, is_dash, [](std::string& o, char a, char b) { o.append({a, ' ', b, ' '}); });
  return join_tokens(s);
}

BleuStats& BleuStats::operator+=(const BleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kBleuOrder; ++n) {
    correct[n] += other.correct[n];
    total[n] += other.total[n];
  }
  return *this;
}

std::array<int64_t, 2 + 2 * kBleuOrder> BleuStats::flat() const {
  std::array<int64_t, 2 + 2 * kBleuOrder> v{};
  v[0] = hyp_len;
  v[1] = ref_len;
  for (int n = 0; n < kBleuOrder; ++n) {
    v[2 + n] = correct[n];
    v[2 + kBleuOrder + n] = total[n];
  }
  return v;
}

BleuStats BleuStats::from_flat(const std::array<int64_t, 2 + 2 * kBleuOrder>& v) {
  BleuStats s;
  s.hyp_len = v[0];
  s.ref_len = v[1];
  for (int n = 0; n < kBleuOrder; ++n) {
    s.correct[n] = v[2 + n];
    s.total[n] = v[2 + kBleuOrder + n];
  }
  return s;
}

std::string BleuScore::format(int width, bool score_only) const {
  const std::string sc = fmt::format("{:.{}f}", score, width);
  if (score_only) return sc;
  return fmt::format("BLEU = {} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})", sc,
                     precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio, hyp_len, ref_len);
}

BleuScore compute_bleu(const BleuStats& stats, const BleuOptions& options) {
  BleuScore r;
  r.hyp_len = stats.hyp_len;
  r.ref_len = stats.ref_len;
  r.counts = stats.correct;
  r.totals = stats.total;
  r.ratio = stats.ref_len ? static_cast<double>(stats.hyp_len) / static_cast<double>(stats.ref_len) : 0.0;
  r.bp = 1.0;
  if (stats.hyp_len < stats.ref_len)
    r.bp = stats.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(stats.ref_len) / static_cast<double>(stats.hyp_len))
                             : 0.0;
  if (std::all_of(stats.correct.begin(), stats.correct.end(), [](int64_t c) { return c == 0; })) return r;

  const double k = options.smooth_value.value_or(options.smooth == BleuSmooth::kFloor ? 0.1 : 1.0);
  double smooth_mteval = 1.0;
  int eff_order = kBleuOrder;
  for (int n = 0; n < kBleuOrder; ++n) {
    double correct = static_cast<double>(stats.correct[n]);
    double total = static_cast<double>(stats.total[n]);
    if (options.smooth == BleuSmooth::kAddK && n > 0) {
      correct += k;
      total += k;
    }
    if (total == 0) break;
    if (options.effective_order) eff_order = n + 1;
    if (correct == 0) {
      if (options.smooth == BleuSmooth::kExp) {
        smooth_mteval *= 2;
        r.precisions[n] = 100.0 / (smooth_mteval * total);
      } else if (options.smooth == BleuSmooth::kFloor) {
        r.precisions[n] = 100.0 * k / total;
      }
    } else {
      r.precisions[n] = 100.0 * correct / total;
    }
  }
  // Summed in order, one term after the other, as Python's sum() of floats does before 3.12.
  double log_sum = 0.0;
  for (int n = 0; n < eff_order; ++n) log_sum += floored_log(r.precisions[n]);
  r.score = r.bp * std::exp(log_sum / eff_order);
  return r;
}

std::string bleu_preprocess(std::string_view text, const BleuOptions& options) {
  std::string lowered;
  if (options.lowercase) {
    lowered = lower_py(text);
    text = lowered;
  }
  text = rstrip_py(text);
  return options.tokenizer == BleuTokenizer::k13a ? tokenize_13a(text) : std::string(text);
}

BleuStats bleu_segment_stats(std::string_view hypothesis, const std::vector<std::string_view>& references,
                             const BleuOptions& options) {
  if (references.empty()) fail("BLEU: a segment needs at least one reference");
  Vocabulary vocab;
  NgramCounts ref_max;
  std::vector<int64_t> ref_lens;
  for (std::string_view ref : references) {
    const std::vector<int32_t> tokens = vocab.ids(bleu_preprocess(ref, options));
    ref_lens.push_back(static_cast<int64_t>(tokens.size()));
    for (const auto& [key, count] : count_ngrams(tokens)) {
      int64_t& best = ref_max[key];
      best = std::max(best, count);
    }
  }
  const std::vector<int32_t> hyp = vocab.ids(bleu_preprocess(hypothesis, options));
  BleuStats s;
  s.hyp_len = static_cast<int64_t>(hyp.size());
  int64_t closest_diff = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = std::llabs(s.hyp_len - len);
    if (closest_diff == -1 || diff < closest_diff || (diff == closest_diff && len < s.ref_len)) {
      closest_diff = diff;
      s.ref_len = len;
    }
  }
  for (const auto& [key, count] : count_ngrams(hyp)) {
    const int n = order_of(key) - 1;
    s.total[n] += count;
    const auto hit = ref_max.find(key);
    if (hit != ref_max.end()) s.correct[n] += std::min(count, hit->second);
  }
  return s;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const BleuOptions& options) {
  if (references.empty()) fail("BLEU: no reference stream given");
  for (size_t r = 0; r < references.size(); ++r)
    if (references[r].size() != hypotheses.size())
      fail("BLEU: {} hypotheses but reference stream {} has {} segments", hypotheses.size(), r + 1,
           references[r].size());
  Bleu bleu(options);
  std::vector<std::string_view> refs(references.size());
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    for (size_t r = 0; r < references.size(); ++r) refs[r] = references[r][i];
    bleu.add(hypotheses[i], refs);
  }
  return bleu.score();
}

}  // namespace dscpp::metrics
