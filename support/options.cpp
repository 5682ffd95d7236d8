#include "kjit/support/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kjit {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool env_flag(const char* name) {
  std::optional<std::string> value = env(name);
  if (!value) return false;
  std::string lower = *value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower == "1" || lower == "true" || lower == "yes" || lower == "on";
}

std::vector<std::string> codegen_environment() {
  // Variables that change the source kjit generates or the options it hands NVRTC.
  static const char* const kNames[] = {"KJIT_NVRTC_EXTRA_OPTIONS", "KJIT_LINEINFO"};
  std::vector<std::string> out;
  for (const char* name : kNames)
    if (std::optional<std::string> value = env(name))
      out.push_back(std::string(name) + "=" + *value);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kjit
