// The statistics behind every time kjit reports: the median of many runs, a
// bootstrap confidence interval for it, the comparison of two such intervals,
// and the rank correlation used to judge the performance model.
//
// Pure C++ (no CUDA): the timer (tuner/timer.h) collects the samples, this file
// summarizes them, and the unit tests check it without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::tuner {

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

// A timing summary: the median and a 95% confidence interval for it.
struct Summary {
  double median_ms = 0;
  double low_ms = 0, high_ms = 0;  // the confidence interval of the median
  double min_ms = 0;
  int64_t runs = 0;
  // The median SM clock over the runs, when the timer measured it (TimerOptions::
  // at_peak_clock; the times above are then scaled to the peak clock); 0 otherwise.
  double clock_mhz = 0;
  // The interval's width relative to the median: what the store keeps as `spread`.
  double spread() const { return median_ms > 0 ? (high_ms - low_ms) / median_ms : 0; }
  // "0.1862 ms [0.1859, 0.1867] over 25 runs"
  std::string to_string() const;
};

// Median and a percentile-bootstrap 95% interval of the median (`resamples`
// resamplings with replacement). Deterministic: the generator is seeded from the
// samples' count, so the same samples always give the same interval.
Summary summarize(const std::vector<double>& samples_ms, int resamples = 1000);

// The interval a stored measurement stands for (median, spread = width / median).
Summary from_stored(double median_ms, double spread, int64_t runs);

// Whether the two confidence intervals overlap: the measurements cannot tell the
// two apart.
bool overlaps(const Summary& a, const Summary& b);

// Spearman's rank correlation of two equally long series (ties get their average
// rank); 0 for fewer than two points or a constant series.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace kjit::tuner
