// Numeric checks for GPU tests: relative L2 error against an fp64 reference
// (NaN never passes), and fresh random inputs (never zeros).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kjit/compiler/ir/dtype.h"

namespace kjit::testing {

// ||out - ref|| / ||ref||; infinity when any output is NaN/inf where the reference is
// finite, or when the sizes differ.
inline double relative_l2_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) && !std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(out[i]) && out[i] != ref[i]) return std::numeric_limits<double>::infinity();
    if (!std::isfinite(ref[i])) continue;
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (norm == 0) return diff == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

// Uniform values in [lo, hi), from a seed that differs per call unless given.
inline std::vector<float> random_floats(size_t n, float lo = -1, float hi = 1,
                                        uint64_t seed = std::random_device{}()) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// `count` values for an input of `dtype` drawn from [lo, hi): 0 or 1 for bool,
// whole numbers (rounded down) for i32.
inline std::vector<double> random_values(ir::DType dtype, size_t count, double lo, double hi,
                                         std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> values(count);
  for (double& v : values) {
    if (dtype == ir::DType::Bool)
      v = static_cast<double>(rng() % 2);
    else if (dtype == ir::DType::I32)
      v = std::floor(uniform(rng));
    else
      v = uniform(rng);
  }
  return values;
}

}  // namespace kjit::testing
