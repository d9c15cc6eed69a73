// Greedy and beam search (runtime/train/search.h) on toy models whose next-token distributions
// are tables, so the sequences transformers' generate would pick can be worked out by hand.
#include "runtime/train/search.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

using dscpp::runtime::search;
using dscpp::runtime::SearchModel;
using dscpp::runtime::SearchOptions;

namespace {

constexpr int32_t kEos = 1, kStart = 0, kVocab = 5;

// Next-token probabilities by the sequence's last token; the caches are the tokens themselves,
// so reorder only has to move them.
struct Toy {
  std::map<int32_t, std::vector<double>> next;  // last token → probabilities over the vocabulary
  SearchModel model() {
    SearchModel m;
    m.vocab = kVocab;
    m.step = [this](const std::vector<int32_t>& tokens, int64_t, std::vector<float>& logits) {
      logits.clear();
      for (int32_t t : tokens) {
        const std::vector<double>& p = next.at(t);
        for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
      }
    };
    m.reorder = [](const std::vector<int64_t>&) {};
    return m;
  }
};

}  // namespace

TEST_CASE("greedy takes the likeliest token and stops at eos") {
  Toy toy;
  toy.next[kStart] = {0.05, 0.05, 0.5, 0.3, 0.1};
  toy.next[2] = {0.05, 0.6, 0.05, 0.2, 0.1};
  toy.next[3] = {0.05, 0.05, 0.1, 0.7, 0.1};
  SearchOptions o;
  o.max_new_tokens = 6;
  o.eos = kEos;
  const auto out = search(toy.model(), 1, kStart, o);
  CHECK(out[0] == std::vector<int32_t>{2, 1});
}

TEST_CASE("beam search finds the likelier sequence greedy misses") {
  // Greedy: 2 (0.5) then 4 (0.4): 0.20. Beams: 3 (0.4) then 4 (0.9): 0.36.
  Toy toy;
  toy.next[kStart] = {0.0001, 0.0999, 0.5, 0.4, 0.0};
  toy.next[2] = {0.01, 0.19, 0.2, 0.2, 0.4};
  toy.next[3] = {0.01, 0.04, 0.025, 0.025, 0.9};
  toy.next[4] = {0.01, 0.97, 0.01, 0.005, 0.005};
  for (auto& [k, p] : toy.next)
    for (double& x : p) x = x > 0 ? x : 1e-6;
  SearchOptions o;
  o.max_new_tokens = 3;
  o.eos = kEos;
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{2, 4, 1});
  o.num_beams = 2;
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{3, 4, 1});
}

TEST_CASE("a hypothesis at the length limit gets no eos; a shorter one does") {
  Toy toy;
  toy.next[kStart] = {0.01, 0.01, 0.9, 0.04, 0.04};
  toy.next[2] = {0.01, 0.01, 0.9, 0.04, 0.04};
  toy.next[3] = {0.01, 0.01, 0.9, 0.04, 0.04};
  toy.next[4] = {0.01, 0.01, 0.9, 0.04, 0.04};
  SearchOptions o;
  o.max_new_tokens = 4;
  o.eos = kEos;
  o.num_beams = 3;
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{2, 2, 2, 2});
  toy.next[2] = {0.01, 0.9, 0.01, 0.04, 0.04};
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{2, 1});
}

TEST_CASE("the length penalty divides a hypothesis's log-probability by its length to that power") {
  // Finished after one token: log(0.6·0.55) = −1.109 over 2 tokens; after two: log(0.3·0.9·0.95) =
  // −1.361 over 3. Penalty 0 (sums alone) keeps the first, 1 (per token: −0.555, −0.454) the second.
  Toy toy;
  toy.next[kStart] = {0.01, 0.04, 0.6, 0.3, 0.05};
  toy.next[2] = {0.01, 0.55, 0.04, 0.2, 0.2};
  toy.next[3] = {0.01, 0.04, 0.025, 0.025, 0.9};
  toy.next[4] = {0.01, 0.95, 0.01, 0.015, 0.015};
  SearchOptions o;
  o.max_new_tokens = 5;
  o.eos = kEos;
  o.num_beams = 2;
  o.length_penalty = 0.0;
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{2, 1});
  o.length_penalty = 1.0;
  CHECK(search(toy.model(), 1, kStart, o)[0] == std::vector<int32_t>{3, 4, 1});
}

TEST_CASE("batch entries are searched independently") {
  Toy toy;
  toy.next[kStart] = {0.05, 0.05, 0.5, 0.3, 0.1};
  toy.next[2] = {0.05, 0.3, 0.05, 0.2, 0.4};
  toy.next[3] = {0.05, 0.05, 0.1, 0.7, 0.1};
  toy.next[4] = {0.1, 0.5, 0.1, 0.2, 0.1};
  for (int beams : {1, 3}) {
    SearchOptions o;
    o.max_new_tokens = 6;
    o.eos = kEos;
    o.num_beams = beams;
    const auto one = search(toy.model(), 1, kStart, o);
    const auto three = search(toy.model(), 3, kStart, o);
    REQUIRE(three.size() == 3);
    for (const auto& s : three) CHECK(s == one[0]);
  }
}

TEST_CASE("prompts of different lengths decoded together continue as each would alone") {
  // The toy's next token depends on the last token only, so a prompt's continuation is known; the
  // positions the steps see show that the prompts are read in lockstep.
  Toy toy;
  toy.next[kStart] = {0.05, 0.05, 0.5, 0.3, 0.1};
  toy.next[2] = {0.05, 0.1, 0.05, 0.2, 0.6};
  toy.next[3] = {0.05, 0.05, 0.1, 0.7, 0.1};
  toy.next[4] = {0.1, 0.5, 0.1, 0.2, 0.1};
  const std::vector<std::vector<int32_t>> prompts = {{3}, {4, 4, 2}, {2, 3}};
  SearchOptions o;
  o.max_new_tokens = 3;
  o.eos = kEos;
  o.pad = kStart;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(dscpp::runtime::search_prompts(toy.model(), {p}, o)[0]);
  CHECK(alone[0] == std::vector<int32_t>{3, 3, 3});
  CHECK(alone[1] == std::vector<int32_t>{4, 1});
  CHECK(alone[2] == std::vector<int32_t>{3, 3, 3});
  SearchModel m = toy.model();
  std::vector<int64_t> positions;
  std::vector<std::vector<int32_t>> fed;
  const auto step = m.step;
  m.step = [&](const std::vector<int32_t>& t, int64_t p, std::vector<float>& l) {
    positions.push_back(p);
    fed.push_back(t);
    step(t, p, l);
  };
  CHECK(dscpp::runtime::search_prompts(m, prompts, o) == alone);
  // The longest prompt ends at position 2; its last choice comes from position 3 (eos there).
  CHECK(positions == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(fed[1] == std::vector<int32_t>{3, 4, 3});  // the first prompt's choice beside the others' prompts
  // A decoder of 3 positions: nothing is decoded beyond position 2.
  o.positions = 3;
  o.max_new_tokens = 10;
  CHECK(dscpp::runtime::search_prompts(toy.model(), {{3}}, o)[0] == std::vector<int32_t>{3, 3, 3});
  o.num_beams = 2;
  CHECK_THROWS_WITH(dscpp::runtime::search_prompts(toy.model(), prompts, o), Catch::Contains("continued greedily"));
}
