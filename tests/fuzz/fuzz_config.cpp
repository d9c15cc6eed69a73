// Fuzz target for the config loader: any byte string must come back as either a config or
// a list of diagnostics — never a crash, a hang, an escaped exception or undefined
// behaviour (run it in the ASan/UBSan build). An accepted config must also survive its own
// effective-config dump: the dump reloads and dumps to the same text.
//
// Built two ways: with -fsanitize=fuzzer (clang, coverage-guided libFuzzer) it is a normal
// libFuzzer target; otherwise `fuzz_driver.cpp` supplies a main that mutates the seed
// corpus at random for a fixed time, which is what the test suite runs.
#include "configs/load.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dscpp::config;
  std::string text(reinterpret_cast<const char*>(data), size);
  RunFacts facts;
  facts.world_size = 1 + static_cast<std::int64_t>(size % 8);
  facts.hidden_size = 64;
  facts.total_steps = 100;
  LoadedConfig c = load_config_text(text, "fuzz.json", facts);
  if (!c.ok()) {
    for (const auto& d : c.diagnostics.errors()) {
      if (d.message.empty()) {
        std::fprintf(stderr, "an error without a message at path '%s'\n", d.path.c_str());
        std::abort();
      }
    }
    return 0;
  }
  std::string dump = format_effective_config_json(c);
  format_effective_config_table(c);
  LoadedConfig again = load_config_text(dump, "dump.json", facts);
  if (!again.ok()) {
    std::fprintf(stderr,
                 "the effective config of an accepted input does not reload:\n%s\n--- input:\n%s\n--- dump:\n%s\n",
                 again.diagnostics.format("dump.json").c_str(), text.c_str(), dump.c_str());
    std::abort();
  }
  if (format_effective_config_json(again) != dump) {
    std::fprintf(stderr, "the effective config changes when reloaded\n--- input:\n%s\n", text.c_str());
    std::abort();
  }
  return 0;
}
