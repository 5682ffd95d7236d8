#include "kjit/support/checked_math.h"

#include "kjit/support/error.h"

namespace kjit {

std::optional<int64_t> checked_product(const std::vector<int64_t>& sizes) {
  int64_t product = 1;
  for (int64_t size : sizes) {
    std::optional<int64_t> next = checked_mul(product, size);
    if (!next) return std::nullopt;
    product = *next;
  }
  return product;
}

std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string out = "(";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + ")";
}

int64_t checked_size(const std::vector<int64_t>& sizes, int64_t item_bytes,
                     const std::string& what) {
  for (int64_t size : sizes)
    if (size < 0)
      throw UserError(what + " " + shape_text(sizes) + " has a negative size, " +
                      std::to_string(size));
  std::optional<int64_t> count = checked_product(sizes);
  std::optional<int64_t> bytes = count ? checked_mul(*count, item_bytes) : std::nullopt;
  if (!bytes)
    throw UserError(what + " " + shape_text(sizes) + " is too large: " +
                    (item_bytes == 1
                         ? std::string("its element count")
                         : "its size in bytes (" + std::to_string(item_bytes) + " per element)") +
                    " does not fit in 64 bits");
  return *bytes;
}

}  // namespace kjit
