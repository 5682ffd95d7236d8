// The one timer of the project: the tuner, `kjit bench`, the benchmarks and the
// demo all time GPU work through it, so their numbers mean the same thing.
//
//   - CUDA events around the work only, on the caller's stream;
//   - warm-up runs first (module load, first-touch, clocks ramping up);
//   - L2 flushed before every timed run (a memset over twice the L2 size), so the
//     inputs come from DRAM as they would in a real pipeline; the work callback
//     gets the run's index to rotate among input sets where there are several;
//   - several candidates are timed in interleaved rounds (round r times every
//     candidate before round r + 1 starts), so a clock that drifts during the
//     measurement moves every candidate alike;
//   - the result is the median with a bootstrap 95% interval (tuner/stats.h);
//   - a candidate whose best run after two rounds is `hopeless` times slower than
//     the leader's median is stopped early.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <vector>

#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/tuner/stats.h"

namespace kjit::tuner {

struct TimerOptions {
  int warmup = 2;          // untimed runs per candidate before the first round
  int rounds = 5;          // interleaved rounds
  int runs_per_round = 5;  // timed runs of a candidate per round
  bool flush_l2 = true;
  // Stop a candidate whose fastest run is this much slower than the leader's median
  // (after two rounds); 0 never stops one.
  double hopeless = 1.25;
};

class Timer {
 public:
  // `l2_bytes`: the device's L2 (the flush buffer is twice that, at least 64 MiB).
  Timer(CUstream stream, int64_t l2_bytes, TimerOptions options = {});
  const TimerOptions& options() const { return options_; }

  // One work item's timing: `work(run)` launches it (asynchronously, on the
  // timer's stream); `run` counts every call, warm-up included.
  using Work = std::function<void(int run)>;

  // Median and interval of `runs` timed runs after the warm-up.
  Summary time(const Work& work, int runs);

  struct Result {
    Summary summary;
    bool stopped_early = false;
  };
  // Every work item timed in interleaved rounds; `leader_ms` (if > 0) is a time
  // already measured elsewhere that counts as the leader for early stopping.
  std::vector<Result> interleaved(const std::vector<Work>& works, double leader_ms = 0);

 private:
  double time_once(const Work& work, int run);

  CUstream stream_;
  TimerOptions options_;
  cuda::DeviceBuffer flush_;
  std::unique_ptr<cuda::Event> start_, stop_;
};

}  // namespace kjit::tuner
