#include "kjit/support/key_values.h"

#include <algorithm>

#include "kjit/support/error.h"

namespace kjit {
namespace {

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

KeyValues split_key_values(const std::string& text, const std::string& what,
                           const std::string& hint) {
  KeyValues pairs;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    const std::string item = trimmed(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw UserError(what + " item '" + item + "' is not key=value", hint);
    std::string key = trimmed(item.substr(0, eq));
    if (key.empty()) throw UserError(what + " item '" + item + "' has no key", hint);
    for (const auto& [seen, value] : pairs)
      if (seen == key)
        throw UserError(what + " key '" + key + "' is given twice", "give each key once");
    pairs.emplace_back(std::move(key), trimmed(item.substr(eq + 1)));
  }
  return pairs;
}

}  // namespace kjit
