// The `dscpp` subcommands other than launching (launch.h), each defined in its own file here.
// CLI parsing lives in main.cpp only: CLI11 is expensive to compile.
#pragma once

#include "configs/load.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::launcher {

struct ConfigCheckArgs {
  std::string file;
  // Accelerate's config file and flags instead of FILE: the DeepSpeed config they derive.
  std::string accelerate_config_file;
  std::map<std::string, std::string> accelerate_flags;
  config::RunFacts facts;
  bool json = false;   // print the effective config as JSON instead of the table
  bool quiet = false;  // print only problems
};

// Prints the effective config (stdout) or the problems (stderr). Returns the exit status:
// 0 valid, 1 invalid.
int run_config_check(const ConfigCheckArgs& args);
// `dscpp estimate`: DeepSpeed's ZeRO-2/3 memory estimates (core/zero_estimate.h) for counts
// given on the command line or read from a plugin through `dscpp-runtime --describe_model`.
struct EstimateArgs {
  int stage = 0;                                // 2 or 3
  std::optional<double> total_params;           // P
  std::optional<double> largest_layer_params;   // Lp (stage 3)
  int64_t num_gpus_per_node = 1;                // DeepSpeed's defaults
  int64_t num_nodes = 1;
  double additional_buffer_factor = 1.5;
  std::string model;                            // a plugin .so instead of P and Lp
  std::vector<std::string> plugin_args;         // for the plugin (after --)
  std::vector<std::string> freeze, train_only;  // dscpp-runtime's --freeze / --train_only, with --model
};
// Prints the table (stdout); throws dscpp::Error for bad inputs. Returns the exit status.
int run_estimate(const EstimateArgs& args);

// `dscpp zero-to-fp32`: a checkpoint of any stage and world size → one fp32 safetensors file
// by parameter name (checkpoint/zero_to_fp32.h). Throws dscpp::Error naming the file or key
// at fault. Returns the exit status.
struct ZeroToFp32Args {
  std::string checkpoint;          // a save dir (its `latest`) or a tag dir
  std::string out;                 // the .safetensors file to write
  std::string state = "fp32";      // or an optimizer state ("exp_avg", ...)
  double progress_interval = 2.0;  // seconds between progress lines on stderr
  bool quiet = false;
};
int run_zero_to_fp32(const ZeroToFp32Args& args);

// `dscpp export-hf CKPT OUT_DIR`: a Hugging Face model directory (checkpoint/export_hf.h).
struct ExportHfArgs {
  std::string checkpoint;          // a save dir (its `latest`) or a tag dir
  std::string out_dir;
  std::string dtype = "fp32";      // fp32, bf16 or fp16
  std::string max_shard_size = "5GB";
  std::string config;              // instead of the checkpoint's config.json
  bool adapter = false;            // PEFT's adapter directory only
  bool merge = false;              // the LoRA pairs folded into their base weights
  std::string base;                // --adapter: base_model_name_or_path to write
  double progress_interval = 2.0;
  bool quiet = false;
};
int run_export_hf(const ExportHfArgs& args);

// `dscpp gradcheck|generate PLUGIN.so [ARGS]`: replaces this process with dscpp-runtime
// --gradcheck|--generate --model PLUGIN.so ARGS (returns only by throwing).
[[noreturn]] void run_runtime_tool(const std::string& tool, const std::vector<std::string>& args);

// `dscpp aio-bench ARGS`: replaces this process with dscpp-aio-bench ARGS (returns only by throwing).
[[noreturn]] void run_aio_bench(const std::vector<std::string>& args);

// Prints every key of the schema with its default.
int run_config_keys();
// Prints what this build contains and what this machine offers (`ds_report`'s role).
int run_report();

// `dscpp tokenize`: a Hugging Face tokenizer directory (tokenizer/tokenizer.h) on text given on
// the command line or in files of JSON string literals, one per line.
struct TokenizeArgs {
  std::string tokenizer;                // a directory with tokenizer.json, or the file
  std::optional<std::string> encode;    // text → a JSON array of ids
  std::optional<std::string> decode;    // "1,2,3" or "[1, 2, 3]" → the text
  std::string encode_lines;             // a file of JSON strings → one JSON array per line
  std::string decode_lines;             // a file of JSON arrays → one JSON string per line
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
  // Data preparation: documents from `input` into a token file at `output` (tokenize_data.cpp).
  std::vector<std::string> input;  // plain text (one document per file, or per line with `lines`), .gz too
  std::string output;              // PREFIX: PREFIX.bin (+ PREFIX.idx for megatron)
  std::string format = "megatron";  // or llmc
  bool lines = false;
  std::string json_key;  // JSON lines: the documents are this key's strings
  std::string eod;       // the end-of-document token; default the tokenizer's eos_token
  int threads = 0;       // 0: every hardware thread
};
int run_tokenize(const TokenizeArgs& args);

// `dscpp bleu REF... [-i HYP]`: corpus BLEU (and chrF) of one hypothesis per line against one or
// more reference files, read and scored as the sacrebleu command does (metrics/).
struct BleuArgs {
  std::vector<std::string> references;  // one file per reference; all as long as the hypotheses
  std::string input;                    // the hypotheses; empty: stdin
  std::vector<std::string> metrics{"bleu"};  // bleu, chrf
  bool lowercase = false;
  std::string tokenize = "13a";  // or none
  std::string smooth_method = "exp";
  std::optional<double> smooth_value;
  int chrf_word_order = 0;
  bool chrf_lowercase = false;
  bool score_only = false;
  int width = 2;                // decimals of the score
  bool sentence_level = false;  // a score per segment (BLEU over the orders each reaches)
  bool json = false;            // every number at full precision, one JSON object per score
};
int run_bleu(const BleuArgs& args);

}  // namespace dscpp::launcher
