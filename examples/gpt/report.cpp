// The report: a continuation of the first eval window generated through the forward pass the
// runtime lends after evaluation, logged as text. Separate from the layers because it drives the
// whole model from outside (host token ids in, logits out) rather than one layer's ops.
#include "gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace gpt {
namespace {

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\t' || (ch >= 0x20 && ch < 0x7f)) {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

}  // namespace

void report(const Gpt* m, const dscpp_infer* infer) {
  const Config& cfg = m->cfg;
  if (cfg.sample_chars == 0 || infer == nullptr || infer->forward == nullptr || infer->max_batch < 1) return;
  if (m->tokens) return;  // token ids have no text here (no tokenizer): nothing to print
  const int64_t T = m->T(), V = m->V();
  // Prompt: the first window of the eval split (the last training window when eval is empty).
  const int64_t w = m->windows > m->train_windows ? m->train_windows : m->train_windows - 1;
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = m->byte_to_id[m->text[w * (T + 1) + t]];
  std::vector<float> logits(T * V);
  std::mt19937_64 rng(m->host.seed ^ 0x9e3779b97f4a7c15ull);
  std::string generated;
  for (int64_t n = 0; n < cfg.sample_chars; ++n) {
    dscpp_error err{};
    int status = infer->forward(infer, ids.data(), 1, logits.data(), &err);
    if (status != DSCPP_OK) fail(status, std::string("gpt: report's forward pass failed: ") + err.message);
    const float* last = logits.data() + (T - 1) * V;
    int32_t next = 0;
    if (cfg.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    } else {
      std::vector<double> w(V);
      const float mx = *std::max_element(last, last + V);
      for (int64_t v = 0; v < V; ++v) w[v] = std::exp((last[v] - mx) / cfg.temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int64_t>(w.begin(), w.end())(rng));
    }
    generated += static_cast<char>(m->vocab[next]);
    std::rotate(ids.begin(), ids.begin() + 1, ids.end());
    ids[T - 1] = next;
  }
  std::string prompt(m->text.begin() + w * (T + 1), m->text.begin() + w * (T + 1) + T);
  size_t cut = prompt.rfind('\n', prompt.size() >= 2 ? prompt.size() - 2 : 0);
  std::string tail = cut == std::string::npos ? prompt : prompt.substr(cut + 1);
  m->log(std::string("gpt: ") + (cfg.temperature > 0 ? "sampled" : "greedy") + " continuation of eval window " +
         std::to_string(w - m->train_windows) + " (" + std::to_string(cfg.sample_chars) + " chars after '" +
         printable(tail) + "'):");
  size_t at = 0;
  while (at <= generated.size()) {
    size_t nl = generated.find('\n', at);
    if (nl == std::string::npos) nl = generated.size();
    m->log("gpt: | " + printable(generated.substr(at, nl - at)));
    at = nl + 1;
  }
}

}  // namespace gpt
