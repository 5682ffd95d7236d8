// Stable 64-bit hashing (xxHash XXH3) for cache keys. The same bytes give the same
// hash on every machine and in every release.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit {

uint64_t hash64(std::string_view bytes);
uint64_t hash64(const void* data, size_t size);

// 16 lowercase hex digits.
std::string hex64(uint64_t value);

// Builds a key from several parts, each length-prefixed so "ab"+"c" != "a"+"bc".
class KeyHasher {
 public:
  KeyHasher& add(std::string_view part);
  KeyHasher& add(int64_t value) { return add(std::to_string(value)); }
  uint64_t digest() const { return hash64(buffer_); }
  std::string hex() const { return hex64(digest()); }

 private:
  std::string buffer_;
};

}  // namespace kjit
