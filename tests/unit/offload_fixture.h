// Shared by the offload unit tests (aio, tensor_swapper, param_home, optimizer_offload): a
// scratch directory removed afterwards, and the async I/O backends this build has.
#pragma once

#include "build_config.h"
#include "offload/aio_options.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace dscpp::test {

struct TempDir {
  std::string path;
  explicit TempDir(const char* base = "/tmp") {
    std::string tmpl = std::string(base) + "/dscpp_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;  // tests make directories read-only; give them back before removing
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::vector<offload::AioBackend> built_backends() {
  std::vector<offload::AioBackend> b;
  if (DSCPP_HAVE_IO_URING) b.push_back(offload::AioBackend::io_uring);
  if (DSCPP_HAVE_LIBAIO) b.push_back(offload::AioBackend::libaio);
  return b;
}

}  // namespace dscpp::test
