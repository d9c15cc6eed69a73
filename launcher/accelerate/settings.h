// Hugging Face Accelerate's launch settings: the config file `accelerate config` writes (YAML,
// or the JSON `accelerate config default` writes) and `accelerate launch`'s flags, by
// Accelerate's own names, each remembering where it was given (file:line or --flag) so that
// every later message can point at it. What the settings mean for a dscpp launch is
// deepspeed_config.h and launch_mapping.h; this file only reads and merges them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher::accelerate {

// One setting as given. Scalars keep their text; `type` says how it was read.
struct Value {
  enum class Type { string, integer, number, boolean };
  Type type = Type::string;
  std::string text;  // as written ("2", "bf16", "true")
  long long integer = 0;
  double number = 0;  // integer too
  bool boolean = false;
  std::string where;  // "cfg.yaml:12" or "--zero_stage"
};

struct Settings {
  std::string file;                     // the config file read; "" = none
  std::map<std::string, Value> values;  // by Accelerate's name (deepspeed_config's keys unprefixed)
  // The keys of the file's deepspeed_config section, as Accelerate hands them to the program
  // (ACCELERATE_CONFIG_DS_FIELDS): with a deepspeed_config_file some of them are an error.
  std::vector<std::string> deepspeed_fields_in_file;
  bool mixed_precision_from_file = false;  // no --mixed_precision, the file's was taken
  // Keys accepted but meaningless to dscpp (other backends, Python, TPUs), "name (where)".
  std::vector<std::string> not_applicable;

  const Value* find(std::string_view name) const;
  std::optional<long long> integer(std::string_view name) const;
  std::optional<double> number(std::string_view name) const;
  std::optional<bool> boolean(std::string_view name) const;
  std::optional<std::string> string(std::string_view name) const;
  // "name (where)" for messages; "name" when not given.
  std::string describe(std::string_view name) const;
};

// Reads an Accelerate config file. Refuses, naming the file and line: malformed YAML (a tab in
// the indentation included), a duplicate key, an unknown key (with the closest known one), a
// value of the wrong type.
Settings read_config_file(const std::string& path);

// `accelerate launch` flags as given on the command line (name without dashes -> text; flags
// without a value have "true"), typed like the file's values.
Settings settings_from_flags(const std::map<std::string, std::string>& flags);

// Accelerate's precedence: a flag given on the command line wins over the file, key by key.
Settings merge(const Settings& file, const Settings& flags);

// Where `accelerate launch` looks when no --config_file is given: $HF_HOME/accelerate/,
// else $XDG_CACHE_HOME/huggingface/accelerate/, else ~/.cache/huggingface/accelerate/,
// default_config.yaml.
std::string default_config_path(const std::map<std::string, std::string>& env);

// The flags this module reads, by Accelerate's names (the CLI adds each as --name and --na-me).
struct FlagSpec {
  const char* name;
  const char* help;
  bool takes_value = true;
};
const std::vector<FlagSpec>& flag_specs();

}  // namespace dscpp::launcher::accelerate
