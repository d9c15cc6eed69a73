// `dscpp tokenize --input FILES --output PREFIX`: documents to a token file the causal-LM
// loader reads (examples/common/token_file.h): Megatron's indexed dataset (PREFIX.bin and
// PREFIX.idx, MMIDIDX version 1, one sequence per document, each ending with the
// end-of-document token) or llm.c's .bin. Documents are read in batches of about 8 MB and
// encoded over the threads, each batch's ids written in document order, so the output is the
// same for any thread count and memory stays bounded whatever the input's size.
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "launcher/commands/commands.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace dscpp::launcher {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kBatchBytes = 8u << 20;

// Lines of a plain or gzip-compressed file (zlib reads both), without their newline.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) fail("{}: cannot read it ({})", path, std::strerror(errno));
    gzbuffer(f_, 1 << 20);
  }
  ~LineReader() {
    if (f_) gzclose(f_);
  }
  bool next(std::string& line) {
    line.clear();
    char buf[1 << 16];
    while (gzgets(f_, buf, sizeof(buf))) {
      line += buf;
      if (!line.empty() && line.back() == '\n') {
        line.pop_back();
        return true;
      }
    }
    int err = 0;
    const char* msg = gzerror(f_, &err);
    if (err != Z_OK && err != Z_STREAM_END) fail("{}: read error: {}", path_, msg);
    return !line.empty();
  }
  int64_t compressed_offset() const { return gzoffset(f_); }

 private:
  std::string path_;
  gzFile f_;
};

// The token the tokenizer's config calls eos (its end-of-document token, as Megatron appends).
std::string eos_of(const std::string& dir) {
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path p = fs::path(dir) / name;
    if (!fs::exists(p)) continue;
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("eos_token")) continue;
    if (j["eos_token"].is_string()) return j["eos_token"].get<std::string>();
    if (j["eos_token"].is_object() && j["eos_token"].contains("content"))
      return j["eos_token"]["content"].get<std::string>();
  }
  return "";
}

class TokenWriter {
 public:
  TokenWriter(const std::string& prefix, const std::string& format, size_t vocab)
      : format_(format), wide_(vocab > 65535), bin_path_(prefix + ".bin") {
    if (format_ != "megatron" && format_ != "llmc") fail("--format {}: expected megatron or llmc", format_);
    out_.open(bin_path_ + ".partial", std::ios::binary | std::ios::trunc);
    if (!out_) fail("{}.partial: cannot write it", bin_path_);
    if (format_ == "llmc") {
      const std::vector<int32_t> header(256, 0);
      out_.write(reinterpret_cast<const char*>(header.data()), 1024);
    }
    idx_path_ = prefix + ".idx";
    lengths_.open(idx_path_ + ".lengths.partial", std::ios::binary | std::ios::trunc);
    if (!lengths_) fail("{}.lengths.partial: cannot write it", idx_path_);
  }
  void document(const std::vector<int32_t>& ids) {
    if (wide_) {
      out_.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    } else {
      std::vector<uint16_t> narrow(ids.begin(), ids.end());
      out_.write(reinterpret_cast<const char*>(narrow.data()), static_cast<std::streamsize>(narrow.size() * 2));
    }
    // The lengths go to a side file, so that memory does not grow with the number of documents.
    const auto n = static_cast<int32_t>(ids.size());
    lengths_.write(reinterpret_cast<const char*>(&n), 4);
    ++documents_;
    tokens_ += static_cast<int64_t>(ids.size());
  }
  // Writes the index (or header) and moves the files into place.
  void finish() {
    if (format_ == "llmc") {
      const int32_t header[3] = {20240520, wide_ ? 2 : 1, static_cast<int32_t>(tokens_)};
      if (tokens_ > INT32_MAX)
        fail("{}: {} tokens do not fit llm.c's int32 count; use --format megatron", bin_path_, tokens_);
      out_.seekp(0);
      out_.write(reinterpret_cast<const char*>(header), sizeof(header));
    }
    out_.close();
    if (!out_) fail("{}.partial: write failed (disk full?)", bin_path_);
    lengths_.close();
    if (!lengths_) fail("{}.lengths.partial: write failed (disk full?)", idx_path_);
    if (format_ == "megatron") write_index();
    fs::remove(idx_path_ + ".lengths.partial");
    fs::rename(bin_path_ + ".partial", bin_path_);
  }
  int64_t tokens() const { return tokens_; }

 private:
  // MMIDIDX v1: header, the lengths (int32), their byte offsets (int64), the document starts
  // (int64, one sequence per document), each list streamed from the side file.
  void write_index() {
    std::ofstream idx(idx_path_ + ".partial", std::ios::binary | std::ios::trunc);
    const uint64_t version = 1, sequences = static_cast<uint64_t>(documents_), starts = sequences + 1;
    const uint8_t code = wide_ ? 4 : 8;  // int32, uint16 (Megatron's DType codes)
    idx.write("MMIDIDX\0\0", 9);
    idx.write(reinterpret_cast<const char*>(&version), 8);
    idx.write(reinterpret_cast<const char*>(&code), 1);
    idx.write(reinterpret_cast<const char*>(&sequences), 8);
    idx.write(reinterpret_cast<const char*>(&starts), 8);
    std::vector<int32_t> chunk(1 << 16);
    for (int pass = 0; pass < 2; ++pass) {  // the lengths, then the offsets they give
      std::ifstream in(idx_path_ + ".lengths.partial", std::ios::binary);
      int64_t at = 0;
      while (in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size() * 4)) ||
             in.gcount() > 0) {
        const auto n = static_cast<size_t>(in.gcount() / 4);
        if (pass == 0) idx.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n * 4));
        for (size_t i = 0; pass == 1 && i < n; ++i) {
          idx.write(reinterpret_cast<const char*>(&at), 8);
          at += static_cast<int64_t>(chunk[i]) * (wide_ ? 4 : 2);
        }
      }
    }
    for (int64_t d = 0; d <= documents_; ++d) idx.write(reinterpret_cast<const char*>(&d), 8);
    idx.close();
    if (!idx) fail("{}.partial: write failed (disk full?)", idx_path_);
    fs::rename(idx_path_ + ".partial", idx_path_);
  }

 public:
  std::string files() const { return format_ == "megatron" ? bin_path_ + " and " + idx_path_ : bin_path_; }

 private:
  std::string format_;
  bool wide_;
  std::string bin_path_, idx_path_;
  std::ofstream out_, lengths_;
  int64_t documents_ = 0, tokens_ = 0;
};

}  // namespace

int run_tokenize_files(const TokenizeArgs& a, const tok::Tokenizer& t) {
  if (a.threads > 0) set_num_threads(a.threads);
  const std::string eod = a.eod.empty() ? eos_of(a.tokenizer) : a.eod;
  if (eod.empty()) fail("{}: the tokenizer names no eos_token; give the end-of-document token with --eod", a.tokenizer);
  const int32_t eod_id = t.token_to_id(eod);
  if (eod_id < 0) fail("--eod {}: not a token of {}", eod, t.source());
  int64_t total_bytes = 0;
  for (const std::string& f : a.input) {
    std::error_code ec;
    const auto n = fs::file_size(f, ec);
    if (ec) fail("{}: cannot read it ({})", f, ec.message());
    total_bytes += static_cast<int64_t>(n);
  }
  TokenWriter writer(a.output, a.format, t.vocab_size());
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = Clock::now();
  auto last = start;
  int64_t documents = 0, done_bytes = 0, text_bytes = 0;
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  std::vector<std::vector<int32_t>> ids;
  auto flush = [&] {
    ids.assign(batch.size(), {});
    parallel_for(static_cast<int64_t>(batch.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        ids[static_cast<size_t>(i)] = t.encode(batch[static_cast<size_t>(i)], false);
        ids[static_cast<size_t>(i)].push_back(eod_id);
      }
    });
    for (const auto& d : ids) writer.document(d);
    documents += static_cast<int64_t>(batch.size());
    batch.clear();
    batch_bytes = 0;
    const auto now = Clock::now();
    if (tty && now - last > std::chrono::milliseconds(500)) {
      last = now;
      const double s = std::chrono::duration<double>(now - start).count();
      const double rate = static_cast<double>(done_bytes) / std::max(s, 1e-9);
      std::fprintf(stderr, "\rtokenize: %.1f of %.1f MB, %lld documents, %.0f tokens/s, ETA %.0f s   ",
                   static_cast<double>(done_bytes) / 1e6, static_cast<double>(total_bytes) / 1e6,
                   static_cast<long long>(documents), static_cast<double>(writer.tokens()) / std::max(s, 1e-9),
                   rate > 0 ? static_cast<double>(total_bytes - done_bytes) / rate : 0.0);
    }
  };
  auto add = [&](std::string doc) {
    text_bytes += static_cast<int64_t>(doc.size());
    batch_bytes += doc.size();
    batch.push_back(std::move(doc));
    if (batch_bytes >= kBatchBytes) flush();
  };
  for (const std::string& f : a.input) {
    LineReader in(f);
    std::string line;
    if (!a.json_key.empty()) {
      for (int64_t n = 1; in.next(line); ++n) {
        if (line.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) fail("{}:{}: expected a JSON object per line", f, n);
        if (!j.contains(a.json_key) || !j[a.json_key].is_string())
          fail("{}:{}: no string \"{}\" in this line's object (--json_key)", f, n, a.json_key);
        add(j[a.json_key].get<std::string>());
        done_bytes = in.compressed_offset();
      }
    } else if (a.lines) {
      while (in.next(line)) {
        if (!line.empty()) add(line);
        done_bytes = in.compressed_offset();
      }
    } else {
      std::string doc;
      bool first = true;
      while (in.next(line)) {
        if (!first) doc += '\n';
        doc += line;
        first = false;
      }
      add(std::move(doc));
    }
    done_bytes = 0;
    for (const std::string& g : a.input) {
      if (&g == &f) break;
      done_bytes += static_cast<int64_t>(fs::file_size(g));
    }
    done_bytes += static_cast<int64_t>(fs::file_size(f));
  }
  if (!batch.empty()) flush();
  writer.finish();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  if (tty) std::fputs("\n", stderr);
  std::fprintf(stderr, "tokenize: %lld documents, %.1f MB of text, %lld tokens (end of document %s = %d) in %.2f s "
                       "(%.1f MB/s, %d threads) -> %s\n",
               static_cast<long long>(documents), static_cast<double>(text_bytes) / 1e6,
               static_cast<long long>(writer.tokens()), eod.c_str(), eod_id, s,
               static_cast<double>(text_bytes) / 1e6 / std::max(s, 1e-9), num_threads(), writer.files().c_str());
  return 0;
}

}  // namespace dscpp::launcher
