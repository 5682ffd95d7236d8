// templates/math.cuh on the CPU: kjit::sincos_f32 against fp64 sin/cos and
// kjit::gelu_f32 against fp64 x * erfc(-x / sqrt 2) / 2, in ulps of the float result. The device
// runs the same source (fmaf is a fused multiply-add on both), so what holds here holds there;
// tests/gpu checks the device too.
//
// The default sweep takes a few seconds: floats in [-4pi, 4pi] at a fixed bit stride,
// the rest of the fast range at a wider one, every float within 8 ulps of each
// multiple of pi/2 up to the fast limit (where the reduction cancels most), the limit
// itself and specials. KJIT_MATH_EXHAUSTIVE=1 checks every float up to the limit.
// gelu: floats in [-24, 24] at a bit stride, around the branch at 0, the cap and
// specials; KJIT_MATH_EXHAUSTIVE=1 checks every float. kjit::gelu_for_16bit the same
// way, in relative error (the host stands in exact 1/y and 2^y for the hardware's
// approximations; tests/gpu checks the device's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kjit/types.cuh"  // tests/unit/emulation/host

#include "kjit/math.cuh"
#include "tests/support/gelu_error.h"

namespace {

using kjit::testing::from_bits;
using kjit::testing::gelu_reference;
using kjit::testing::to_bits;
using kjit::testing::ulp_error;

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

// ---- gelu ------------------------------------------------------------------------

struct GeluWorst {
  double ulps = 0;
  float at = 0;
  long long checked = 0;
  void check(float x) {
    const double e = ulp_error(kjit::gelu_f32(x), gelu_reference(x));
    if (!(e <= ulps)) {
      ulps = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      at = x;
    }
    ++checked;
  }
};

// Eight ulps. Most of it is the rounding of t = 1 / (1 + |x|/4) (and of 1 + |x|/4),
// which R(t) = t * P(t) amplifies by its logarithmic slope, up to 3.2 near x = 0;
// then the polynomial (2e-8), expf and the final products.
constexpr double kGeluMaxUlps = 8.0;

TEST(MathGelu, EveryRangeAtAStride) {
  GeluWorst w;
  const uint32_t end = to_bits(24.0f);
  for (uint32_t u = 0; u <= end; u += 61) {
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  EXPECT_LE(w.ulps, kGeluMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

TEST(MathGelu, AroundZeroAndTheCap) {
  GeluWorst w;
  for (uint32_t u = 0; u <= 4000; ++u) {  // zero and the smallest magnitudes, both signs
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  for (float center : {19.0f, -19.0f, 14.0f, -14.0f, 13.2f, -13.2f, 1.0f, -1.0f})
    for (int i = -2000; i <= 2000; ++i) w.check(from_bits(to_bits(center) + i));
  EXPECT_LE(w.ulps, kGeluMaxUlps) << "worst at x = " << w.at;
  EXPECT_EQ(kjit::gelu_f32(0.0f), 0.0f);
  EXPECT_EQ(kjit::gelu_f32(100.0f), 100.0f) << "Phi(100) rounds to 1";
  EXPECT_EQ(kjit::gelu_f32(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(kjit::gelu_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(to_bits(kjit::gelu_f32(-std::numeric_limits<float>::infinity())), to_bits(-0.0f))
      << "the limit of x * Phi(x), not -inf * 0";
  EXPECT_EQ(to_bits(kjit::gelu_f32(-100.0f)), to_bits(-0.0f));
}

TEST(MathGelu, ExhaustiveWhenAsked) {
  const char* flag = std::getenv("KJIT_MATH_EXHAUSTIVE");
  if (flag == nullptr || std::strcmp(flag, "1") != 0)
    GTEST_SKIP() << "set KJIT_MATH_EXHAUSTIVE=1 to check every float";
  GeluWorst w;
  const uint32_t end = to_bits(std::numeric_limits<float>::infinity());
  for (uint32_t u = 0; u < end; ++u) {
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  EXPECT_LE(w.ulps, kGeluMaxUlps) << "worst at x = " << w.at << " (" << w.checked << " checked)";
}

// ---- gelu for 16-bit results ----------------------------------------------------

// kjit::gelu_for_16bit against its stated bounds (tests/support/gelu_error.h).
struct Gelu16Worst : kjit::testing::GeluFor16BitError {
  void check(float x) { GeluFor16BitError::check(x, kjit::gelu_for_16bit(x)); }
  void expect_within_bounds() const {
    EXPECT_LE(near, near_bound()) << "|x| <= 4, worst at x = " << near_at << " (" << checked
                                  << " checked)";
    EXPECT_LE(far, far_bound()) << "normal results, worst at x = " << far_at;
    EXPECT_LE(tiny, far_bound()) << "subnormal results, worst at x = " << tiny_at;
    std::printf(
        "gelu_for_16bit over %lld floats: worst relative 2^%.2f (|x| <= 4, at %g), "
        "2^%.2f (at %g)\n",
        checked, std::log2(near), near_at, std::log2(far), far_at);
  }
};

TEST(MathGeluFor16Bit, EveryRangeAtAStride) {
  Gelu16Worst w;
  const uint32_t end = to_bits(24.0f);
  for (uint32_t u = 0; u <= end; u += 61) {
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  w.expect_within_bounds();
}

TEST(MathGeluFor16Bit, AroundZeroTheCapAndTheFlush) {
  Gelu16Worst w;
  for (uint32_t u = 0; u <= 4000; ++u) {
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  // 18.7: where 2^y of the half exponent would flush; 13.2 to 14: results go subnormal.
  for (float center : {19.0f, -19.0f, 18.7f, -18.7f, 14.0f, -14.0f, 13.2f, -13.2f, 4.0f, -4.0f})
    for (int i = -2000; i <= 2000; ++i) w.check(from_bits(to_bits(center) + i));
  w.expect_within_bounds();
  EXPECT_EQ(to_bits(kjit::gelu_for_16bit(0.0f)), to_bits(0.0f));
  EXPECT_EQ(to_bits(kjit::gelu_for_16bit(-0.0f)), to_bits(-0.0f));
  EXPECT_EQ(kjit::gelu_for_16bit(100.0f), 100.0f);
  EXPECT_EQ(kjit::gelu_for_16bit(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(kjit::gelu_for_16bit(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(to_bits(kjit::gelu_for_16bit(-std::numeric_limits<float>::infinity())), to_bits(-0.0f))
      << "the limit of x * Phi(x), not -inf * 0";
  EXPECT_EQ(to_bits(kjit::gelu_for_16bit(-100.0f)), to_bits(-0.0f));
}

TEST(MathGeluFor16Bit, ExhaustiveWhenAsked) {
  const char* flag = std::getenv("KJIT_MATH_EXHAUSTIVE");
  if (flag == nullptr || std::strcmp(flag, "1") != 0)
    GTEST_SKIP() << "set KJIT_MATH_EXHAUSTIVE=1 to check every float";
  Gelu16Worst w;
  const uint32_t end = to_bits(std::numeric_limits<float>::infinity());
  for (uint32_t u = 0; u < end; ++u) {
    w.check(from_bits(u));
    w.check(-from_bits(u));
  }
  w.expect_within_bounds();
}

}  // namespace
