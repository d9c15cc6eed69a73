// `dscpp bleu`: corpus BLEU (and chrF) of a hypothesis file against reference files, read and
// scored as the sacrebleu command does (metrics/bleu.h, metrics/chrf.h).
#include "core/error.h"
#include "launcher/commands/commands.h"
#include "metrics/bleu.h"
#include "metrics/chrf.h"
#include "metrics/text.h"

#include <nlohmann/json.hpp>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>

namespace dscpp::launcher {

namespace {

// A file's lines as sacrebleu reads them: split at "\n" only, each stripped of trailing
// whitespace; UTF-8 strictly (Python's decoder refuses the file otherwise). gzip read too.
std::vector<std::string> read_segments(const std::string& path) {
  std::string data;
  if (path.empty()) {
    data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) fail("{}: cannot read it ({})", path, std::strerror(errno));
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
    int err = Z_OK;
    const char* msg = gzerror(f, &err);
    const std::string error = n < 0 ? msg : "";
    gzclose(f);
    if (n < 0) fail("{}: read error: {}", path, error);
  }
  const std::string name = path.empty() ? "stdin" : path;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    const std::string_view line = std::string_view(data).substr(start, end - start);
    const size_t bad = metrics::invalid_utf8_at(line);
    if (bad != std::string_view::npos)
      fail("{}:{}: not UTF-8 (byte 0x{:02X} at byte {} of the line)", name, lines.size() + 1,
           static_cast<unsigned char>(line[bad]), bad + 1);
    lines.emplace_back(metrics::rstrip_py(line));
    start = end + 1;
  }
  return lines;
}

// The score with every number at full precision, and the line sacrebleu prints.
std::string bleu_json(const metrics::BleuScore& s, int width) {
  nlohmann::ordered_json j = {
      {"name", "BLEU"},     {"score", s.score},       {"precisions", s.precisions}, {"bp", s.bp},
      {"ratio", s.ratio},   {"hyp_len", s.hyp_len},   {"ref_len", s.ref_len},       {"counts", s.counts},
      {"totals", s.totals}, {"line", s.format(width)}};
  return j.dump();
}

std::string chrf_json(const metrics::ChrfScore& s, int width) {
  return nlohmann::ordered_json{{"name", s.name()}, {"score", s.score}, {"line", s.format(width)}}.dump();
}

}  // namespace

int run_bleu(const BleuArgs& a) {
  if (a.references.empty()) fail("dscpp bleu: give at least one reference file");
  if (a.input.empty() && isatty(STDIN_FILENO))
    fail("dscpp bleu: give the hypotheses with -i FILE or on stdin (stdin is a terminal)");
  metrics::BleuOptions bleu_options;
  bleu_options.lowercase = a.lowercase;
  bleu_options.tokenizer = metrics::parse_bleu_tokenizer(a.tokenize);
  bleu_options.smooth = metrics::parse_bleu_smooth(a.smooth_method);
  bleu_options.smooth_value = a.smooth_value;
  metrics::ChrfOptions chrf_options;
  chrf_options.word_order = a.chrf_word_order;
  chrf_options.lowercase = a.chrf_lowercase;
  for (const std::string& m : a.metrics)
    if (m != "bleu" && m != "chrf") fail("dscpp bleu: metric {:?}: expected bleu or chrf", m);

  const std::vector<std::string> hyps = read_segments(a.input);
  const std::string hyp_name = a.input.empty() ? "stdin" : a.input;
  std::vector<std::vector<std::string>> refs;
  for (const std::string& path : a.references) {
    refs.push_back(read_segments(path));
    if (refs.back().size() != hyps.size())
      fail("dscpp bleu: the hypotheses ({}) have {} lines but the reference {} has {}", hyp_name, hyps.size(), path,
           refs.back().size());
  }
  if (hyps.empty()) fail("dscpp bleu: {} has no lines to score", hyp_name);

  const bool want_bleu = std::count(a.metrics.begin(), a.metrics.end(), "bleu") > 0;
  const bool want_chrf = std::count(a.metrics.begin(), a.metrics.end(), "chrf") > 0;
  if (a.sentence_level && want_bleu && want_chrf) fail("dscpp bleu --sentence-level: give one metric");
  // sacrebleu scores single segments over the orders they reach.
  if (a.sentence_level) bleu_options.effective_order = true;
  auto print_bleu = [&](const metrics::BleuScore& s) {
    std::cout << (a.json ? bleu_json(s, a.width) : s.format(a.width, a.score_only)) << '\n';
  };
  auto print_chrf = [&](const metrics::ChrfScore& s) {
    std::cout << (a.json ? chrf_json(s, a.width) : s.format(a.width, a.score_only)) << '\n';
  };
  metrics::Bleu bleu(bleu_options);
  metrics::Chrf chrf(chrf_options);
  std::vector<std::string_view> segment_refs(refs.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    for (size_t r = 0; r < refs.size(); ++r) segment_refs[r] = refs[r][i];
    if (a.sentence_level) {
      if (want_bleu)
        print_bleu(
            metrics::compute_bleu(metrics::bleu_segment_stats(hyps[i], segment_refs, bleu_options), bleu_options));
      if (want_chrf) {
        metrics::Chrf one(chrf_options);
        one.add(hyps[i], segment_refs);
        print_chrf(one.score());
      }
      continue;
    }
    if (want_bleu) bleu.add(hyps[i], segment_refs);
    if (want_chrf) chrf.add(hyps[i], segment_refs);
  }
  if (a.sentence_level) return 0;
  // In sacrebleu's order (its metric names sorted).
  if (want_bleu) print_bleu(bleu.score());
  if (want_chrf) print_chrf(chrf.score());
  return 0;
}

}  // namespace dscpp::launcher
