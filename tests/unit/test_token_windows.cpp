// models/common's token windows with packed documents: the [ids | positions | first keys] sample
// of --reset_attention_mask / --reset_position_ids, by Megatron's rule (an end-of-document token
// belongs to the document it ends; the next document starts after it).
#include "causal_lm.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using dscpp::models::Documents;
using dscpp::models::TokenWindows;
using V = std::vector<int32_t>;

struct TokenFile {
  std::string dir, path;
  explicit TokenFile(const std::vector<uint16_t>& tokens) {
    char tmpl[] = "/tmp/dscpp_windows_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    path = dir + "/tokens.u16";
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  ~TokenFile() { std::filesystem::remove_all(dir); }
};

// Window 0 of context 8 (tokens 0 … 8), with end-of-document token 9.
std::vector<V> window(bool reset_attention, bool reset_positions) {
  static const TokenFile file({1, 2, 9, 3, 4, 5, 9, 9, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7});
  Documents docs;
  docs.eod = 9;
  docs.reset_attention = reset_attention;
  docs.reset_positions = reset_positions;
  const TokenWindows w("test", file.path, "", 2, 50, 8, docs);
  V input(24, -100), target(8, -100);
  w.load(0, 0, input.data(), target.data());
  return {V(input.begin(), input.begin() + 8), V(input.begin() + 8, input.begin() + 16),
          V(input.begin() + 16, input.end()), target};
}

}  // namespace

TEST_CASE("packed documents: positions and first keys by Megatron's rule", "[tokens]") {
  const V ids = {1, 2, 9, 3, 4, 5, 9, 9}, targets = {2, 9, 3, 4, 5, 9, 9, 6};
  const V reset = {0, 1, 2, 0, 1, 2, 3, 0}, plain = {0, 1, 2, 3, 4, 5, 6, 7};
  const V first = {0, 0, 0, 3, 3, 3, 3, 7}, none = V(8, 0);
  auto both = window(true, true);
  CHECK(both[0] == ids);
  CHECK(both[1] == reset);
  CHECK(both[2] == first);
  CHECK(both[3] == targets);  // the loss is untouched (--eod_mask_loss is its own flag)
  auto mask = window(true, false);
  CHECK(mask[1] == plain);
  CHECK(mask[2] == first);
  auto positions = window(false, true);
  CHECK(positions[1] == reset);
  CHECK(positions[2] == none);
  // Without either flag a sample is its ids alone: nothing is written past them.
  auto neither = window(false, false);
  CHECK(neither[0] == ids);
  CHECK(neither[1] == V(8, -100));
}
