// Overflow-checked sizes. Element counts, byte sizes and offsets that come
// from a user (a .npy header, --m/--n, a declared shape) are products of
// several numbers, and a 64-bit product that wraps passes every later check
// ("16 bytes of data for 4611686018427387905 x 4 elements"). These compute
// them exactly or say which value does not fit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kjit {

// a * b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// The product of non-negative `sizes` (1 for none), or nullopt when it does not
// fit in int64_t.
std::optional<int64_t> checked_product(const std::vector<int64_t>& sizes);

// The product of non-negative `sizes` times `item_bytes` (1 for an element
// count). A UserError when a size is negative or the product exceeds int64_t;
// the message names `what` and the values, e.g. "the shape (4611686018427387905,
// 4) of x.npy has more elements than fit in 64 bits".
int64_t checked_size(const std::vector<int64_t>& sizes, int64_t item_bytes,
                     const std::string& what);

// "(4611686018427387905, 4)"
std::string shape_text(const std::vector<int64_t>& sizes);

}  // namespace kjit
