// examples/common/token_file.h: llm.c's header format (both versions) and headerless
// uint16/uint32 files read back token for token, and every malformed file named with its fault.
#include "token_file.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_tokens_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

template <class T>
std::string write(const std::string& path, const std::vector<int32_t>& header, const std::vector<T>& tokens) {
  std::ofstream f(path, std::ios::binary);
  if (!header.empty()) {
    std::vector<int32_t> h(256, 0);
    for (size_t i = 0; i < header.size(); ++i) h[i] = header[i];
    f.write(reinterpret_cast<const char*>(h.data()), 256 * sizeof(int32_t));
  }
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
  return path;
}

}  // namespace

TEST_CASE("token files: llm.c v1/v2 and headerless uint16/uint32 read back exactly", "[tokens]") {
  TempDir d;
  std::vector<uint16_t> small;
  std::vector<uint32_t> large;
  for (uint32_t i = 0; i < 1000; ++i) {
    small.push_back(static_cast<uint16_t>((i * 37) % 50257));
    large.push_back((i * 104729u) % 128256u);
  }
  const examples::TokenFile v1(write(d.path + "/v1.bin", {20240520, 1, 1000}, small), 4, 50257);
  const examples::TokenFile v2(write(d.path + "/v2.bin", {20240520, 2, 1000}, large), 2, 128256);
  const examples::TokenFile raw16(write<uint16_t>(d.path + "/raw16.bin", {}, small), 2, 0);
  const examples::TokenFile raw32(write<uint32_t>(d.path + "/raw32.bin", {}, large), 4, 0);
  CHECK(v1.format() == "llm.c v1 (uint16)");
  CHECK(v2.format() == "llm.c v2 (uint32)");
  CHECK(raw16.format() == "raw uint16");
  CHECK(raw32.format() == "raw uint32");
  for (const examples::TokenFile* f : {&v1, &v2, &raw16, &raw32}) REQUIRE(f->size() == 1000);
  uint32_t max_small = 0, max_large = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    CHECK(v1.at(i) == small[static_cast<size_t>(i)]);
    CHECK(raw16.at(i) == small[static_cast<size_t>(i)]);
    CHECK(v2.at(i) == large[static_cast<size_t>(i)]);
    CHECK(raw32.at(i) == large[static_cast<size_t>(i)]);
    max_small = std::max<uint32_t>(max_small, small[static_cast<size_t>(i)]);
    max_large = std::max(max_large, large[static_cast<size_t>(i)]);
  }
  CHECK(v1.max_token() == max_small);
  CHECK(v2.max_token() == max_large);
}

TEST_CASE("token files: every malformed file is refused, naming the file and the fault", "[tokens]") {
  TempDir d;
  const std::vector<uint16_t> toks = {1, 2, 3, 4};
  auto refused = [](const std::string& path, int width, int64_t vocab, const std::string& what) {
    CHECK_THROWS_WITH(examples::TokenFile(path, width, vocab), Contains(path) && Contains(what));
  };
  refused(d.path + "/absent.bin", 2, 0, "cannot open");
  refused(write(d.path + "/v3.bin", {20240520, 3, 4}, toks), 2, 0, "llm.c header version 3, expected 1");
  refused(write(d.path + "/count.bin", {20240520, 1, 5}, toks), 2, 0, "header says 5 tokens of 2 bytes, but 8 bytes");
  refused(write<uint8_t>(d.path + "/odd.bin", {}, {1, 2, 3}), 2, 0, "3 bytes is not a whole number of 2-byte tokens");
  refused(write<uint16_t>(d.path + "/vocab.bin", {}, {1, 2, 60, 3}), 2, 50, "token 2 is 60, outside the vocabulary of 50");
  refused(write<uint16_t>(d.path + "/width.bin", {}, toks), 3, 0, "token width 3 bytes");
  std::ofstream(d.path + "/empty.bin").close();
  refused(d.path + "/empty.bin", 2, 0, "empty");
}
