#include "configs/diagnostics.h"

#include <fmt/core.h>

#include <algorithm>

namespace dscpp::config {

void Diagnostics::error(std::string path, Location loc, std::string message) {
  items_.push_back({Diagnostic::Severity::error, std::move(path), loc, std::move(message)});
}

void Diagnostics::warning(std::string path, Location loc, std::string message) {
  items_.push_back({Diagnostic::Severity::warning, std::move(path), loc, std::move(message)});
}

bool Diagnostics::has_errors() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const Diagnostic& d) { return d.severity == Diagnostic::Severity::error; });
}

std::vector<Diagnostic> Diagnostics::errors() const {
  std::vector<Diagnostic> out;
  for (const auto& d : items_)
    if (d.severity == Diagnostic::Severity::error) out.push_back(d);
  return out;
}

std::string format_diagnostic(const Diagnostic& d, std::string_view file_name) {
  std::string where(file_name);
  if (d.loc.line > 0) where += fmt::format(":{}:{}", d.loc.line, d.loc.column);
  const char* severity = d.severity == Diagnostic::Severity::error ? "error" : "warning";
  if (d.path.empty()) return fmt::format("{}: {}: {}", where, severity, d.message);
  return fmt::format("{}: {}: {}: {}", where, severity, d.path, d.message);
}

std::string Diagnostics::format(std::string_view file_name) const {
  // File order first (what a user fixes top to bottom), then the rules without a line.
  std::vector<const Diagnostic*> sorted;
  for (const auto& d : items_) sorted.push_back(&d);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic* a, const Diagnostic* b) {
    int la = a->loc.line ? a->loc.line : 1 << 30, lb = b->loc.line ? b->loc.line : 1 << 30;
    return la != lb ? la < lb : a->loc.column < b->loc.column;
  });
  std::string out;
  for (const auto* d : sorted) out += format_diagnostic(*d, file_name) + "\n";
  return out;
}

}  // namespace dscpp::config
