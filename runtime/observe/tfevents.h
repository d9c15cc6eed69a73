// TensorBoard event files, written natively: TFRecord framing (the length, its masked CRC-32C,
// the record, its masked CRC-32C) around tensorflow.Event messages. The few protobuf fields an
// event file needs (Event.wall_time, step, file_version, summary, session_log; Summary.Value.tag
// and simple_value; SessionLog.status) are encoded here by hand: five fields of fixed wire types
// do not justify a protoc step and a protobuf runtime in the build. TensorBoard itself reads the
// files in tests/system/tensorboard_monitor.sh.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dscpp::runtime {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(std::string_view data);

// Serialized tensorflow.Event messages.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
// SessionLog START at `step`: TensorBoard drops the points of earlier runs at or after `step`
// (what a resumed run writes, so that a crashed run's steps past its checkpoint are not shown twice).
std::string session_start_event(double wall_time, int64_t step);

// An event file in `dir` (created with its parents), named as torch's SummaryWriter names them:
// events.out.tfevents.<seconds>.<host>.<pid>.0. Records are buffered until flush().
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void scalar(std::string_view tag, int64_t step, double value);
  void session_start(int64_t step);
  // Writes the buffered records and flushes the file (a crash after this leaves them readable).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void add(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string pending_;
};

}  // namespace dscpp::runtime
