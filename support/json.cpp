#include "kjit/support/json.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "kjit/support/error.h"

namespace kjit {

nlohmann::json parse_json(const std::string& text, bool allow_exceptions, const std::string& what) {
  bool too_deep = false;
  // The keys of each object being read, innermost last: a key given twice in one
  // object is refused (nlohmann keeps the last silently, so {"m": 16, "m": 4096}
  // would tune a problem the file's reader did not see).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  // Every value deeper than the limit is dropped as it is read, so no deep value is
  // ever built.
  const nlohmann::json::parser_callback_t bound =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth >= kMaxJsonDepth) too_deep = true;  // depth counts from 0
        if (too_deep || !duplicate.empty()) return false;
        switch (event) {
          case nlohmann::json::parse_event_t::object_start:
            keys.emplace_back();
            break;
          case nlohmann::json::parse_event_t::object_end:
            if (!keys.empty()) keys.pop_back();
            break;
          case nlohmann::json::parse_event_t::key:
            if (!keys.empty() && parsed.is_string() &&
                !keys.back().insert(parsed.get<std::string>()).second)
              duplicate = parsed.get<std::string>();
            break;
          default:
            break;
        }
        return duplicate.empty();
      };
  nlohmann::json parsed = nlohmann::json::parse(text, bound, allow_exceptions);
  if (!too_deep && duplicate.empty()) return parsed;
  if (allow_exceptions) {
    if (too_deep)
      throw UserError(fmt::format("{}: values nest more than {} levels deep", what, kMaxJsonDepth),
                      "a problem list, spec or record needs a few levels");
    throw UserError(fmt::format("{}: key \"{}\" appears twice in one object", what, duplicate),
                    "give each key once; JSON readers differ on which of the two counts");
  }
  return nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace kjit
