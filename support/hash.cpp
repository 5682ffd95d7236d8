#include "kjit/support/hash.h"

#include <xxhash.h>

#include <cstdio>

namespace kjit {

uint64_t hash64(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

uint64_t hash64(std::string_view bytes) {
  return hash64(bytes.data(), bytes.size());
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

KeyHasher& KeyHasher::add(std::string_view part) {
  buffer_ += std::to_string(part.size());
  buffer_ += ':';
  buffer_ += part;
  return *this;
}

}  // namespace kjit
