#include "runtime/train/search.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dscpp::runtime {
namespace {

// Every sequence reads its prompt a token a step, then its own choices: a shorter prompt starts
// choosing while a longer one is still read, all at the same position (one decode call a step).
std::vector<std::vector<int32_t>> greedy(const SearchModel& m, const std::vector<std::vector<int32_t>>& prompts,
                                         const SearchOptions& o) {
  const size_t n = prompts.size();
  std::vector<std::vector<int32_t>> out(n);
  if (o.max_new_tokens <= 0) return out;
  std::vector<int32_t> tokens(n);
  std::vector<bool> finished(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (prompts[i].empty()) fail("generate: an empty prompt");
    tokens[i] = prompts[i][0];
  }
  std::vector<float> logits;
  for (int64_t step = 0;; ++step) {
    const int64_t pos = o.first_position + step;
    m.step(tokens, pos, logits);
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (size_t(step) + 1 < prompts[i].size()) {
        tokens[i] = prompts[i][size_t(step) + 1];
        all = false;
        continue;
      }
      const float* row = logits.data() + i * size_t(m.vocab);
      const int32_t next = finished[i] ? o.pad : static_cast<int32_t>(std::max_element(row, row + m.vocab) - row);
      if (!finished[i]) {
        out[i].push_back(next);
        finished[i] =
            next == o.eos || int64_t(out[i].size()) == o.max_new_tokens || (o.positions > 0 && pos + 1 >= o.positions);
      }
      tokens[i] = next;
      all = all && finished[i];
    }
    if (all) break;
  }
  return out;
}

// log_softmax of one row, in fp32 as torch computes it.
void log_softmax(const float* x, int64_t n, float* y) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const float lse = static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - lse;
}

// One batch entry's finished hypotheses (transformers' BeamHypotheses).
struct Hypotheses {
  int beams;
  double length_penalty;
  bool early_stopping;
  std::vector<std::pair<double, std::vector<int32_t>>> kept;  // (score, tokens after the start)
  double worst = 1e9;
  bool done = false;

  void add(std::vector<int32_t> tokens, float sum_logprobs, int64_t generated_len) {
    const double score = sum_logprobs / std::pow(static_cast<double>(generated_len), length_penalty);
    if (static_cast<int>(kept.size()) < beams || score > worst) {
      kept.emplace_back(score, std::move(tokens));
      if (static_cast<int>(kept.size()) > beams) {
        std::vector<std::pair<double, size_t>> order;
        for (size_t i = 0; i < kept.size(); ++i) order.emplace_back(kept[i].first, i);
        std::sort(order.begin(), order.end());
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(order[0].second));
        worst = order[1].first;
      } else {
        worst = std::min(score, worst);
      }
    }
  }
  bool finished(float best_sum_logprobs, int64_t generated_len) const {
    if (static_cast<int>(kept.size()) < beams) return false;
    if (early_stopping) return true;
    return worst >= best_sum_logprobs / std::pow(static_cast<double>(generated_len), length_penalty);
  }
  // The best, as transformers' stable sort then pop picks it: the last added among equal scores.
  const std::vector<int32_t>& best() const {
    size_t b = 0;
    for (size_t i = 1; i < kept.size(); ++i)
      if (kept[i].first >= kept[b].first) b = i;
    return kept[b].second;
  }
};

std::vector<std::vector<int32_t>> beam(const SearchModel& m, int64_t batch, int32_t start, const SearchOptions& o) {
  const int64_t K = o.num_beams, V = m.vocab, n = batch * K;
  std::vector<float> scores(static_cast<size_t>(n), 0.0f);  // each beam's sum of log-probabilities
  for (int64_t i = 0; i < n; ++i)
    if (i % K != 0) scores[size_t(i)] = -1e9f;  // the first step's candidates come from beam 0 alone
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(n));
  std::vector<Hypotheses> hyps(static_cast<size_t>(batch),
                               Hypotheses{int(K), o.length_penalty, o.early_stopping, {}, 1e9, false});
  std::vector<int32_t> tokens(static_cast<size_t>(n), start);
  std::vector<float> logits, logp(static_cast<size_t>(V)), cand(static_cast<size_t>(K * V));
  std::vector<int64_t> idx(static_cast<size_t>(K * V));
  int64_t length = 1;  // the decoder's input so far, start included (transformers' cur_len before the step)
  while (length < 1 + o.max_new_tokens) {
    m.step(tokens, o.first_position + length - 1, logits);
    std::vector<float> next_scores(static_cast<size_t>(n));
    std::vector<int32_t> next_tokens(static_cast<size_t>(n));
    std::vector<int64_t> from(static_cast<size_t>(n));
    for (int64_t b = 0; b < batch; ++b) {
      Hypotheses& h = hyps[size_t(b)];
      if (h.done) {
        for (int64_t k = 0; k < K; ++k) next_scores[size_t(b * K + k)] = 0, next_tokens[size_t(b * K + k)] = o.pad;
        continue;
      }
      for (int64_t k = 0; k < K; ++k) {
        log_softmax(logits.data() + (b * K + k) * V, V, logp.data());
        for (int64_t v = 0; v < V; ++v) cand[size_t(k * V + v)] = logp[size_t(v)] + scores[size_t(b * K + k)];
      }
      // torch.topk(2K, sorted): the largest first, the lower index first among equals.
      const size_t keep = std::min<size_t>(size_t(2 * K), cand.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(keep), idx.end(), [&](int64_t a, int64_t c) {
        return cand[size_t(a)] > cand[size_t(c)] || (cand[size_t(a)] == cand[size_t(c)] && a < c);
      });
      int64_t filled = 0;
      for (size_t r = 0; r < keep && filled < K; ++r) {
        const int64_t beam_of = idx[r] / V, beam_index = b * K + beam_of;
        const int32_t tok = static_cast<int32_t>(idx[r] % V);
        if (tok == o.eos) {
          if (int64_t(r) >= K) continue;
          h.add(seqs[size_t(beam_index)], cand[size_t(idx[r])], length);
          continue;
        }
        next_scores[size_t(b * K + filled)] = cand[size_t(idx[r])];
        next_tokens[size_t(b * K + filled)] = tok;
        from[size_t(b * K + filled)] = beam_index;
        ++filled;
      }
      if (filled < K) fail("beam search: fewer than {} candidates besides the eos token", K);
      h.done = h.finished(cand[size_t(idx[0])], length);
    }
    std::vector<std::vector<int32_t>> next(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      next[size_t(i)] = seqs[size_t(from[size_t(i)])];
      next[size_t(i)].push_back(next_tokens[size_t(i)]);
    }
    seqs = std::move(next);
    scores = next_scores;
    tokens = next_tokens;
    m.reorder(from);
    ++length;
    if (std::all_of(hyps.begin(), hyps.end(), [](const Hypotheses& h) { return h.done; })) break;
  }
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < batch; ++b) {
    Hypotheses& h = hyps[size_t(b)];
    if (!h.done)
      for (int64_t k = 0; k < K; ++k) h.add(seqs[size_t(b * K + k)], scores[size_t(b * K + k)], length - 1);
    std::vector<int32_t> best = h.best();
    if (int64_t(best.size()) < o.max_new_tokens && o.eos >= 0) best.push_back(o.eos);
    out.push_back(std::move(best));
  }
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> search(const SearchModel& model, int64_t batch, int32_t start,
                                         const SearchOptions& options) {
  if (options.num_beams < 1) fail("generate: --num_beams must be at least 1, not {}", options.num_beams);
  if (options.num_beams == 1) return greedy(model, std::vector<std::vector<int32_t>>(size_t(batch), {start}), options);
  return beam(model, batch, start, options);
}

std::vector<std::vector<int32_t>> search_prompts(const SearchModel& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const SearchOptions& options) {
  if (options.num_beams != 1)
    fail(
        "generate: --num_beams {}: beam search starts every sequence from one token (an encoder-decoder's decoder "
        "start); a decoder's prompts are continued greedily",
        options.num_beams);
  return greedy(model, prompts, options);
}

}  // namespace dscpp::runtime
