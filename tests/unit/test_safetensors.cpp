// safetensors: round trips, partial reads with conversion, and every corruption the reader
// must name. Corrupt files are built byte by byte here (not with our writer), so the reader
// is checked against the format, not against itself.
#include "checkpoint/safetensors.h"
#include "core/error.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::ckpt;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_st_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// A file with an explicit header text (padded to 8 like the reference) and data bytes.
void write_raw(const std::string& path, std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  std::ofstream(path, std::ios::binary) << out;
}

void expect_error(const std::string& path, const std::string& problem) {
  INFO("expected error about: " << problem);
  try {
    SafetensorsFile f(path);
    FAIL("no error for " << path);
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors round trip: dtypes, 0-d and empty tensors, metadata") {
  TempDir dir;
  const std::string path = dir.path + "/model.safetensors";
  std::vector<float> a = {1, -2, 3.5f, 4, 5, 6};
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7bff, 0x0001};  // f16 1, -2, 65504, smallest subnormal
  std::vector<uint16_t> b = {0x3f80, 0x4040, 0xbf00, 0x0000};  // bf16 1, 3, -0.5, 0
  double scalar = 3.25;
  std::vector<int32_t> i32 = {-1, 0, 2147483647};
  std::vector<int64_t> i64 = {-9000000000LL, 42};
  std::vector<int8_t> i8 = {-128, -1, 0, 1, 127};
  std::vector<TensorToWrite> ts = {
      {"layer.weight", DType::f32, {2, 3}, a.data(), {}},
      {"half", DType::f16, {4}, h.data(), {}},
      {"brain", DType::bf16, {2, 2}, b.data(), {}},
      {"scalar", DType::f64, {}, &scalar, {}},
      {"ints", DType::i32, {3}, i32.data(), {}},
      {"longs", DType::i64, {2, 1}, i64.data(), {}},
      {"bytes", DType::i8, {5}, i8.data(), {}},
      {"empty_u8", DType::u8, {0}, nullptr, {}},
      {"empty_2d", DType::f32, {0, 4}, nullptr, {}},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}, {"note", "naïve \"quoted\""}};
  write_safetensors(path, ts, meta);

  // Header length is a multiple of 8 (space padded): the data section starts aligned.
  std::string raw = slurp(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(raw[i])) << (8 * i);
  CHECK(n % 8 == 0);
  CHECK(raw.size() == 8 + n + 24 + 8 + 8 + 8 + 12 + 16 + 5);

  SafetensorsFile f(path);
  CHECK(f.metadata() == meta);
  REQUIRE(f.tensors().size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {  // our writer keeps the given order
    const TensorInfo& info = f.tensors()[i];
    INFO(ts[i].name);
    CHECK(info.name == ts[i].name);
    CHECK(info.dtype == ts[i].dtype);
    CHECK(info.shape == ts[i].shape);
    if (i == 0) CHECK(info.offset == 8 + n);
    std::vector<unsigned char> got(info.bytes);
    f.read(info.name, 0, info.numel, got.data(), info.dtype);
    if (info.bytes) CHECK(std::memcmp(got.data(), ts[i].data, info.bytes) == 0);
  }
  CHECK(f.find("scalar")->numel == 1);
  CHECK(f.find("empty_2d")->numel == 0);
  CHECK(f.find("empty_2d")->bytes == 0);
  CHECK(f.find("missing") == nullptr);

  // Rewriting truncates: a smaller file replaces the larger one completely.
  write_safetensors(path, {{"x", DType::u8, {1}, i8.data(), {}}});
  SafetensorsFile g(path);
  CHECK(g.tensors().size() == 1);
  CHECK(g.metadata().empty());
}

TEST_CASE("safetensors partial reads with conversion") {
  TempDir dir;
  const std::string path = dir.path + "/p.safetensors";
  std::vector<float> f32(100);
  for (int i = 0; i < 100; ++i) f32[i] = 0.5f * static_cast<float>(i) - 7.0f;
  std::vector<uint16_t> bf = {0x3fc0, 0xc000, 0x3e80, 0x4120};  // 1.5, -2, 0.25, 10
  std::vector<int32_t> ints = {1, 2, 3};
  write_safetensors(path, {{"w", DType::f32, {10, 10}, f32.data(), {}},
                           {"b", DType::bf16, {4}, bf.data(), {}},
                           {"i", DType::i32, {3}, ints.data(), {}}});
  SafetensorsFile f(path);

  std::vector<double> d(10);
  f.read("w", 37, 10, d.data(), DType::f64);
  for (int i = 0; i < 10; ++i) CHECK(d[i] == 0.5 * (37 + i) - 7.0);

  std::vector<float> one(1);
  f.read("w", 99, 1, one.data(), DType::f32);
  CHECK(one[0] == 42.5f);

  std::vector<uint16_t> h(3);  // f32 → f16: these values are exact in f16
  f.read("w", 0, 3, h.data(), DType::f16);
  CHECK(h == std::vector<uint16_t>{0xc700, 0xc680, 0xc600});  // -7, -6.5, -6

  std::vector<float> bf32(2);
  f.read("b", 1, 2, bf32.data(), DType::f32);
  CHECK(bf32 == std::vector<float>{-2.0f, 0.25f});

  f.read("w", 100, 0, nullptr, DType::f32);  // empty read at the end is fine
  CHECK_THROWS_WITH(f.read("w", 95, 6, d.data(), DType::f64), Catch::Contains(path) && Catch::Contains("outside"));
  CHECK_THROWS_WITH(f.read("w", -1, 1, d.data(), DType::f64), Catch::Contains("outside"));
  CHECK_THROWS_WITH(f.read("nope", 0, 1, d.data(), DType::f64), Catch::Contains("no tensor named 'nope'"));
  std::vector<int32_t> iv(3);
  f.read("i", 0, 3, iv.data(), DType::i32);
  CHECK(iv == ints);
  CHECK_THROWS_WITH(f.read("i", 0, 3, d.data(), DType::f64), Catch::Contains(path) && Catch::Contains("'i'"));
}

TEST_CASE("safetensors reader names the file and the problem") {
  TempDir dir;
  auto p = [&](const char* name) { return dir.path + "/" + name; };
  const std::string f32_4 = std::string(16, '\x01');

  std::ofstream(p("short"), std::ios::binary) << "abcd";
  expect_error(p("short"), "truncated file");

  std::string big(8, '\0');
  big[0] = static_cast<char>(0xe8), big[1] = 0x03;  // 1000
  std::ofstream(p("biglen"), std::ios::binary) << big << std::string(92, ' ');
  expect_error(p("biglen"), "header length 1000 goes beyond the file");

  write_raw(p("json"), R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", f32_4);
  expect_error(p("json"), "not valid JSON");

  write_raw(p("notjson"), "garbage!", f32_4);
  expect_error(p("notjson"), "does not start with '{'");

  write_raw(p("dtype"), R"({"a": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]}})", f32_4);
  expect_error(p("dtype"), "unknown or unsupported dtype 'F8_E4M3'");

  write_raw(p("span"), R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", f32_4);
  expect_error(p("span"), "12 bytes, but data_offsets [0, 16] span 16 bytes");

  write_raw(p("overlap"),
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            std::string(12, '\0'));
  expect_error(p("overlap"), "tensors 'a' and 'b' overlap");

  write_raw(p("outside"), R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(8, '\0'));
  expect_error(p("outside"), "outside the data section");

  write_raw(p("gap"),
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
            R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
            std::string(12, '\0'));
  expect_error(p("gap"), "4 unused bytes before tensor 'b'");

  write_raw(p("trailing"), R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f32_4 + "xx");
  expect_error(p("trailing"), "2 bytes after the last tensor");

  write_raw(p("meta"), R"({"__metadata__": {"step": 3}, "a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})",
            "");
  expect_error(p("meta"), "__metadata__ value of 'step' is not a string");

  write_raw(p("negshape"), R"({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", "");
  expect_error(p("negshape"), "not a non-negative integer");

  write_raw(p("missing"), R"({"a": {"dtype": "U8", "shape": [0]}})", "");
  expect_error(p("missing"), "tensor 'a': missing 'data_offsets'");

  write_raw(p("backwards"), R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", "1234");
  expect_error(p("backwards"), "end before they begin");

  expect_error(p("does_not_exist"), "No such file or directory");

  // Not padded: still a valid file (padding is the writer's choice, not a reader rule).
  write_raw(p("unpadded"), R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32_4, false);
  CHECK(SafetensorsFile(p("unpadded")).tensors().size() == 1);
}

TEST_CASE("safetensors writer errors name the path") {
  TempDir dir;
  float x = 1;
  const std::string bad = dir.path + "/no/such/dir/x.safetensors";
  CHECK_THROWS_WITH(write_safetensors(bad, {{"x", DType::f32, {1}, &x, {}}}),
                    Catch::Contains(bad) && Catch::Contains("No such file or directory"));
  const std::string path = dir.path + "/dup.safetensors";
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", DType::f32, {1}, &x, {}}, {"x", DType::f32, {1}, &x, {}}}),
                    Catch::Contains("'x' given twice"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", DType::f32, {-1}, &x, {}}}), Catch::Contains("invalid shape"));
}
