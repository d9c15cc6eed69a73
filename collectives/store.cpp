#include "collectives/store.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::comm {

void MemoryStore::set(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    data_[key] = std::string(value);
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Millis timeout) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; }))
    throw StoreTimeout(fmt::format("store: key '{}' did not appear within {:.1f} s", key, timeout.count() / 1e3),
                       {key});
  return data_[key];
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard lock(mutex_);
    auto it = data_.find(key);
    sum = (it == data_.end() ? 0 : std::stoll(it->second)) + delta;
    data_[key] = std::to_string(sum);
  }
  changed_.notify_all();
  return sum;
}

std::vector<std::string> MemoryStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock lock(mutex_);
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!data_.count(k)) out.push_back(k);
    return out;
  };
  changed_.wait_for(lock, timeout, [&] { return missing().empty(); });
  return missing();
}

bool MemoryStore::check(const std::string& key) {
  std::lock_guard lock(mutex_);
  return data_.count(key) > 0;
}

void MemoryStore::erase(const std::string& key) {
  std::lock_guard lock(mutex_);
  data_.erase(key);
}

std::vector<std::string> PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  auto missing = base_->wait(full, timeout);
  for (auto& k : missing) k.erase(0, prefix_.size());
  return missing;
}

std::string format_rank_list(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j >= i + 2 ? fmt::format("{}-{}", sorted[i], sorted[j]) : std::to_string(sorted[i]);
    if (j == i + 1) out += fmt::format(", {}", sorted[j]);
    i = j + 1;
  }
  return out;
}

void rendezvous(Store& store, const std::string& tag, int rank, int size, Millis timeout) {
  store.set(fmt::format("{}/{}", tag, rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}/{}", tag, r));
  auto start = std::chrono::steady_clock::now();
  auto missing = store.wait(keys, timeout);
  if (missing.empty()) return;
  std::vector<int> ranks;
  for (const auto& k : missing) ranks.push_back(std::stoi(k.substr(tag.size() + 1)));
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  throw StoreTimeout(fmt::format("rendezvous '{}': rank{} {} of {} did not arrive within {:.1f} s (this is rank {})",
                                 tag, ranks.size() == 1 ? "" : "s", format_rank_list(ranks), size, waited, rank),
                     missing);
}

}  // namespace dscpp::comm
