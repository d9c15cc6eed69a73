// Greedy and beam search over a decoder's next-token logits, as transformers' generate runs them
// (4.44: GenerationMixin._sample without sampling, _beam_search with BeamSearchScorer): the
// same tokens chosen, the same hypotheses kept and scored (sum of log-probabilities over
// generated_len^length_penalty), the same stopping rules (eos, max_new_tokens, and for beams
// early_stopping true / false). The model behind it is two callbacks, so the search is tested
// on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace dscpp::runtime {

struct SearchOptions {
  int64_t max_new_tokens = 32;
  int num_beams = 1;
  double length_penalty = 1.0;
  bool early_stopping = false;  // beams: stop once num_beams hypotheses are finished
  int32_t eos = -1;             // -1: none
  int32_t pad = 0;              // fed to finished sequences
  int64_t first_position = 0;   // the first token's position
  int64_t positions = 0;        // > 0: the decoder holds positions 0 … positions−1 (no step beyond)
};

struct SearchModel {
  int64_t vocab = 0;
  // Logits (n × vocab, row-major) of the next token of each of the n sequences, given their newest
  // tokens at `position` (0-based, the same for all).
  std::function<void(const std::vector<int32_t>& tokens, int64_t position, std::vector<float>& logits)> step;
  // Sequence i continues sequence from[i] (beam search reorders the decoder's caches).
  std::function<void(const std::vector<int64_t>& from)> reorder;
};

// `batch` sequences (greedy) or batch × num_beams (beams, each batch's beams consecutive), all
// starting from `start` at options.first_position. Returns each batch entry's generated tokens after `start`,
// ending with eos when the sequence ended so (beam search appends it as transformers does when the
// best hypothesis is shorter than the limit).
std::vector<std::vector<int32_t>> search(const SearchModel& model, int64_t batch, int32_t start,
                                         const SearchOptions& options);
// Greedy continuations of prompts of any lengths (≥ 1) decoded together from first_position: each
// sequence is fed its prompt, then its own choices, one decode step for all; each gets up to
// max_new_tokens after its prompt, as if decoded alone (a decoder's batched generation).
std::vector<std::vector<int32_t>> search_prompts(const SearchModel& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const SearchOptions& options);

}  // namespace dscpp::runtime
