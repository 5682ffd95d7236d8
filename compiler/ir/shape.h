// Shapes: a list of dims, each static (a number) or symbolic (a name bound at
// launch, such as "n"). Broadcasting follows NumPy: shapes align on the right, and
// a dim of static size 1 stretches to the other side's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kjit::ir {

struct Dim {
  int64_t size = 1;    // when static
  std::string symbol;  // non-empty: symbolic
  static Dim of(int64_t size) { return Dim{size, ""}; }
  static Dim named(std::string symbol) { return Dim{0, std::move(symbol)}; }
  bool is_symbolic() const { return !symbol.empty(); }
  bool is_one() const { return !is_symbolic() && size == 1; }
  std::string str() const { return is_symbolic() ? symbol : std::to_string(size); }
  bool operator==(const Dim& other) const = default;
};

using Shape = std::vector<Dim>;

// "[n]", "[m,1]", "[]" for a scalar.
std::string to_string(const Shape& shape);

// The broadcast of two shapes, or nullopt when a pair of dims differs and neither is 1.
std::optional<Shape> broadcast(const Shape& a, const Shape& b);

// Sizes bound to symbols at launch, e.g. {"n": 1048576}.
using Bindings = std::map<std::string, int64_t>;

// Concrete sizes of a shape; a UserError names an unbound symbol.
std::vector<int64_t> concrete(const Shape& shape, const Bindings& bindings);

// The product of sizes (1 for a scalar); a UserError naming the sizes when it
// does not fit in 64 bits (or a size is negative).
int64_t element_count(const std::vector<int64_t>& sizes);

}  // namespace kjit::ir
