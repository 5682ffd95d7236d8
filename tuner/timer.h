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
//     the leader's median is stopped early;
//   - optionally (`at_peak_clock`), each run's SM clock is measured and its time
//     scaled to the peak clock. Under a long run of heavy kernels (a tune) the board
//     sits at its power cap and the SM clock moves from one 100 ms to the next
//     (1635-1965 MHz on the H200, 1980 MHz at rest), so two candidates' medians can
//     differ by the clock they happened to get rather than by their code. A
//     compute-bound kernel's time follows the SM clock, so `time x clock / peak` is
//     the time it takes at the peak clock, whatever the power cap allowed meanwhile.
//     The clock comes from a one-thread probe kernel before and after the run that
//     counts `clock64` cycles against `%globaltimer` nanoseconds on its own SM.
#pragma once

#include <cuda.h>

#include <cstdint>

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
  // Scale each run's time to the peak SM clock (see above). For compute-bound work
  // only: a memory-bound kernel's time barely follows the SM clock. The tuner sets
  // it when the model calls the problem compute bound; `kjit bench` reports raw times.
  bool at_peak_clock = false;
};

// The SM clock in MHz from the two probes around a run: each gives the cycles and
// nanoseconds its spin took. The mean of the two stands for the run's clock; a probe
// that read no time (0 ns) is left out, and 0 means neither could measure it.
double probed_clock_mhz(uint64_t cycles_before, uint64_t ns_before, uint64_t cycles_after,
                        uint64_t ns_after);

class Timer {
 public:
  // `l2_bytes`: the device's L2 (the flush buffer is twice that, at least 64 MiB);
  // `peak_clock_khz`: the device's peak SM clock (needed for `at_peak_clock`).
  Timer(CUstream stream, int64_t l2_bytes, TimerOptions options = {}, int peak_clock_khz = 0);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
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
  // One timed run: its time (scaled to the peak clock when asked) and the SM clock
  // measured around it (0 when not measured).
  struct Run {
    double ms = 0;
    double clock_mhz = 0;
  };
  Run time_once(const Work& work, int run);
  void probe_clock(int slot);

  CUstream stream_;
  TimerOptions options_;
  int peak_clock_khz_ = 0;
  cuda::DeviceBuffer flush_;
  std::unique_ptr<cuda::Event> start_, stop_;
  // The clock probe (at_peak_clock): its module, kernel and two result slots.
  CUmodule probe_module_ = nullptr;
  CUfunction probe_ = nullptr;
  cuda::DeviceBuffer probe_out_;
};

}  // namespace kjit::tuner
