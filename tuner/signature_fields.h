// Reading a stored problem signature ("m=4096,n=4096,...") field by field. A
// signature comes from the store, which another process or an imported file may
// have written, so it may be of any length: std::regex recurses once per character
// it matches, and overflowed the stack on signatures of some 40,000 characters (a
// packed attention batch's lengths, an epilogue's text). The families' parsers
// (tuner/*_space.cpp) read them with these instead, in time and stack that do not
// grow with the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kjit::tuner::signature_fields {

// `text` split at every `separator`, empty fields kept ("a,,b" is three).
inline std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    out.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// The value of `field` when it reads "KEY=value"; nullopt otherwise.
inline std::optional<std::string_view> value_of(std::string_view field, std::string_view key) {
  if (field.size() <= key.size() || field.substr(0, key.size()) != key || field[key.size()] != '=')
    return std::nullopt;
  return field.substr(key.size() + 1);
}

// A decimal count: 1 to 18 digits, no sign (so it fits int64_t); nullopt otherwise.
inline std::optional<int64_t> count(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

inline bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One or more of [A-Za-z0-9_].
inline bool is_word(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text)
    if (!is_word_char(c)) return false;
  return true;
}

// [A-Za-z_][A-Za-z0-9_]*
inline bool is_identifier(std::string_view text) {
  return is_word(text) && !(text[0] >= '0' && text[0] <= '9');
}

}  // namespace kjit::tuner::signature_fields
