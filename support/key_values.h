// The "key=value,key=value" lists of --config: split, trimmed and checked once
// here, so every kernel family's config reads the same way.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kjit {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Splits `text` at commas into key=value pairs, in order. Spaces around keys and
// values are ignored and empty items skipped ("bm=128, bn=64," is two pairs). An
// item without '=', an empty key or a key given twice is a UserError that names
// `what` (e.g. "matmul config") and carries `hint`.
KeyValues split_key_values(const std::string& text, const std::string& what,
                           const std::string& hint);

}  // namespace kjit
