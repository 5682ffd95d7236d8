#include "cache/key.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <string_view>

namespace kjit::cache {

namespace {

// Bump when the parts or their order change: old keys then simply miss.
constexpr std::string_view kKeyFormat = "kjit-binary-key-1";

void append_part(std::string& buffer, std::string_view part) {
  buffer += std::to_string(part.size());
  buffer += ':';
  buffer += part;
}

void append_list(std::string& buffer, const std::vector<std::string>& parts) {
  // The count first, so an option can never be mistaken for the next field.
  append_part(buffer, std::to_string(parts.size()));
  for (const std::string& part : parts) append_part(buffer, part);
}

}  // namespace

std::string binary_key(const std::string& source, const std::vector<std::string>& options,
                       const std::string& arch, const std::string& nvrtc_version,
                       const std::string& generator_version,
                       const std::vector<std::string>& codegen_environment) {
  std::string buffer;
  buffer.reserve(source.size() + 256);
  append_part(buffer, kKeyFormat);
  append_part(buffer, arch);
  append_part(buffer, nvrtc_version);
  append_part(buffer, generator_version);
  append_list(buffer, options);
  append_list(buffer, codegen_environment);
  append_part(buffer, source);
  // 128 bits: a collision would silently load the wrong kernel, so 64 bits
  // (a birthday bound near 4e9 keys) is not comfortable enough.
  XXH128_hash_t hash = XXH3_128bits(buffer.data(), buffer.size());
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

std::string gpu_model(const std::string& name, int cc_major, int cc_minor, int sm_count) {
  return fmt::format("{} cc{}.{} {}SM", name, cc_major, cc_minor, sm_count);
}

}  // namespace kjit::cache
