#include "kjit/support/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kjit {
namespace {

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
}

TEST(Half, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);       // overflow to inf
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(1e-9f), 0x0000);
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604645e-8f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.33325195f);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(Half, F16RoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << bits;
  }
}

TEST(Half, F16RoundingMatchesDoubleRounding) {
  // For values between two halves, the result is the nearer one (ties to even).
  for (uint32_t bits = 0x0001; bits < 0x7bff; bits += 7) {
    float lo = f16_to_f32(static_cast<uint16_t>(bits));
    float hi = f16_to_f32(static_cast<uint16_t>(bits + 1));
    float quarter = lo + (hi - lo) * 0.25f;
    float three_quarters = lo + (hi - lo) * 0.75f;
    EXPECT_EQ(f32_to_f16(quarter), bits);
    EXPECT_EQ(f32_to_f16(three_quarters), bits + 1);
  }
}

}  // namespace
}  // namespace kjit
