// The effective config, printed from the same describe() walk that reads it.
#include "configs/load.h"
#include "configs/reader.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace dscpp::config {
namespace {

JsonValue make(JsonValue::Kind kind) {
  JsonValue v;
  v.kind = kind;
  return v;
}
JsonValue make_bool(bool b) {
  JsonValue v = make(JsonValue::Kind::boolean);
  v.boolean = b;
  return v;
}
JsonValue make_int(std::int64_t i) {
  JsonValue v = make(JsonValue::Kind::integer);
  v.integer = i;
  v.number = static_cast<double>(i);
  return v;
}
JsonValue make_number(double d) {
  JsonValue v = make(JsonValue::Kind::number);
  v.number = d;
  return v;
}
JsonValue make_string(const std::string& s) {
  JsonValue v = make(JsonValue::Kind::string);
  v.text = s;
  return v;
}
JsonValue make_value(bool b) {
  return make_bool(b);
}
JsonValue make_value(std::int64_t i) {
  return make_int(i);
}
JsonValue make_value(double d) {
  return make_number(d);
}
JsonValue make_value(const std::string& s) {
  return make_string(s);
}

// Builds the effective config as a JSON tree (every key, in schema order).
class Writer final : public Visitor {
 public:
  Writer() { stack_.push_back(make(JsonValue::Kind::object)); }
  JsonValue result() { return std::move(stack_.front()); }
  size_t leaves = 0;

  void field(std::string_view k, bool& v, const FieldOpts& o) override { put(k, make_value(v), o); }
  void field(std::string_view k, std::int64_t& v, const FieldOpts& o) override { put(k, make_value(v), o); }
  void field(std::string_view k, double& v, const FieldOpts& o) override { put(k, make_value(v), o); }
  void field(std::string_view k, std::string& v, const FieldOpts& o) override { put(k, make_value(v), o); }
  void field(std::string_view k, std::optional<bool>& v, const FieldOpts& o) override { put_optional(k, v, o); }
  void field(std::string_view k, std::optional<std::int64_t>& v, const FieldOpts& o) override { put_optional(k, v, o); }
  void field(std::string_view k, std::optional<double>& v, const FieldOpts& o) override { put_optional(k, v, o); }
  void field(std::string_view k, std::optional<std::string>& v, const FieldOpts& o) override { put_optional(k, v, o); }
  void field(std::string_view k, std::vector<double>& v, const FieldOpts& o) override { put_list(k, v, o); }
  void field(std::string_view k, std::vector<std::int64_t>& v, const FieldOpts& o) override { put_list(k, v, o); }
  void field(std::string_view k, std::vector<std::string>& v, const FieldOpts& o) override { put_list(k, v, o); }
  void field(std::string_view k, std::optional<JsonValue>& v, const FieldOpts& o) override {
    put(k, v ? *v : make(JsonValue::Kind::null), o);
  }

 protected:
  bool begin_section(std::string_view key, const SectionOpts&, bool present) override {
    if (!present) {
      put(key, make(JsonValue::Kind::null), {});
      return false;
    }
    stack_.push_back(make(JsonValue::Kind::object));
    keys_.emplace_back(key);
    return true;
  }
  void end_section() override {
    JsonValue done = std::move(stack_.back());
    stack_.pop_back();
    std::string key = std::move(keys_.back());
    keys_.pop_back();
    stack_.back().members.push_back({key, {}, std::move(done)});
  }
  bool begin_named(std::string_view key, const SectionOpts& o, std::vector<std::string>&) override {
    return begin_section(key, o, true);
  }
  bool begin_entry(const std::string& name) override { return begin_section(name, {}, true); }

 private:
  std::vector<JsonValue> stack_;
  std::vector<std::string> keys_;

  void put(std::string_view key, JsonValue v, const FieldOpts& o) {
    // Deprecated spellings are mapped onto their replacements; listing them would show
    // two keys for one setting.
    if (o.deprecated || o.ignored) return;
    ++leaves;
    stack_.back().members.push_back({std::string(key), {}, std::move(v)});
  }
  template <typename T>
  void put_optional(std::string_view key, const std::optional<T>& v, const FieldOpts& o) {
    put(key, v ? make_value(*v) : make(JsonValue::Kind::null), o);
  }
  template <typename T>
  void put_list(std::string_view key, const std::vector<T>& v, const FieldOpts& o) {
    JsonValue list = make(JsonValue::Kind::array);
    for (const auto& x : v) list.items.push_back(make_value(x));
    // An empty "scalar or list" field means "not set" (e.g. warmup_max_lr = the optimizer's lr).
    if (o.scalar_ok && v.empty()) list = make(JsonValue::Kind::null);
    put(key, std::move(list), o);
  }
};

std::string render(const JsonValue& v) {
  if (v.kind == JsonValue::Kind::integer && v.integer == kMaxInt) return "9223372036854775807 (sys.maxsize)";
  return to_json_text(v);
}

void table_rows(const JsonValue& node, const std::string& path, const LoadedConfig* loaded,
                std::vector<std::array<std::string, 3>>& rows) {
  for (const auto& m : node.members) {
    std::string p = join_path(path, m.key);
    if (m.value.kind == JsonValue::Kind::object && !m.value.members.empty()) {
      table_rows(m.value, p, loaded, rows);
      continue;
    }
    std::string source = "default";
    if (loaded) {
      auto it = loaded->origins.find(p);
      if (it != loaded->origins.end()) source = describe_origin(it->second);
    }
    rows.push_back({p, render(m.value), source});
  }
}

std::string format_rows(const std::vector<std::array<std::string, 3>>& rows, const char* third) {
  size_t w0 = 3, w1 = 5;
  // Capped widths: a few very long paths (compression groups) must not push every row right.
  for (const auto& r : rows)
    w0 = std::max(w0, std::min<size_t>(r[0].size(), 60)), w1 = std::max(w1, std::min<size_t>(r[1].size(), 24));
  std::string out = fmt::format("{:<{}}  {:<{}}  {}\n", "key", w0, "value", w1, third);
  out += std::string(w0, '-') + "  " + std::string(w1, '-') + "  " + std::string(std::string_view(third).size(), '-') +
         "\n";
  for (const auto& r : rows) out += fmt::format("{:<{}}  {:<{}}  {}\n", r[0], w0, r[1], w1, r[2]);
  return out;
}

void pretty(const JsonValue& v, int indent, std::string& out) {
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  if (v.kind == JsonValue::Kind::object && !v.members.empty()) {
    out += "{\n";
    for (size_t i = 0; i < v.members.size(); ++i) {
      out += pad + "  " + json_quote(v.members[i].key) + ": ";
      pretty(v.members[i].value, indent + 1, out);
      out += i + 1 < v.members.size() ? ",\n" : "\n";
    }
    out += pad + "}";
  } else {
    out += to_json_text(v);
  }
}

}  // namespace

std::string format_effective_config_table(const LoadedConfig& loaded) {
  Writer w;
  DsConfig copy = loaded.config;
  describe(w, copy);
  std::vector<std::array<std::string, 3>> rows;
  table_rows(w.result(), "", &loaded, rows);
  return format_rows(rows, "source");
}

std::string format_effective_config_json(const LoadedConfig& loaded) {
  Writer w;
  DsConfig copy = loaded.config;
  describe(w, copy);
  std::string out;
  pretty(w.result(), 0, out);
  return out + "\n";
}

std::string format_schema_keys(size_t* count) {
  Writer w;
  DsConfig defaults;
  // Show the sections that exist only when configured with their defaults too.
  defaults.optimizer.emplace();
  defaults.optimizer->type = "AdamW";
  defaults.scheduler.emplace();
  defaults.scheduler->type = "WarmupLR";
  defaults.zero_optimization.offload_param.emplace();
  defaults.zero_optimization.offload_optimizer.emplace();
  defaults.zero_optimization.zenflow.emplace();
  defaults.zero_optimization.zeropp_loco_param.emplace();
  defaults.checkpoint.writer.emplace();
  describe(w, defaults);
  std::vector<std::array<std::string, 3>> rows;
  table_rows(w.result(), "", nullptr, rows);
  if (count) *count = rows.size();
  for (auto& r : rows) r[2] = "";
  return format_rows(rows, "");
}

}  // namespace dscpp::config
