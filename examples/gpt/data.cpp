// The text data set: reading the text (a --data file or the default fortunes corpus), its byte
// vocabulary and the split into context+1 windows, and one window as a training sample. Kept
// apart from the layers because bench/torch_gpt.py must read exactly the same text and windows.
#include "gpt.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace gpt {
namespace {

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(DSCPP_E_IO, "gpt: " + path + ": cannot open: " + std::strerror(errno));
  // One block read: a per-character stream iterator costs a second per rank in debug builds.
  std::vector<uint8_t> bytes;
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) bytes.insert(bytes.end(), block, block + in.gcount());
  if (in.bad()) fail(DSCPP_E_IO, "gpt: " + path + ": read error");
  return bytes;
}

// The default corpus: see the comment at the top of gpt.cpp for the exact rule.
std::vector<std::string> fortune_files() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(kFortunesDir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto ends_with = [&](const char* s) {
      size_t n = std::strlen(s);
      return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
    };
    if (ends_with(".dat") || ends_with(".u8")) continue;
    std::error_code sec;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), sec))) continue;  // skips symlinks and dirs
    names.push_back(name);
  }
  if (ec)
    fail(DSCPP_E_IO,
         std::string("gpt: ") + kFortunesDir + ": " + ec.message() + " (install fortunes or pass --data FILE)");
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

namespace {
// Token data: the same non-overlapping windows of context+1 as text, over token ids.
void load_tokens(Gpt& m) {
  try {
    m.tokens =
        std::make_unique<examples::TokenFile>(m.cfg.tokens, static_cast<int>(m.cfg.token_bytes), m.cfg.vocab_size);
  } catch (const std::exception& e) {
    fail(DSCPP_E_IO, std::string("gpt: ") + e.what());
  }
  const int64_t T = m.cfg.context;
  m.windows = m.tokens->size() / (T + 1);
  m.train_windows = m.windows * 9 / 10;
  if (m.train_windows < 1)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + m.cfg.tokens + " has " + std::to_string(m.tokens->size()) +
                                       " tokens, too few for one training window of context+1 = " +
                                       std::to_string(T + 1));
  if (m.host.rank == 0)
    m.log("gpt: tokens " + m.cfg.tokens + " (" + m.tokens->format() + "): " + std::to_string(m.tokens->size()) +
          " tokens, largest id " + std::to_string(m.tokens->max_token()) + ", vocabulary " +
          std::to_string(m.cfg.vocab_size) + ", " + std::to_string(m.train_windows) + " train / " +
          std::to_string(m.windows - m.train_windows) + " eval windows of " + std::to_string(T) + "+1");
}
}  // namespace

void load_text(Gpt& m) {
  if (!m.cfg.tokens.empty()) return load_tokens(m);
  const Config& cfg = m.cfg;
  std::string source;
  if (!cfg.data.empty()) {
    m.text = read_file(cfg.data);
    source = cfg.data;
  } else {
    std::vector<std::string> names = fortune_files();
    for (const std::string& n : names) {
      std::vector<uint8_t> part = read_file(std::string(kFortunesDir) + "/" + n);
      m.text.insert(m.text.end(), part.begin(), part.end());
    }
    source = std::string(kFortunesDir) + " (" + std::to_string(names.size()) + " files)";
  }

  // Vocabulary and unigram statistics.
  int64_t counts[256] = {};
  for (uint8_t b : m.text) ++counts[b];
  std::fill(std::begin(m.byte_to_id), std::end(m.byte_to_id), -1);
  for (int b = 0; b < 256; ++b)
    if (counts[b] > 0) {
      m.byte_to_id[b] = static_cast<int32_t>(m.vocab.size());
      m.vocab.push_back(static_cast<uint8_t>(b));
    }
  const int64_t T = cfg.context;
  m.windows = static_cast<int64_t>(m.text.size()) / (T + 1);
  m.train_windows = m.windows * 9 / 10;
  if (m.train_windows < 1)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + source + " has " + std::to_string(m.text.size()) +
                                       " bytes, too few for one training window of context+1 = " +
                                       std::to_string(T + 1) + " bytes");
  if (m.host.rank == 0) {
    double bits = 0;
    for (int64_t c : counts)
      if (c > 0) {
        double p = static_cast<double>(c) / static_cast<double>(m.text.size());
        bits -= p * std::log2(p);
      }
    char line[512];
    std::snprintf(line, sizeof line,
                  "gpt: text %s: %zu bytes, vocabulary %zu, %lld train / %lld eval windows of %lld+1; unigram "
                  "entropy %.4f bits/char = %.4f nats/char (the loss is in nats)",
                  source.c_str(), m.text.size(), m.vocab.size(), static_cast<long long>(m.train_windows),
                  static_cast<long long>(m.windows - m.train_windows), static_cast<long long>(T), bits,
                  bits * std::log(2.0));
    m.log(line);
  }
}

void load_sample(const Gpt* m, int32_t split, int64_t index, void* input, int32_t* target) {
  if (split != 0 && split != 1)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: split " + std::to_string(split) + " is neither 0 (train) nor 1 (eval)");
  const int64_t size = split == 0 ? m->train_windows : m->windows - m->train_windows;
  if (index < 0 || index >= size)
    fail(DSCPP_E_INVALID_ARGUMENT, std::string("gpt: ") + (split == 0 ? "train" : "eval") + " sample " +
                                       std::to_string(index) + " outside [0, " + std::to_string(size) + ")");
  const int64_t T = m->T();
  const int64_t window = split == 0 ? index : m->train_windows + index;
  int32_t* x = static_cast<int32_t*>(input);
  if (m->tokens) {
    for (int64_t t = 0; t < T; ++t) {
      x[t] = static_cast<int32_t>(m->tokens->at(window * (T + 1) + t));
      target[t] = static_cast<int32_t>(m->tokens->at(window * (T + 1) + t + 1));
    }
    return;
  }
  const uint8_t* w = m->text.data() + window * (T + 1);
  for (int64_t t = 0; t < T; ++t) {
    x[t] = m->byte_to_id[w[t]];
    target[t] = m->byte_to_id[w[t + 1]];
  }
}

}  // namespace gpt
