#include "runtime/observe/tfevents.h"

#include "core/error.h"

#include <fmt/core.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace dscpp::runtime {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32c = make_crc32c_table();

// Protobuf wire format: varints, and keys of (field << 3) | wire type.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <typename T>
void little_endian(std::string& out, T v) {
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);  // x86 and arm64 are little-endian, as the wire format
  out.append(bytes, sizeof v);
}

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void key(std::string& out, uint32_t field, Wire wire) {
  varint(out, (field << 3) | wire);
}

void bytes_field(std::string& out, uint32_t field, std::string_view data) {
  key(out, field, kBytes);
  varint(out, data.size());
  out.append(data);
}

// Event.wall_time (1) and Event.step (2), the start of every event.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  key(e, 1, kFixed64);
  little_endian(e, wall_time);
  if (step != 0) {
    key(e, 2, kVarint);
    varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrc32c[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  little_endian(length, static_cast<uint64_t>(data.size()));
  std::string out = length;
  little_endian(out, masked_crc32c(length));
  out.append(data);
  little_endian(out, masked_crc32c(data));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value: tag (1), simple_value (2)
  bytes_field(v, 1, tag);
  key(v, 2, kFixed32);
  little_endian(v, value);
  std::string summary;  // Summary: repeated Value value (1)
  bytes_field(summary, 1, v);
  std::string e = event_head(wall_time, step);
  bytes_field(e, 5, summary);
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;  // SessionLog.status (1) = START (1)
  key(log, 1, kVarint);
  varint(log, 1);
  std::string e = event_head(wall_time, step);
  bytes_field(e, 7, log);
  return e;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("tensorboard: cannot create {}: {}", dir, ec.message());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const double t = now_seconds();
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{:010d}.{}.{}.0", static_cast<int64_t>(t), host, getpid()))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) fail("tensorboard: cannot write {}: {}", path_, std::strerror(errno));
  add(file_version_event(t));
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (!file_) return;
  try {
    flush();
  } catch (const Error&) {  // a full disk at exit must not terminate: the run itself is done
  }
  std::fclose(file_);
}

void EventFileWriter::add(const std::string& event) {
  pending_ += tfrecord(event);
}

void EventFileWriter::scalar(std::string_view tag, int64_t step, double value) {
  add(scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

void EventFileWriter::session_start(int64_t step) {
  add(session_start_event(now_seconds(), step));
}

void EventFileWriter::flush() {
  if (!pending_.empty() && std::fwrite(pending_.data(), 1, pending_.size(), file_) != pending_.size())
    fail("tensorboard: cannot write {}: {}", path_, std::strerror(errno));
  pending_.clear();
  if (std::fflush(file_) != 0) fail("tensorboard: cannot write {}: {}", path_, std::strerror(errno));
}

}  // namespace dscpp::runtime
