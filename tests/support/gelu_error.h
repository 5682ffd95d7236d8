// The checks that tests/unit/emulation/math_test.cpp (templates/math.cuh on the CPU)
// and tests/gpu/math_test.cpp (on the device) share: float bit patterns, the fp64
// gelu, errors in ulps, and the worst errors of kjit::gelu_for_16bit against the
// bounds templates/math.cuh states for it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kjit::testing {

inline float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline uint32_t to_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// x * Phi(x) = x * erfc(-x / sqrt 2) / 2 in fp64; gelu(-inf) = -0, the limit.
inline double gelu_reference(float x) {
  const double d = x;
  if (d == -std::numeric_limits<double>::infinity()) return -0.0;
  return 0.5 * d * std::erfc(-d * 0.70710678118654752440);
}

// |got - want| in units of the float spacing at want (the spacing of the smallest
// normal below it, so results near zero are not held to subnormal spacing).
inline double ulp_error(float got, double want) {
  const double a =
      std::max(std::fabs(want), static_cast<double>(std::numeric_limits<float>::min()));
  const double spacing = std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

// Raises `worst` to e (NaN counts as infinity) and notes where.
inline void raise_worst(double& worst, float& at, double e, float x) {
  if (!(e <= worst)) {
    worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
    at = x;
  }
}

// kjit::gelu_for_16bit's bounds (templates/math.cuh): relative error 2^-19 for
// |x| <= 4 and 2^-16.5 for every other normal result; a result below FLT_MIN (where
// the last product rounds to subnormal spacing) within one subnormal spacing plus
// 2^-16.5 of FLT_MIN. Infinite and NaN references must be met exactly.
struct GeluFor16BitError {
  static double near_bound() { return std::exp2(-19.0); }
  static double far_bound() { return std::exp2(-16.5); }

  double near = 0, far = 0, tiny = 0;  // |x| <= 4; other normal results; subnormal results
  float near_at = 0, far_at = 0, tiny_at = 0;
  long long checked = 0;

  void check(float x, float got) {
    const double want = gelu_reference(x);
    ++checked;
    if (std::isnan(want) || std::isinf(want)) {
      const bool same = std::isnan(want) ? std::isnan(got) : got == want;
      if (!same) raise_worst(near, near_at, std::numeric_limits<double>::infinity(), x);
      return;
    }
    const double err = std::fabs(static_cast<double>(got) - want);
    if (std::fabs(want) < 0x1p-126)
      raise_worst(tiny, tiny_at, (err - 0x1p-149) / 0x1p-126, x);
    else if (std::fabs(x) <= 4.0f)
      raise_worst(near, near_at, err / std::fabs(want), x);
    else
      raise_worst(far, far_at, err / std::fabs(want), x);
  }
  bool within_bounds() const {
    return near <= near_bound() && far <= far_bound() && tiny <= far_bound();
  }
};

}  // namespace kjit::testing
