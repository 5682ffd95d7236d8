#include "kjit/cache/key.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <string_view>

namespace kjit::cache {

namespace {

// Bump when the parts or their order change: old keys then simply miss.
constexpr std::string_view kKeyFormat = "kjit-binary-key-1";

// Feeds length-prefixed parts to XXH3-128 without copying them.
class KeyStream {
 public:
  KeyStream() { XXH3_128bits_reset(&state_); }
  void part(std::string_view bytes) {
    std::string prefix = std::to_string(bytes.size()) + ':';
    XXH3_128bits_update(&state_, prefix.data(), prefix.size());
    XXH3_128bits_update(&state_, bytes.data(), bytes.size());
  }
  void list(const std::vector<std::string>& parts) {
    // The count first, so an option can never be mistaken for the next field.
    part(std::to_string(parts.size()));
    for (const std::string& p : parts) part(p);
  }
  std::string hex() {
    XXH128_hash_t hash = XXH3_128bits_digest(&state_);
    return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
  }

 private:
  XXH3_state_t state_;
};

}  // namespace

std::string binary_key(const std::string& source, const std::vector<std::string>& options,
                       const std::string& arch, const std::string& nvrtc_version,
                       const std::string& generator_version,
                       const std::vector<std::string>& codegen_environment) {
  // 128 bits: a collision would silently load the wrong kernel, so 64 bits
  // (a birthday bound near 4e9 keys) is not comfortable enough.
  KeyStream key;
  key.part(kKeyFormat);
  key.part(arch);
  key.part(nvrtc_version);
  key.part(generator_version);
  key.list(options);
  key.list(codegen_environment);
  key.part(source);
  return key.hex();
}

std::string gpu_model(const std::string& name, int cc_major, int cc_minor, int sm_count) {
  return fmt::format("{} cc{}.{} {}SM", name, cc_major, cc_minor, sm_count);
}

}  // namespace kjit::cache
