#include "kjit/tuner/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace kjit::tuner {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size();
  std::nth_element(values.begin(), values.begin() + n / 2, values.end());
  const double upper = values[n / 2];
  if (n % 2) return upper;
  return 0.5 * (upper + *std::max_element(values.begin(), values.begin() + n / 2));
}

std::string Summary::to_string() const {
  std::string out =
      fmt::format("{:.4f} ms [{:.4f}, {:.4f}] over {} runs", median_ms, low_ms, high_ms, runs);
  if (clock_mhz > 0) out += fmt::format(", at the peak clock (ran at {:.0f} MHz)", clock_mhz);
  return out;
}

Summary summarize(const std::vector<double>& samples, int resamples) {
  Summary s;
  s.runs = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  s.median_ms = median(samples);
  s.min_ms = *std::min_element(samples.begin(), samples.end());
  if (samples.size() < 3) {  // too few to resample: the interval is the range
    s.low_ms = s.min_ms;
    s.high_ms = *std::max_element(samples.begin(), samples.end());
    return s;
  }
  std::mt19937_64 rng(0x6b6a6974u + samples.size());
  std::uniform_int_distribution<size_t> pick(0, samples.size() - 1);
  std::vector<double> medians(static_cast<size_t>(resamples)), draw(samples.size());
  for (double& m : medians) {
    for (double& d : draw) d = samples[pick(rng)];
    m = median(draw);
  }
  std::sort(medians.begin(), medians.end());
  auto at = [&](double q) {
    const size_t i = static_cast<size_t>(std::floor(q * (medians.size() - 1) + 0.5));
    return medians[std::min(i, medians.size() - 1)];
  };
  s.low_ms = at(0.025);
  s.high_ms = at(0.975);
  return s;
}

Summary from_stored(double median_ms, double spread, int64_t runs) {
  Summary s;
  s.median_ms = s.min_ms = median_ms;
  s.low_ms = median_ms * (1 - spread / 2);
  s.high_ms = median_ms * (1 + spread / 2);
  s.runs = runs;
  return s;
}

bool overlaps(const Summary& a, const Summary& b) {
  return a.low_ms <= b.high_ms && b.low_ms <= a.high_ms;
}

namespace {

std::vector<double> ranks(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return values[x] < values[y]; });
  std::vector<double> out(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    const double average = 0.5 * static_cast<double>(i + j) + 1;  // ranks from 1
    for (size_t k = i; k <= j; ++k) out[order[k]] = average;
    i = j + 1;
  }
  return out;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return 0;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double mean = (n + 1) / 2;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (va == 0 || vb == 0) return 0;
  return cov / std::sqrt(va * vb);
}

}  // namespace kjit::tuner
