// What the config loader reports: errors (the config is refused) and warnings (accepted,
// but the user should know), each tied to a JSON path and, when it came from a file, a line.
#pragma once

#include "configs/json.h"

#include <string>
#include <string_view>
#include <vector>

namespace dscpp::config {

struct Diagnostic {
  enum class Severity { error, warning };
  Severity severity = Severity::error;
  std::string path;  // JSON path such as "zero_optimization.offload_param.device"; "" = whole file
  Location loc;      // line 0 = not tied to a place in the file
  std::string message;
};

class Diagnostics {
 public:
  void error(std::string path, Location loc, std::string message);
  void warning(std::string path, Location loc, std::string message);
  bool has_errors() const;
  const std::vector<Diagnostic>& all() const { return items_; }
  std::vector<Diagnostic> errors() const;
  // "FILE:LINE:COL: error: PATH: MESSAGE" lines, one per diagnostic, in file order.
  std::string format(std::string_view file_name) const;

 private:
  std::vector<Diagnostic> items_;
};

std::string format_diagnostic(const Diagnostic& d, std::string_view file_name);

}  // namespace dscpp::config
