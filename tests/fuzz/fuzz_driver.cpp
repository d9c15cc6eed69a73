// A standalone driver for LLVMFuzzerTestOneInput when libFuzzer is not linked: it runs
// every seed, then random mutations of the seeds (byte edits, token insertions from a
// dictionary of JSON syntax and config keys, splices between seeds) for a fixed time.
// Not coverage-guided; it is the short smoke run the suite can afford on any compiler.
//
//   fuzz_config [--seconds N] [--seed S] FILE_OR_DIR...
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTokens = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "\"",
                                          "\"auto\"",
                                          "null",
                                          "true",
                                          "false",
                                          "0",
                                          "-1",
                                          "1e9",
                                          "5e8",
                                          "0.5",
                                          "Infinity",
                                          "NaN",
                                          "//",
                                          "/*",
                                          "*/",
                                          "#",
                                          "\n",
                                          "\"stage\": 3",
                                          "\"zero_optimization\": {",
                                          "\"offload_param\": {",
                                          "\"device\": \"nvme\"",
                                          "\"nvme_path\": \"/x\"",
                                          "\"train_batch_size\": ",
                                          "\"fp16\": {\"enabled\": true}",
                                          "\"bf16\": {\"enabled\": true}",
                                          "\"optimizer\": {\"type\": \"Lamb\"",
                                          "\"scheduler\": {\"type\": \"OneCycle\"",
                                          "\"params\": {",
                                          "\\u0000",
                                          "\\ud800",
                                          "'",
                                          "\"train_micro_batch_size_per_gpu\": \"auto\"",
                                          "\"elasticity\": {\"enabled\": true}",
                                          "\"cpu_offload\": true",
                                          "\"zero_optimization\": true"};

std::vector<std::string> load_seeds(const std::vector<std::string>& paths) {
  std::vector<std::string> seeds;
  auto add = [&](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    seeds.push_back(s.str());
  };
  for (const auto& p : paths) {
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".json") add(e.path());
    } else {
      add(p);
    }
  }
  if (seeds.empty()) seeds.push_back("{}");
  return seeds;
}

std::string mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits; ++i) {
    size_t at = pick(s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 1:
        s.insert(at, 1, static_cast<char>(rng()));
        break;
      case 2:
        if (!s.empty()) s.erase(pick(s.size()), 1 + pick(16));
        break;
      case 3:
        s.insert(at, kTokens[pick(kTokens.size())]);
        break;
      case 4: {
        const std::string& other = seeds[pick(seeds.size())];
        size_t from = pick(other.size());
        s.insert(at, other.substr(from, pick(200)));
        break;
      }
      case 5:
        if (!s.empty()) {
          size_t from = pick(s.size());
          s.insert(at, s.substr(from, pick(64)));
        }
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  std::uint64_t seed = 20261122;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      seconds = std::stod(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else
      paths.push_back(a);
  }
  std::vector<std::string> seeds = load_seeds(paths);
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  std::mt19937_64 rng(seed);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int batch = 0; batch < 64; ++batch, ++runs) {
      std::string input = mutate(seeds[rng() % seeds.size()], seeds, rng);
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
    }
  }
  std::printf("fuzz_config: %zu seeds, %llu mutated inputs in %.0f s (seed %llu), no failures\n", seeds.size(),
              static_cast<unsigned long long>(runs), seconds, static_cast<unsigned long long>(seed));
  return 0;
}
