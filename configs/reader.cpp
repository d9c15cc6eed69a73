#include "configs/reader.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace dscpp::config {

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string format_limit(double x) {
  if (std::isinf(x)) return x > 0 ? "infinity" : "-infinity";
  if (x == std::floor(x) && std::fabs(x) < 1e15) return fmt::format("{}", static_cast<long long>(x));
  return fmt::format("{}", x);
}

std::string range_text(const FieldOpts& o) {
  bool lo = !std::isinf(o.min), hi = !std::isinf(o.max);
  if (lo && hi)
    return fmt::format("from {}{} to {}", format_limit(o.min), o.min_exclusive ? " (exclusive)" : "",
                       format_limit(o.max));
  if (lo) return fmt::format("{} {}", o.min_exclusive ? ">" : ">=", format_limit(o.min));
  if (hi) return fmt::format("<= {}", format_limit(o.max));
  return "";
}

struct Frame {
  const JsonValue* object;
  std::string path;
  bool strict;
  bool any_keys = false;  // named sections: every key is a name
  std::vector<std::string> known;
  std::set<std::string, std::less<>> consumed;
};

class Reader final : public Visitor {
 public:
  Reader(const JsonValue& root, ReadState& state) : state_(state) {
    frames_.push_back(Frame{&root, "", false, false, {}, {}});
  }

  void finish() {
    check_unknown_keys(frames_.back());
    report_unknown_keys();
  }

  void field(std::string_view key, bool& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::int64_t& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, double& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::string& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::optional<bool>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::optional<std::int64_t>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::optional<double>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::optional<std::string>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::vector<double>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::vector<std::int64_t>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::vector<std::string>& v, const FieldOpts& o) override { read(key, v, o); }
  void field(std::string_view key, std::optional<JsonValue>& v, const FieldOpts& o) override {
    const JsonValue* j = locate(key, o, /*section=*/false, /*raw=*/true);
    if (!j) return;
    if (j->is_null())
      v.reset();
    else
      v = *j;
  }

 protected:
  bool begin_section(std::string_view key, const SectionOpts& o, bool) override {
    FieldOpts fo{.alias = o.alias, .deprecated = o.deprecated};
    const JsonValue* j = locate(key, fo, /*section=*/true);
    if (!j || j->is_null()) return false;
    if (j->kind != JsonValue::Kind::object) {
      error(j->loc, fmt::format("expected an object {{...}}, found {}", j->describe()));
      return false;
    }
    frames_.push_back(Frame{j, current_path_, o.strict, false, {}, {}});
    return true;
  }

  void end_section() override {
    check_unknown_keys(frames_.back());
    frames_.pop_back();
  }

  bool begin_named(std::string_view key, const SectionOpts& o, std::vector<std::string>& names) override {
    if (!begin_section(key, o, true)) return false;
    Frame& f = frames_.back();
    f.any_keys = true;
    names.clear();
    for (const auto& m : f.object->members) names.push_back(m.key);
    return true;
  }

  bool begin_entry(const std::string& name) override {
    Frame& parent = frames_.back();
    const JsonValue* j = parent.object->find(name);
    std::string path = join_path(parent.path, name);
    if (j->kind != JsonValue::Kind::object) {
      state_.diagnostics.error(path, j->loc, fmt::format("expected an object {{...}}, found {}", j->describe()));
      return false;
    }
    frames_.push_back(Frame{j, path, parent.strict, false, {}, {}});
    return true;
  }

 private:
  ReadState& state_;
  std::vector<Frame> frames_;
  std::string current_path_;  // path of the key being read

  void error(Location loc, std::string message) { state_.diagnostics.error(current_path_, loc, std::move(message)); }
  void warning(Location loc, std::string message) {
    state_.diagnostics.warning(current_path_, loc, std::move(message));
  }

  // Registers `key` as valid here and returns its value in the JSON, if present.
  // `raw` fields pass any value through, "auto" included.
  const JsonValue* locate(std::string_view key, const FieldOpts& o, bool section = false, bool raw = false) {
    Frame& f = frames_.back();
    f.known.emplace_back(key);
    if (o.alias) f.known.emplace_back(o.alias);
    current_path_ = join_path(f.path, key);
    const JsonMember* main = nullptr;
    const JsonMember* alias = nullptr;
    for (const auto& m : f.object->members) {
      if (m.key == key)
        main = &m;
      else if (o.alias && m.key == o.alias)
        alias = &m;
    }
    if (main && alias) {
      error(alias->key_loc, fmt::format("both \"{}\" and its alias \"{}\" are given; keep one", key, o.alias));
      f.consumed.insert(alias->key);
    }
    const JsonMember* m = main ? main : alias;
    if (!m) {
      if (o.required) {
        error(f.object->loc, fmt::format("required key \"{}\" is missing", key));
      }
      return nullptr;
    }
    f.consumed.insert(m->key);
    Origin origin{Origin::Source::file, m->value.loc, {}};
    if (m == alias) origin.detail = fmt::format("given as \"{}\"", o.alias);
    if (o.deprecated) {
      warning(m->key_loc, fmt::format("\"{}\" is deprecated: {}", m->key, o.deprecated));
      origin.source = Origin::Source::deprecated_key;
    }
    if (o.ignored) warning(m->key_loc, fmt::format("\"{}\" has no effect: {}", m->key, o.ignored));
    state_.origins[current_path_] = origin;
    if (!section && !raw && m->value.is_string("auto") && !allows_auto_value(o)) {
      state_.autos.push_back({current_path_, m->value.loc, f.strict});
      return nullptr;
    }
    return &m->value;
  }

  static bool allows_auto_value(const FieldOpts& o) {
    return std::any_of(o.choices.begin(), o.choices.end(), [](const char* c) { return std::string_view(c) == "auto"; });
  }

  struct UnknownKey {
    std::string path, key;
    Location loc;
    bool at_root;
    std::vector<std::string> known;
  };
  std::vector<UnknownKey> unknown_;

  // Reported at the end, when the root's keys are all known: a section put at the wrong
  // level (HF's guide nests "aio" in zero_optimization) gets pointed to its real place.
  void check_unknown_keys(const Frame& f) {
    if (f.any_keys) return;
    for (const auto& m : f.object->members) {
      if (f.consumed.count(m.key)) continue;
      unknown_.push_back({join_path(f.path, m.key), m.key, m.key_loc, f.path.empty(), f.known});
    }
  }

  void report_unknown_keys() {
    const std::vector<std::string>& root_keys = frames_.front().known;
    for (auto& u : unknown_) {
      std::string message;
      std::string hint = closest_match(u.key, u.known);
      if (!hint.empty()) {
        message = fmt::format("unknown key; did you mean {}?", hint);
      } else if (!u.at_root && std::find(root_keys.begin(), root_keys.end(), u.key) != root_keys.end()) {
        message = fmt::format("unknown key here; \"{}\" is a top-level section, move it out of this block", u.key);
      } else {
        std::sort(u.known.begin(), u.known.end());
        u.known.erase(std::unique(u.known.begin(), u.known.end()), u.known.end());
        const size_t shown = std::min<size_t>(u.known.size(), 12);
        message = "unknown key; valid keys here: ";
        for (size_t i = 0; i < shown; ++i) message += (i ? ", " : "") + u.known[i];
        if (shown < u.known.size())
          message += fmt::format(", ... ({} more; `dscpp config keys` lists them all)", u.known.size() - shown);
      }
      state_.diagnostics.error(u.path, u.loc, message);
    }
  }

  // ---- conversions: each returns false after reporting what was expected ----
  bool convert(const JsonValue& j, bool& out, const FieldOpts&) {
    if (j.kind == JsonValue::Kind::boolean) {
      out = j.boolean;
      return true;
    }
    // DeepSpeed's pydantic sections accept these spellings; taking them keeps such
    // configs working, and the warning stops a quoted "false" from looking truthy.
    static const char* truthy[] = {"true", "yes", "on", "1"};
    static const char* falsy[] = {"false", "no", "off", "0"};
    if (j.kind == JsonValue::Kind::string || j.kind == JsonValue::Kind::integer) {
      std::string s = j.kind == JsonValue::Kind::string ? j.text : std::to_string(j.integer);
      for (const char* t : truthy)
        if (iequals(s, t))
          return out = true, warning(j.loc, fmt::format("{} taken as true; write true", j.describe())), true;
      for (const char* f : falsy)
        if (iequals(s, f))
          return out = false, warning(j.loc, fmt::format("{} taken as false; write false", j.describe())), true;
    }
    error(j.loc, fmt::format("expected true or false, found {}", j.describe()));
    return false;
  }

  bool check_range(const JsonValue& j, double x, const FieldOpts& o, const char* what) {
    bool below = o.min_exclusive ? x <= o.min : x < o.min;
    if (below || x > o.max) {
      error(j.loc, fmt::format("expected {} {}, found {}", what, range_text(o), j.describe()));
      return false;
    }
    return true;
  }

  bool convert(const JsonValue& j, std::int64_t& out, const FieldOpts& o) {
    if (j.kind == JsonValue::Kind::integer) {
      if (!check_range(j, static_cast<double>(j.integer), o, "an integer")) return false;
      out = j.integer;
      return true;
    }
    if (j.kind == JsonValue::Kind::number) {
      if (o.infinity_ok && std::isinf(j.number) && j.number > 0) {
        out = kMaxInt;
        return true;
      }
      // DeepSpeed takes integral floats such as 5e8 for integer keys.
      if (std::isfinite(j.number) && j.number == std::floor(j.number) && std::fabs(j.number) < 9.2e18) {
        if (!check_range(j, j.number, o, "an integer")) return false;
        out = static_cast<std::int64_t>(j.number);
        return true;
      }
      // A whole number too large for 64 bits reads as a float; say which it is.
      const bool whole = std::isfinite(j.number) && j.number == std::floor(j.number);
      error(j.loc, fmt::format("expected an integer{}{}, found {} ({})", range_text(o).empty() ? "" : " ",
                               range_text(o), j.describe(),
                               whole ? "a whole number beyond the 64-bit integer range" : "not a whole number"));
      return false;
    }
    error(j.loc, fmt::format("expected an integer{}{}, found {}", range_text(o).empty() ? "" : " ", range_text(o),
                             j.kind == JsonValue::Kind::string ? "a string " + j.describe() : j.describe()));
    return false;
  }

  bool convert(const JsonValue& j, double& out, const FieldOpts& o) {
    if (!j.is_number() || std::isnan(j.number) || (std::isinf(j.number) && !o.infinity_ok)) {
      error(j.loc, fmt::format("expected a number{}{}, found {}", range_text(o).empty() ? "" : " ", range_text(o),
                               j.kind == JsonValue::Kind::string ? "a string " + j.describe() : j.describe()));
      return false;
    }
    if (!check_range(j, j.number, o, "a number")) return false;
    out = j.number;
    return true;
  }

  bool convert(const JsonValue& j, std::string& out, const FieldOpts& o) {
    if (j.kind != JsonValue::Kind::string) {
      error(j.loc, fmt::format("expected a string, found {}", j.describe()));
      return false;
    }
    if (o.choices.empty() && !o.canonical) {
      out = j.text;
      return true;
    }
    if (o.canonical) {
      std::string value = j.text;
      if (o.canonical(value)) {
        out = value;
        return true;
      }
    } else {
      for (const char* c : o.choices) {
        if (j.text == c || (o.case_insensitive && iequals(j.text, c))) {
          out = c;
          return true;
        }
      }
    }
    std::vector<std::string> names(o.choices.begin(), o.choices.end());
    std::string list;
    for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + json_quote(names[i]);
    std::string hint = closest_match(j.text, names);
    error(j.loc, fmt::format("expected one of {}, found {}{}", list, j.describe(),
                             hint.empty() ? "" : fmt::format("; did you mean \"{}\"?", hint)));
    return false;
  }

  template <typename T>
  bool convert(const JsonValue& j, std::optional<T>& out, const FieldOpts& o) {
    if (j.is_null()) {
      out.reset();
      return true;
    }
    T value{};
    if (!convert(j, value, o)) return false;
    out = std::move(value);
    return true;
  }

  template <typename T>
  bool convert(const JsonValue& j, std::vector<T>& out, const FieldOpts& o) {
    std::vector<T> values;
    if (j.is_null() && o.scalar_ok) {  // "not set", as the effective-config dump writes it
      out.clear();
      return true;
    }
    if (j.kind != JsonValue::Kind::array) {
      if (!o.scalar_ok) {
        error(j.loc, fmt::format("expected a list [...], found {}", j.describe()));
        return false;
      }
      T one{};
      if (!convert(j, one, o)) return false;
      out = {std::move(one)};
      return true;
    }
    for (const auto& item : j.items) {
      T value{};
      if (!convert(item, value, o)) return false;
      values.push_back(std::move(value));
    }
    out = std::move(values);
    return true;
  }

  template <typename T>
  void read(std::string_view key, T& v, const FieldOpts& o) {
    const JsonValue* j = locate(key, o);
    if (j) convert(*j, v, o);
  }
};

}  // namespace

void read_config(const JsonValue& root, DsConfig& out, ReadState& state) {
  Reader reader(root, state);
  describe(reader, out);
  reader.finish();
}

}  // namespace dscpp::config
