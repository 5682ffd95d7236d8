#include "kjit/support/json.h"

#include <fmt/format.h>

#include "kjit/support/error.h"

namespace kjit {

nlohmann::json parse_json(const std::string& text, bool allow_exceptions, const std::string& what) {
  bool too_deep = false;
  // Every value deeper than the limit is dropped as it is read, so no deep value is
  // ever built.
  const nlohmann::json::parser_callback_t bound =
      [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth >= kMaxJsonDepth) too_deep = true;  // depth counts from 0
        return !too_deep;
      };
  nlohmann::json parsed = nlohmann::json::parse(text, bound, allow_exceptions);
  if (!too_deep) return parsed;
  if (allow_exceptions)
    throw UserError(fmt::format("{}: values nest more than {} levels deep", what, kMaxJsonDepth),
                    "a problem list, spec or record needs a few levels");
  return nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace kjit
