#include "kjit/tuner/workload.h"

#include <fmt/format.h>

#include <algorithm>

#include "kjit/support/error.h"
#include "kjit/support/json.h"

namespace kjit::tuner {

namespace {

int line_of(const std::string& text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

// The byte offsets where the elements of the problem list begin: the top-level
// list, or (in_object) the list under the top-level object's key "problems" (not
// any other list at that depth: {"notes": [1, 2], "problems": [...]} numbered the
// notes as problems, and every error's line was off). Strings are skipped.
std::vector<size_t> element_offsets(const std::string& text, bool in_object) {
  std::vector<size_t> out;
  int level = 0;
  bool in_string = false, expect = false;
  bool in_list = false;      // inside the problem list (at its own level)
  size_t string_start = 0;   // the open quote of the string being read
  std::string last_string;   // the last string closed at level 1: a key or a value
  bool after_colon = false;  // at level 1, a ':' since last_string closed
  const int depth = in_object ? 2 : 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (level == 1) {
          // Decoded, as the parser read it ("\u0070roblems" is "problems").
          const nlohmann::json decoded = nlohmann::json::parse(
              text.substr(string_start, i - string_start + 1), nullptr, false);
          last_string = decoded.is_string() ? decoded.get<std::string>() : std::string();
          after_colon = false;
        }
      }
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    if (expect && c != ']') out.push_back(i);
    expect = false;
    if (c == '"') {
      in_string = true;
      string_start = i;
    } else if (c == ':') {
      if (level == 1) after_colon = true;
    } else if (c == '[' || c == '{') {
      ++level;
      if (c == '[' && level == depth && !in_list &&
          (!in_object || (after_colon && last_string == "problems"))) {
        in_list = true;
        expect = true;
      }
    } else if (c == ']' || c == '}') {
      if (level == depth && c == ']') in_list = false;
      --level;
      if (level == 1) after_colon = false;
    } else if (c == ',' && level == depth && in_list) {
      expect = true;
    } else if (c == ',' && level == 1) {
      after_colon = false;
    }
  }
  return out;
}

}  // namespace

std::vector<WorkloadEntry> parse_workload(const std::string& text, const std::string& path) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw UserError("workload " + path + " is empty",
                    "write a JSON list of problems, e.g. [{\"family\": \"matmul\", \"m\": 4096, "
                    "\"n\": 4096, \"k\": 4096}]");
  nlohmann::json parsed;
  try {
    parsed = parse_json(text, /*allow_exceptions=*/true, "workload " + path);
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(fmt::format("workload {}: line {}: not valid JSON ({})", path,
                                line_of(text, e.byte > 0 ? e.byte - 1 : 0), e.what()));
  } catch (const nlohmann::json::exception& e) {  // a number past a double: 1e999
    throw UserError(fmt::format("workload {}: not valid JSON ({})", path, e.what()));
  }
  const nlohmann::json* list = &parsed;
  bool in_object = false;
  if (parsed.is_object()) {
    if (!parsed.contains("problems"))
      throw UserError("workload " + path + ": the object has no \"problems\" list",
                      "write {\"problems\": [ ... ]} or a plain list");
    list = &parsed["problems"];
    in_object = true;
  }
  if (!list->is_array()) throw UserError("workload " + path + ": the problems are not a JSON list");
  if (list->empty()) throw UserError("workload " + path + " lists no problems");
  const std::vector<size_t> offsets = element_offsets(text, in_object);
  std::vector<WorkloadEntry> out;
  for (size_t i = 0; i < list->size(); ++i) {
    WorkloadEntry entry;
    entry.line = i < offsets.size() ? line_of(text, offsets[i]) : 0;
    entry.spec = (*list)[i];
    try {
      entry.problem = make_problem(entry.spec);
    } catch (const UserError& e) {
      throw UserError(
          fmt::format("workload {}: problem {} (line {}): {}", path, i + 1, entry.line, e.what()));
    }
    // The same problem again (a layer's projections of one shape): tuned once.
    const std::string signature = entry.problem->signature();
    const auto same = std::find_if(out.begin(), out.end(), [&](const WorkloadEntry& e) {
      return e.problem->signature() == signature;
    });
    if (same != out.end()) {
      same->same_at_lines.push_back(entry.line);
      continue;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace kjit::tuner
