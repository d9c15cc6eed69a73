// Driver for tests/system/safetensors_interop.sh: `write PATH` writes a fixed set of tensors
// with our writer; `check PATH` opens a file written by PyPI's safetensors (numpy) holding
// the same set and compares every byte. The values follow formulas the shell script's Python
// side repeats, so neither side compares against its own output.
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::ckpt;

namespace {

struct Expected {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

template <typename T>
std::vector<unsigned char> as_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <typename T, typename F>
std::vector<T> fill(int n, F f) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) v[static_cast<size_t>(k)] = f(k);
  return v;
}

// Keep in sync with the Python expectations in tests/system/safetensors_interop.sh.
std::vector<Expected> expected() {
  std::vector<Expected> e;
  e.push_back({"f32", DType::f32, {3, 4}, as_bytes(fill<float>(12, [](int k) { return k * 0.25f - 3.0f; }))});
  auto h32 = fill<float>(5, [](int k) { return k * 0.5f - 2.0f; });
  std::vector<uint16_t> h(5);
  convert(h32.data(), DType::f32, h.data(), DType::f16, 5);
  e.push_back({"f16", DType::f16, {5}, as_bytes(h)});
  e.push_back({"f64", DType::f64, {2, 2, 2}, as_bytes(fill<double>(8, [](int k) { return k / 3.0; }))});
  e.push_back({"scalar", DType::f64, {}, as_bytes(std::vector<double>{2.5})});
  e.push_back({"i32", DType::i32, {4}, as_bytes(fill<int32_t>(4, [](int k) { return k * 1000 - 1500; }))});
  e.push_back({"i64", DType::i64, {3}, as_bytes(fill<int64_t>(3, [](int k) { return k * 3000000000LL - 1; }))});
  e.push_back(
      {"i8", DType::i8, {6}, as_bytes(fill<int8_t>(6, [](int k) { return static_cast<int8_t>(k * 50 - 128); }))});
  e.push_back(
      {"u8", DType::u8, {2, 3}, as_bytes(fill<uint8_t>(6, [](int k) { return static_cast<uint8_t>(k * 40); }))});
  e.push_back({"empty", DType::f32, {0, 3}, {}});
  return e;
}

const std::map<std::string, std::string> kMetadata = {{"producer", "dscpp"}, {"step", "7"}};

int check(const std::string& path) {
  SafetensorsFile f(path);
  int bad = 0;
  auto want = expected();
  if (f.tensors().size() != want.size()) {
    std::fprintf(stderr, "%s: %zu tensors, expected %zu\n", path.c_str(), f.tensors().size(), want.size());
    ++bad;
  }
  for (const auto& w : want) {
    const TensorInfo* t = f.find(w.name);
    if (!t) {
      std::fprintf(stderr, "%s: tensor '%s' missing\n", path.c_str(), w.name.c_str());
      ++bad;
      continue;
    }
    if (t->dtype != w.dtype || t->shape != w.shape || t->bytes != w.bytes.size()) {
      std::fprintf(stderr, "%s: tensor '%s' has dtype %s, %zu dims, %llu bytes\n", path.c_str(), w.name.c_str(),
                   std::string(dtype_name(t->dtype)).c_str(), t->shape.size(),
                   static_cast<unsigned long long>(t->bytes));
      ++bad;
      continue;
    }
    std::vector<unsigned char> got(t->bytes);
    f.read(w.name, 0, t->numel, got.data(), t->dtype);
    if (got != w.bytes) {
      std::fprintf(stderr, "%s: tensor '%s' values differ\n", path.c_str(), w.name.c_str());
      ++bad;
    }
  }
  if (f.metadata() != kMetadata) {
    std::fprintf(stderr, "%s: metadata differs (%zu entries)\n", path.c_str(), f.metadata().size());
    ++bad;
  }
  if (bad == 0) std::printf("dscpp read %s: %zu tensors and metadata match\n", path.c_str(), want.size());
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "write") != 0 && std::strcmp(argv[1], "check") != 0)) {
    std::fprintf(stderr, "usage: %s write|check PATH\n", argv[0]);
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "check") == 0) return check(argv[2]);
    auto want = expected();
    std::vector<TensorToWrite> ts;
    for (const auto& w : want) ts.push_back({w.name, w.dtype, w.shape, w.bytes.data()});
    write_safetensors(argv[2], ts, kMetadata);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
