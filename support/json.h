// JSON from outside kjit (workload files, the store's rows, a measuring worker's
// lines) parsed with a bound on nesting. nlohmann's parser is iterative, but
// copying or comparing a value recurses once per level: a workload file of a
// million '[' overflowed the stack (a segfault in kjit tune). Values nested deeper
// than kMaxJsonDepth fail to parse like any other bad text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kjit {

inline constexpr int kMaxJsonDepth = 64;

// nlohmann::json::parse(text, nullptr, allow_exceptions), and where values nest
// deeper than kMaxJsonDepth: a discarded value, or with allow_exceptions a
// UserError naming `what` and the limit (bad syntax throws
// nlohmann::json::parse_error, as parse does).
nlohmann::json parse_json(const std::string& text, bool allow_exceptions = true,
                          const std::string& what = "JSON");

}  // namespace kjit
