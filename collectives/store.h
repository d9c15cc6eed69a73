// The rendezvous store: a small key-value service every rank of a job can reach. Rank 0 hosts
// it at MASTER_ADDR:MASTER_PORT (TcpStore); ranks use it to find each other and exchange the
// few bytes that bootstrap gloo, shm and NCCL (addresses, segment names, unique ids), and to
// publish progress when a collective hangs. Values are opaque bytes. Keys are flat strings;
// PrefixStore gives each communicator group its own namespace.
//
// Every blocking call takes a timeout and, when it expires, throws StoreTimeout naming the
// keys that are still missing; nothing here waits forever.
#pragma once

#include "core/error.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::comm {

using Millis = std::chrono::milliseconds;

class StoreTimeout : public Error {
 public:
  StoreTimeout(const std::string& message, std::vector<std::string> missing)
      : Error(message), missing_keys(std::move(missing)) {}
  std::vector<std::string> missing_keys;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, std::string_view value) = 0;
  // Blocks until `key` exists, then returns its value. Throws StoreTimeout after `timeout`.
  virtual std::string get(const std::string& key, Millis timeout) = 0;
  // Adds `delta` to the integer stored at `key` (a missing key counts as 0); returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Returns the subset of `keys` still missing after waiting up to `timeout` (empty: all there).
  // Does not throw on timeout, so callers can say *which* peers never arrived.
  virtual std::vector<std::string> wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // True when the key exists now; never blocks.
  virtual bool check(const std::string& key) = 0;
  virtual void erase(const std::string& key) = 0;
};

// In-process store for ranks that are threads of one process (unit tests, single-rank runs).
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<std::string> wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::string& key) override;
  void erase(const std::string& key) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

// Prepends "<prefix>/" to every key of an underlying store it shares ownership of.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}
  void set(const std::string& key, std::string_view value) override { base_->set(prefix_ + key, value); }
  std::string get(const std::string& key, Millis timeout) override { return base_->get(prefix_ + key, timeout); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  std::vector<std::string> wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::string& key) override { return base_->check(prefix_ + key); }
  void erase(const std::string& key) override { base_->erase(prefix_ + key); }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// Every rank of a group announces itself under "<tag>/<rank>" and waits for the others. When
// some never arrive, throws StoreTimeout whose message names the missing ranks and the time
// waited, e.g. "rendezvous 'world': ranks 2, 3 of 4 did not arrive within 30.0 s".
void rendezvous(Store& store, const std::string& tag, int rank, int size, Millis timeout);

// "2, 3" or "0-5, 9": the compact rank lists used in every message naming peers.
std::string format_rank_list(const std::vector<int>& ranks);

}  // namespace dscpp::comm
