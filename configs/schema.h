// The schema is written once, as `describe(Visitor&, Section&)` functions that list each
// section's keys against the typed struct fields. Every consumer walks the same list:
// the reader fills structs from JSON (with strict key checking), the printer dumps the
// effective config, the key lister documents the schema. Adding a key is one line.
#pragma once

#include "configs/json.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::config {

struct FieldOpts {
  const char* alias = nullptr;                            // second accepted name (DeepSpeed's pydantic alias)
  double min = -std::numeric_limits<double>::infinity();  // inclusive bounds for numbers
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::vector<const char*> choices = {};  // allowed strings; the first spelling is canonical
  bool case_insensitive = false;          // choices compare ignoring case
  bool scalar_ok = false;                 // list field also accepts one scalar
  const char* deprecated = nullptr;       // accepted with this warning
  const char* ignored = nullptr;          // accepted, has no effect, warn with this text
  bool required = false;                  // absence is an error (optional<> fields only)
  bool infinity_ok = false;               // integer field accepts Infinity (= never)
  // String fields whose valid set is not a plain list (e.g. names matched case-insensitively
  // for some entries only): returns false to reject, may rewrite the value to its canonical
  // spelling. `choices` still lists the names for the error message and the suggestion.
  bool (*canonical)(std::string& value) = nullptr;
};

// The bounds most numeric keys share.
inline const FieldOpts kNonNegative{.min = 0};
inline const FieldOpts kPositive{.min = 1};

struct SectionOpts {
  const char* alias = nullptr;
  // DeepSpeed validates this block with pydantic: an "auto" value with no resolution rule
  // falls back to the default there (loose blocks keep the string and crash later).
  bool strict = false;
  const char* deprecated = nullptr;
};

// DeepSpeed's DtypeEnum spellings, for fields naming a dtype.
inline const std::vector<const char*> kDtypeChoices = {
    "fp32",          "fp16",    "bf16", "int8",           "torch.float32", "float32",   "float",
    "torch.float16", "float16", "half", "torch.bfloat16", "bfloat16",      "torch.int8"};

// The "dscpp" section's no_weight_decay roles and lr_scheduler_type names (the HF Trainer's
// schedules dscpp runs without a "scheduler" block).
inline const std::vector<const char*> kNoDecayRoles = {"bias", "norm", "embedding"};
inline const std::vector<const char*> kDefaultScheduleTypes = {"linear", "cosine", "constant", "constant_with_warmup"};

class Visitor {
 public:
  virtual ~Visitor() = default;

  virtual void field(std::string_view key, bool& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::int64_t& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, double& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::string& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::optional<bool>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::optional<std::int64_t>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::optional<double>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::optional<std::string>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::vector<double>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::vector<std::int64_t>& v, const FieldOpts& o = {}) = 0;
  virtual void field(std::string_view key, std::vector<std::string>& v, const FieldOpts& o = {}) = 0;
  // Free-form JSON passed through unchanged (e.g. apex or autotuning argument maps).
  virtual void field(std::string_view key, std::optional<JsonValue>& v, const FieldOpts& o = {}) = 0;

  template <typename S>
  void section(std::string_view key, S& s, const SectionOpts& o = {}) {
    if (begin_section(key, o, /*present=*/true)) {
      describe(*this, s);
      end_section();
    }
  }

  // A block whose keys depend on values read earlier (an optimizer's params follow its type).
  template <typename F>
  void section_fn(std::string_view key, F&& describe_fn, const SectionOpts& o = {}) {
    if (begin_section(key, o, /*present=*/true)) {
      describe_fn(*this);
      end_section();
    }
  }

  // A block whose absence (or null) means "not configured", distinct from its defaults.
  template <typename S>
  void section(std::string_view key, std::optional<S>& s, const SectionOpts& o = {}) {
    bool want = begin_section(key, o, s.has_value());
    if (!want) return;
    if (!s) s.emplace();
    describe(*this, *s);
    end_section();
  }

  // An object whose keys are user-chosen names (curriculum metrics, compression groups).
  template <typename S>
  void named_sections(std::string_view key, std::map<std::string, S>& m, const SectionOpts& o = {}) {
    std::vector<std::string> names;
    for (const auto& [name, _] : m) names.push_back(name);
    if (!begin_named(key, o, names)) return;
    for (const auto& name : names) {
      if (begin_entry(name)) {
        describe(*this, m[name]);
        end_section();
      }
    }
    end_section();
  }

 protected:
  // `present` tells a printer whether an optional block exists; a reader ignores it and
  // answers from the JSON. Returning false skips the block's fields.
  virtual bool begin_section(std::string_view key, const SectionOpts& o, bool present) = 0;
  virtual void end_section() = 0;
  // Fills `names` with the entry names to visit (a reader: the JSON's keys).
  virtual bool begin_named(std::string_view key, const SectionOpts& o, std::vector<std::string>& names) = 0;
  virtual bool begin_entry(const std::string& name) = 0;
};

}  // namespace dscpp::config
