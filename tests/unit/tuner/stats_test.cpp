// The statistics behind every reported time, and the one output check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kjit/tuner/check.h"
#include "kjit/tuner/stats.h"
#include "kjit/tuner/timer.h"

namespace kjit::tuner {
namespace {

// The timer's clock from its two probes (cycles, ns) around a run.
TEST(Timer, ClockFromTwoProbesIsTheirMean) {
  EXPECT_DOUBLE_EQ(probed_clock_mhz(19800, 10000, 16000, 10000), 1790);  // 1980 and 1600 MHz
}

TEST(Timer, AProbeThatReadNoTimeIsLeftOut) {
  // A 0 ns probe used to count as a 0 MHz clock and halve the mean (and so the
  // run's scaled time); now the other probe stands alone.
  EXPECT_DOUBLE_EQ(probed_clock_mhz(19800, 10000, 0, 0), 1980);
  EXPECT_DOUBLE_EQ(probed_clock_mhz(5, 0, 16000, 10000), 1600);
  EXPECT_EQ(probed_clock_mhz(0, 0, 7, 0), 0);  // neither measured: no clock, no scaling
}

TEST(Stats, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

TEST(Stats, IntervalHoldsTheMedianAndIsDeterministic) {
  std::vector<double> samples;
  for (int i = 0; i < 25; ++i) samples.push_back(1.0 + 0.01 * ((i * 7) % 11));
  const Summary a = summarize(samples), b = summarize(samples);
  EXPECT_EQ(a.median_ms, median(samples));
  EXPECT_LE(a.low_ms, a.median_ms);
  EXPECT_GE(a.high_ms, a.median_ms);
  EXPECT_EQ(a.low_ms, b.low_ms);  // seeded: the same samples, the same interval
  EXPECT_EQ(a.high_ms, b.high_ms);
  EXPECT_EQ(a.runs, 25);
  EXPECT_GT(a.spread(), 0);
  // A wider spread of samples gives a wider interval.
  std::vector<double> noisy = samples;
  for (size_t i = 0; i < noisy.size(); i += 2) noisy[i] *= 1.5;
  EXPECT_GT(summarize(noisy).spread(), a.spread());
}

TEST(Stats, ToStringNamesTheClockOnlyWhenMeasured) {
  Summary s = summarize({1.0, 1.1, 1.2});
  EXPECT_EQ(s.to_string().find("MHz"), std::string::npos);
  s.clock_mhz = 1712.4;
  EXPECT_NE(s.to_string().find("at the peak clock (ran at 1712 MHz)"), std::string::npos)
      << s.to_string();
}

TEST(Stats, OverlapAndStoredIntervals) {
  const Summary a = from_stored(1.0, 0.02, 25);  // [0.99, 1.01]
  EXPECT_NEAR(a.low_ms, 0.99, 1e-12);
  EXPECT_NEAR(a.high_ms, 1.01, 1e-12);
  EXPECT_TRUE(overlaps(a, from_stored(1.015, 0.02, 25)));
  EXPECT_FALSE(overlaps(a, from_stored(1.05, 0.02, 25)));
}

TEST(Stats, SpearmanRanks) {
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 100, 1000, 5000}), 1, 1e-12);  // monotone, not linear
  EXPECT_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0);                         // constant: no ranking
  EXPECT_EQ(spearman({1}, {2}), 0);
  // Ties get their average rank: (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 2, 3, 4}), 0.9486832980505138, 1e-12);
}

TEST(Check, NanNeverPassesAndNonFiniteReferencesMustMatch) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(relative_l2({1, 2}, {1, 2}), 0);
  EXPECT_TRUE(std::isinf(relative_l2({1, kNan}, {1, 2})));
  EXPECT_TRUE(std::isinf(relative_l2({1, kInf}, {1, 2})));
  EXPECT_EQ(relative_l2({1, kInf}, {1, kInf}), 0);
  EXPECT_EQ(relative_l2({1, kNan}, {1, kNan}), 0);
  EXPECT_TRUE(std::isinf(relative_l2({1, -kInf}, {1, kInf})));
  EXPECT_TRUE(std::isinf(relative_l2({1}, {1, 2})));
  EXPECT_TRUE(std::isinf(relative_l2({1}, {0})));  // anything against an all-zero reference
  EXPECT_EQ(relative_l2({0}, {0}), 0);
  EXPECT_NEAR(relative_l2({3, 4.5}, {3, 4}), 0.1, 1e-12);  // 0.5 / 5
}

TEST(Check, TolerancesByPrecision) {
  EXPECT_EQ(tolerance(Precision::Exact32), 1e-5);
  EXPECT_EQ(tolerance(Precision::TF32), 5e-3);
  EXPECT_EQ(tolerance(Precision::Half), 1e-2);
  EXPECT_EQ(precision_of(ir::DType::BF16), Precision::Half);
  EXPECT_EQ(precision_of(ir::DType::I32), Precision::Exact32);
  const CheckOutcome bad =
      check({1, std::numeric_limits<double>::quiet_NaN()}, {1, 2}, Precision::Half);
  EXPECT_FALSE(bad.passed());
  EXPECT_NE(bad.detail.find("element 1"), std::string::npos) << bad.detail;
  EXPECT_TRUE(check({1.001, 2}, {1, 2}, Precision::Half).passed());
  EXPECT_FALSE(check({1.001, 2}, {1, 2}, Precision::Exact32).passed());
}

}  // namespace
}  // namespace kjit::tuner
