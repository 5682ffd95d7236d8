#include "kjit/tuner/timer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::tuner {
namespace {

// The clock probe: one thread spins for at least `cycles` SM cycles and writes how
// many cycles (`clock64`, this SM's counter) and nanoseconds (`%globaltimer`, the
// GPU's wall clock) the spin took; cycles / nanoseconds is the SM clock in GHz.
// PTX text, so the driver compiles it for whatever GPU this is (no NVRTC needed).
constexpr const char* kProbePtx = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry kjit_clock_probe(.param .u64 out, .param .u64 cycles)
{
  .reg .pred %p;
  .reg .b64 %rd<9>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [cycles];
  mov.u64 %rd3, %globaltimer;
  mov.u64 %rd4, %clock64;
spin:
  mov.u64 %rd5, %clock64;
  sub.u64 %rd6, %rd5, %rd4;
  setp.lo.u64 %p, %rd6, %rd2;
  @%p bra spin;
  mov.u64 %rd7, %globaltimer;
  sub.u64 %rd8, %rd7, %rd3;
  st.global.u64 [%rd1], %rd6;
  st.global.u64 [%rd1+8], %rd8;
  ret;
}
)";

// How long a probe spins: 10 µs at the peak clock, so that the wall clock's
// granularity (32 ns on recent GPUs) is a fraction of a percent of it.
constexpr double kProbeMicroseconds = 10.0;

}  // namespace

double probed_clock_mhz(uint64_t cycles_before, uint64_t ns_before, uint64_t cycles_after,
                        uint64_t ns_after) {
  double sum = 0;
  int probes = 0;
  for (auto [cycles, ns] : {std::pair{cycles_before, ns_before}, {cycles_after, ns_after}}) {
    if (ns == 0) continue;
    sum += static_cast<double>(cycles) / static_cast<double>(ns);  // cycles per ns = GHz
    ++probes;
  }
  return probes > 0 ? 1e3 * sum / probes : 0;
}

Timer::Timer(CUstream stream, int64_t l2_bytes, TimerOptions options, int peak_clock_khz)
    : stream_(stream), options_(options), peak_clock_khz_(peak_clock_khz) {
  if (options_.flush_l2)
    flush_ = cuda::DeviceBuffer(
        static_cast<size_t>(std::max<int64_t>(2 * l2_bytes, int64_t{64} << 20)) / 4 * 4);
  start_ = std::make_unique<cuda::Event>();
  stop_ = std::make_unique<cuda::Event>();
  if (options_.at_peak_clock) {
    if (peak_clock_khz_ <= 0)
      throw InternalError("a timer at the peak clock needs the device's peak SM clock");
    KJIT_CU(cuModuleLoadData, &probe_module_, kProbePtx);
    KJIT_CU(cuModuleGetFunction, &probe_, probe_module_, "kjit_clock_probe");
    probe_out_ = cuda::DeviceBuffer(4 * sizeof(uint64_t));
  }
}

Timer::~Timer() {
  if (probe_module_) cuda::Driver::get().api().cuModuleUnload(probe_module_);
}

void Timer::probe_clock(int slot) {
  CUdeviceptr out = probe_out_.get() + static_cast<CUdeviceptr>(slot) * 2 * sizeof(uint64_t);
  uint64_t cycles = static_cast<uint64_t>(peak_clock_khz_ * kProbeMicroseconds / 1e3);
  void* args[] = {&out, &cycles};
  KJIT_CU(cuLaunchKernel, probe_, 1, 1, 1, 1, 1, 1, 0, stream_, args, nullptr);
}

Timer::Run Timer::time_once(const Work& work, int run) {
  if (options_.flush_l2)
    KJIT_CU(cuMemsetD32Async, flush_.get(), static_cast<unsigned>(run), flush_.bytes() / 4,
            stream_);
  if (probe_) probe_clock(0);
  start_->record(stream_);
  work(run);
  stop_->record(stream_);
  if (!probe_) {
    stop_->synchronize();
    return {stop_->elapsed_ms_since(*start_), 0};
  }
  probe_clock(1);
  // The clock before and after the run; their mean stands for the run's clock
  // (the power cap moves it over milliseconds, a run lasts a fraction of one).
  // One sync on the stream covers the stop event and the second probe.
  KJIT_CU(cuStreamSynchronize, stream_);
  Run out{stop_->elapsed_ms_since(*start_), 0};
  std::array<uint64_t, 4> probe{};
  KJIT_CU(cuMemcpyDtoH, probe.data(), probe_out_.get(), sizeof(probe));
  out.clock_mhz = probed_clock_mhz(probe[0], probe[1], probe[2], probe[3]);
  if (out.clock_mhz > 0) out.ms *= out.clock_mhz / (peak_clock_khz_ / 1e3);
  return out;
}

Summary Timer::time(const Work& work, int runs) {
  int run = 0;
  for (int i = 0; i < options_.warmup; ++i) work(run++);
  std::vector<double> samples, clocks;
  for (int i = 0; i < runs; ++i) {
    const Run r = time_once(work, run++);
    samples.push_back(r.ms);
    clocks.push_back(r.clock_mhz);
  }
  Summary s = summarize(samples);
  s.clock_mhz = median(clocks);
  return s;
}

std::vector<Timer::Result> Timer::interleaved(const std::vector<Work>& works, double leader_ms) {
  const size_t n = works.size();
  std::vector<std::vector<double>> samples(n), clocks(n);
  std::vector<int> runs(n, 0);
  std::vector<Result> out(n);
  for (size_t i = 0; i < n; ++i)
    for (int w = 0; w < options_.warmup; ++w) works[i](runs[i]++);
  for (int round = 0; round < options_.rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i].stopped_early) continue;
      for (int r = 0; r < options_.runs_per_round; ++r) {
        const Run run = time_once(works[i], runs[i]++);
        samples[i].push_back(run.ms);
        clocks[i].push_back(run.clock_mhz);
      }
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
  for (size_t i = 0; i < n; ++i) {
    out[i].summary = summarize(samples[i]);
    out[i].summary.clock_mhz = median(clocks[i]);
  }
  return out;
}

}  // namespace kjit::tuner
