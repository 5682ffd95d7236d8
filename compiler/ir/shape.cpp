#include "kjit/compiler/ir/shape.h"

#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"

namespace kjit::ir {

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += shape[i].str();
  }
  return out + "]";
}

std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align on the right: a missing dim acts as 1.
    const Dim one = Dim::of(1);
    const Dim& da = i < rank - a.size() ? one : a[i - (rank - a.size())];
    const Dim& db = i < rank - b.size() ? one : b[i - (rank - b.size())];
    if (da == db || db.is_one()) {
      out[i] = da;
    } else if (da.is_one()) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::vector<int64_t> concrete(const Shape& shape, const Bindings& bindings) {
  std::vector<int64_t> sizes;
  for (const Dim& d : shape) {
    if (!d.is_symbolic()) {
      sizes.push_back(d.size);
      continue;
    }
    auto it = bindings.find(d.symbol);
    if (it == bindings.end())
      throw UserError("no size given for dim '" + d.symbol + "'",
                      "pass a tensor whose shape binds it, or a size for it");
    sizes.push_back(it->second);
  }
  return sizes;
}

int64_t element_count(const std::vector<int64_t>& sizes) {
  return checked_size(sizes, 1, "a tensor of shape");
}

}  // namespace kjit::ir
