// TensorBoard event files at the byte level: CRC-32C's check value, TFRecord framing, and the
// Event messages against their protobuf encoding written out by hand from event.proto and
// summary.proto. tests/system/tensorboard_monitor.sh has TensorBoard itself read whole files.
#include "runtime/observe/tfevents.h"
#include "runtime/observe/train_log.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace dscpp::runtime;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += static_cast<char>(c);
  return s;
}

template <typename T>
T read_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

}  // namespace

TEST_CASE("CRC-32C and TFRecord framing") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the Castagnoli check value
  CHECK(crc32c("") == 0u);
  const std::string r = tfrecord("abc");
  REQUIRE(r.size() == 8 + 4 + 3 + 4);
  CHECK(read_le<uint64_t>(r, 0) == 3);
  CHECK(read_le<uint32_t>(r, 8) == masked_crc32c(r.substr(0, 8)));
  CHECK(r.substr(12, 3) == "abc");
  CHECK(read_le<uint32_t>(r, 15) == masked_crc32c("abc"));
  const uint32_t c = crc32c("abc");
  CHECK(masked_crc32c("abc") == ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST_CASE("Event messages are protobuf as event.proto defines them") {
  // wall_time 1.5 (field 1, fixed64), file_version "brain.Event:2" (field 3)
  std::string want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 13}) + "brain.Event:2";
  CHECK(file_version_event(1.5) == want);
  // step 300 (field 2, varint 0xAC 0x02); summary (field 5) { value (1) { tag (1) "a/b", simple_value (2) 2.0f } }
  std::string value = bytes({0x0A, 3}) + "a/b" + bytes({0x15, 0, 0, 0, 0x40});
  std::string summary = bytes({0x0A, static_cast<int>(value.size())}) + value;
  want =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0xAC, 0x02, 0x2A, static_cast<int>(summary.size())}) + summary;
  CHECK(scalar_event(1.5, 300, "a/b", 2.0f) == want);
  // session_log (field 7) { status (1): START (1) }
  CHECK(session_start_event(1.5, 4) == bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 4, 0x3A, 2, 0x08, 1}));
}

TEST_CASE("an event file holds whole records after each flush") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("dscpp-tfevents-" + std::to_string(getpid()))).string();
  std::string path;
  {
    EventFileWriter w(dir + "/job");
    path = w.path();
    CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
    w.scalar("Train/Samples/train_loss", 8, 2.5);
    w.flush();
    w.scalar("Train/Samples/train_loss", 16, 2.25);  // written by the destructor
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  int records = 0;
  for (size_t at = 0; at < file.size(); ++records) {
    REQUIRE(at + 12 <= file.size());
    const uint64_t n = read_le<uint64_t>(file, at);
    REQUIRE(read_le<uint32_t>(file, at + 8) == masked_crc32c(file.substr(at, 8)));
    REQUIRE(at + 12 + n + 4 <= file.size());
    CHECK(read_le<uint32_t>(file, at + 12 + n) == masked_crc32c(file.substr(at + 12, n)));
    at += 12 + n + 4;
  }
  CHECK(records == 3);  // file_version and two scalars
  std::filesystem::remove_all(dir);
}

TEST_CASE("the progress line says elapsed and remaining time") {
  CHECK(format_duration(42.4) == "42s");
  CHECK(format_duration(245) == "4m05s");
  CHECK(format_duration(7380) == "2h03m");
  StepReport r;
  r.step = 10;
  r.total_steps = 40;
  r.elapsed_s = 65;
  r.remaining_s = 200;
  CHECK(format_step_line(r).find(" | 1m05s elapsed, ETA 3m20s") != std::string::npos);
  r.step = 40;
  CHECK(format_step_line(r).find("ETA") == std::string::npos);
}
