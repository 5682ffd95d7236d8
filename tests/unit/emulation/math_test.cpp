// templates/math.cuh on the CPU: kjit::sincos_f32 against fp64 sin/cos, in ulps of
// the float result. The device runs the same source (fmaf is a fused multiply-add on
// both), so what holds here holds there; tests/gpu checks the device too.
//
// The default sweep takes a few seconds: floats in [-4pi, 4pi] at a fixed bit stride,
// the rest of the fast range at a wider one, every float within 8 ulps of each
// multiple of pi/2 up to the fast limit (where the reduction cancels most), the limit
// itself and specials. KJIT_MATH_EXHAUSTIVE=1 checks every float up to the limit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kjit/types.cuh"  // tests/unit/emulation/host

#include "kjit/math.cuh"

namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
uint32_t to_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// |got - want| in units of the float spacing at want (the spacing of the smallest
// normal below it, so results near zero are not held to subnormal spacing).
double ulp_error(float got, double want) {
  const double a =
      std::max(std::fabs(want), static_cast<double>(std::numeric_limits<float>::min()));
  const double spacing = std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

struct Worst {
  double ulps = 0;
  float at = 0;
  long long checked = 0;
  void check(float x) {
    float s, c;
    kjit::sincos_f32(x, &s, &c);
    const double es = ulp_error(s, std::sin(static_cast<double>(x)));
    const double ec = ulp_error(c, std::cos(static_cast<double>(x)));
    const double e = std::max(es, ec);
    if (!(e <= ulps)) {  // NaN too
      ulps = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      at = x;
    }
    ++checked;
  }
  void check_both_signs(float x) {
    check(x);
    check(-x);
  }
};

// Two ulps, the bound the CUDA math library documents for sinf/cosf.
constexpr double kMaxUlps = 2.0;

TEST(MathSinCos, SmallArgumentsAtAStride) {
  Worst w;
  const uint32_t end = to_bits(4.0f * 3.14159265f);
  for (uint32_t u = 0; u <= end; u += 97) w.check_both_signs(from_bits(u));
  EXPECT_LE(w.ulps, kMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

TEST(MathSinCos, RestOfTheFastRangeAtAStride) {
  Worst w;
  const uint32_t begin = to_bits(4.0f * 3.14159265f), end = to_bits(kjit::kSinCosFastLimit);
  for (uint32_t u = begin; u <= end; u += 101) w.check_both_signs(from_bits(u));
  w.check_both_signs(kjit::kSinCosFastLimit);
  EXPECT_LE(w.ulps, kMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

// Near k * pi/2 the reduced argument is tiny and the reduction cancels the most bits.
TEST(MathSinCos, NearEveryMultipleOfHalfPi) {
  Worst w;
  const long long last = static_cast<long long>(kjit::kSinCosFastLimit / 1.5707963267948966);
  for (long long k = 1; k <= last; ++k) {
    const uint32_t mid = to_bits(static_cast<float>(k * 1.5707963267948966));
    for (uint32_t u = mid - 8; u <= mid + 8; ++u) w.check_both_signs(from_bits(u));
  }
  EXPECT_LE(w.ulps, kMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

// Beyond the limit the library routine runs: still accurate, and inf/NaN give NaN.
TEST(MathSinCos, LargeArgumentsAndSpecials) {
  Worst w;
  for (float x : {std::nextafter(kjit::kSinCosFastLimit, 1e9f), 1e6f, 3.0e7f, 1.0e20f, 3.4e38f})
    w.check_both_signs(x);
  EXPECT_LE(w.ulps, kMaxUlps) << "worst at x = " << w.at;
  for (float x : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    float s = 0, c = 0;
    kjit::sincos_f32(x, &s, &c);
    EXPECT_TRUE(std::isnan(s) && std::isnan(c)) << "x = " << x;
  }
  float s = 1, c = 0;
  kjit::sincos_f32(-0.0f, &s, &c);
  EXPECT_EQ(to_bits(s), to_bits(-0.0f)) << "sin(-0) keeps its sign";
  EXPECT_EQ(c, 1.0f);
  const float tiny = std::numeric_limits<float>::denorm_min();
  kjit::sincos_f32(tiny, &s, &c);
  EXPECT_EQ(s, tiny);
  kjit::sincos_f32(0.5f, &s, &c);
  EXPECT_EQ(kjit::sin_f32(0.5f), s) << "sin_f32 is sincos_f32's first half";
  EXPECT_EQ(kjit::cos_f32(0.5f), c) << "cos_f32 is sincos_f32's second half";
}

TEST(MathSinCos, ExhaustiveWhenAsked) {
  const char* flag = std::getenv("KJIT_MATH_EXHAUSTIVE");
  if (flag == nullptr || std::strcmp(flag, "1") != 0)
    GTEST_SKIP() << "set KJIT_MATH_EXHAUSTIVE=1 to check every float up to the fast limit";
  Worst w;
  const uint32_t end = to_bits(kjit::kSinCosFastLimit);
  for (uint32_t u = 0; u <= end; ++u) w.check_both_signs(from_bits(u));
  EXPECT_LE(w.ulps, kMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

}  // namespace
