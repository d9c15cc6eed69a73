#include "checkpoint/hf_layout.h"

#include "core/error.h"

#include <cstring>
#include <memory>
#include <utility>

namespace dscpp::ckpt {

HfNames HfNames::of(const Manifest& m) {
  HfNames n;
  if (m.doc.contains("file_transposed")) n.transposed = m.doc["file_transposed"].get<std::set<std::string>>();
  if (m.doc.contains("tied")) n.tied = m.doc["tied"].get<std::map<std::string, std::string>>();
  // One tensor under two names has one orientation.
  for (const auto& [alias, owner] : n.tied)
    if (n.transposed.count(owner)) n.transposed.insert(alias);
  return n;
}

std::vector<std::string> HfNames::aliases_of(const std::string& owner) const {
  std::vector<std::string> out;
  for (const auto& [alias, o] : tied)
    if (o == owner) out.push_back(alias);
  return out;
}

bool holds_hf_layout(const SafetensorsFile& f) {
  auto it = f.metadata().find(kLayoutKey);
  return it != f.metadata().end() && it->second == kHfLayout;
}

bool written_by_old_dscpp(const SafetensorsFile& f) {
  const auto& meta = f.metadata();
  auto format = meta.find("format");
  return !holds_hf_layout(f) &&
         (meta.count("dscpp_checkpoint") > 0 || (format != meta.end() && format->second == "dscpp"));
}

TensorToWrite transposed_for_file(TensorToWrite t) {
  if (t.shape.size() != 2)
    fail("tensor '{}' is to be written transposed but has {} dimensions", t.name, t.shape.size());
  const int64_t rows = t.shape[0], cols = t.shape[1], numel = rows * cols;
  const size_t elem = dtype_size(t.dtype);
  auto whole = std::make_shared<std::vector<unsigned char>>();
  TensorFill source = t.fill;
  const void* data = t.data;
  t.fill = [whole, source, data, rows, cols, numel, elem](int64_t first, int64_t count, void* dst) {
    const unsigned char* mem = static_cast<const unsigned char*>(data);
    if (!mem) {
      if (first == 0) {  // the writer asks in order
        whole->resize(static_cast<size_t>(numel) * elem);
        source(0, numel, whole->data());
      }
      mem = whole->data();
    }
    // Element (c, r) of the file's [cols, rows] is memory's (r, c).
    auto* out = static_cast<unsigned char*>(dst);
    for (int64_t e = first; e < first + count; ++e)
      std::memcpy(out + (e - first) * static_cast<int64_t>(elem),
                  mem + ((e % rows) * cols + e / rows) * static_cast<int64_t>(elem), elem);
    if (first + count == numel) std::vector<unsigned char>().swap(*whole);
  };
  t.data = nullptr;
  std::swap(t.shape[0], t.shape[1]);
  return t;
}

void TransposedReader::read(const SafetensorsFile& f, const std::string& key, int64_t rows, int64_t cols,
                            int64_t first, int64_t count, float* dst) {
  read(&f, key, rows, cols, first, count, dst,
       [&](float* whole) { f.read(key, 0, rows * cols, whole, DType::f32); });
}

void TransposedReader::read(const void* file, const std::string& key, int64_t rows, int64_t cols, int64_t first,
                            int64_t count, float* dst, const std::function<void(float* whole)>& whole) {
  if (file_ != file || key_ != key) {
    file_ = nullptr;  // a read that throws leaves no half-filled cache behind
    cache_.assign(static_cast<size_t>(rows * cols), 0.0f);
    whole(cache_.data());
    file_ = file;
    key_ = key;
  }
  // Element (r, c) of memory's [rows, cols] is the file's (c, r).
  for (int64_t e = first; e < first + count; ++e)
    dst[e - first] = cache_[static_cast<size_t>((e % cols) * rows + e / cols)];
}

}  // namespace dscpp::ckpt
