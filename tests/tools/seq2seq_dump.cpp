// Runs models::read_seq2seq on one file and prints each example as a JSON line
// {"input_ids": [...], "labels": [...]}, then the counts on stderr; a refusal is printed on stderr
// with exit status 1. The seq2seq_parity test compares this against transformers.
//   seq2seq_dump [--tokenizer DIR] [--source_lang L --target_lang L | --text_column C --summary_column C]
//                [--source_prefix P] [--max_source_length N] [--max_target_length N] [--truncation]
//                [--vocab_size N] [--threads N] FILE
#include "dscpp/layers.h"
#include "seq2seq_data.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

using namespace dscpp;

namespace {

void print_ids(const char* key, const std::vector<int32_t>& ids) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %d" : "%d", ids[i]);
  std::printf("]");
}

int run(int argc, char** argv) {
  models::Seq2SeqOptions o;
  std::string tokenizer_dir, file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--truncation") {
      o.truncation = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      file = a;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--tokenizer") tokenizer_dir = v;
    else if (a == "--source_lang") o.source_lang = v;
    else if (a == "--target_lang") o.target_lang = v;
    else if (a == "--text_column") o.text_column = v;
    else if (a == "--summary_column") o.summary_column = v;
    else if (a == "--source_prefix") o.source_prefix = v;
    else if (a == "--max_source_length") o.max_source_length = std::atoll(v.c_str());
    else if (a == "--max_target_length") o.max_target_length = std::atoll(v.c_str());
    else if (a == "--vocab_size") o.vocab_size = std::atoll(v.c_str());
    else if (a == "--threads") o.threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "usage: seq2seq_dump [options] FILE\n");
    return 2;
  }
  std::unique_ptr<tok::Tokenizer> tokenizer;
  if (!tokenizer_dir.empty()) tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(tokenizer_dir));
  models::Seq2SeqCounts counts;
  for (const auto& ex : models::read_seq2seq(file, o, tokenizer.get(), &counts)) {
    std::printf("{");
    print_ids("input_ids", ex.input_ids);
    std::printf(", ");
    print_ids("labels", ex.labels);
    std::printf("}\n");
  }
  std::fprintf(stderr, "examples %lld, skipped %lld, truncated sources %lld, targets %lld\n",
               static_cast<long long>(counts.examples), static_cast<long long>(counts.skipped),
               static_cast<long long>(counts.truncated_sources), static_cast<long long>(counts.truncated_targets));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const layers::Failure& f) {
    std::fprintf(stderr, "%s\n", f.message.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  return 1;
}
