#include "kjit/tuner/timer.h"

#include <algorithm>

#include "kjit/runtime/cuda/driver.h"

namespace kjit::tuner {

Timer::Timer(CUstream stream, int64_t l2_bytes, TimerOptions options)
    : stream_(stream), options_(options) {
  if (options_.flush_l2)
    flush_ = cuda::DeviceBuffer(
        static_cast<size_t>(std::max<int64_t>(2 * l2_bytes, int64_t{64} << 20)) / 4 * 4);
  start_ = std::make_unique<cuda::Event>();
  stop_ = std::make_unique<cuda::Event>();
}

double Timer::time_once(const Work& work, int run) {
  if (options_.flush_l2)
    KJIT_CU(cuMemsetD32Async, flush_.get(), static_cast<unsigned>(run), flush_.bytes() / 4,
            stream_);
  start_->record(stream_);
  work(run);
  stop_->record(stream_);
  stop_->synchronize();
  return stop_->elapsed_ms_since(*start_);
}

Summary Timer::time(const Work& work, int runs) {
  int run = 0;
  for (int i = 0; i < options_.warmup; ++i) work(run++);
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) samples.push_back(time_once(work, run++));
  return summarize(samples);
}

std::vector<Timer::Result> Timer::interleaved(const std::vector<Work>& works, double leader_ms) {
  const size_t n = works.size();
  std::vector<std::vector<double>> samples(n);
  std::vector<int> runs(n, 0);
  std::vector<Result> out(n);
  for (size_t i = 0; i < n; ++i)
    for (int w = 0; w < options_.warmup; ++w) works[i](runs[i]++);
  for (int round = 0; round < options_.rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i].stopped_early) continue;
      for (int r = 0; r < options_.runs_per_round; ++r)
        samples[i].push_back(time_once(works[i], runs[i]++));
    }
    if (round != 1 || options_.hopeless <= 0) continue;
    // After two rounds: the leader is the fastest median so far (or the time given).
    double leader = leader_ms > 0 ? leader_ms : 0;
    for (size_t i = 0; i < n; ++i) {
      const double m = median(samples[i]);
      if (leader == 0 || m < leader) leader = m;
    }
    for (size_t i = 0; i < n; ++i) {
      const double best = *std::min_element(samples[i].begin(), samples[i].end());
      if (best > options_.hopeless * leader) out[i].stopped_early = true;
    }
  }
  for (size_t i = 0; i < n; ++i) out[i].summary = summarize(samples[i]);
  return out;
}

}  // namespace kjit::tuner
