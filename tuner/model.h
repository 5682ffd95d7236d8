// The performance model: a predicted time for one config of one problem on one
// GPU, from first principles and a few measured efficiencies.
//
//   time = max(compute, memory) + serial overheads
//   compute = waves x (blocks sharing an SM) x (one block's work / the SM's rate x efficiency)
//   waves   = ceil(work units / (SMs x resident blocks)), the last one partly full
//   memory  = the bytes moved (tile re-reads included) / the device's bandwidth
//
// The SM count, clocks, bandwidth, shared memory and registers come from the
// device; occupancy from the compiled kernel's registers and shared memory (or an
// estimate before compiling). What no datasheet gives — how close an engine and a
// tile shape get to the peak — is an efficiency per key ("wgmma 128x256 s4"): a
// prior, replaced by values fitted to the measured trials of the GPU model
// (fit_efficiencies) as soon as there are some. The model ranks a space (measure
// the top k) and is the choice when nothing was tuned.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kjit/runtime/cuda/device.h"

namespace kjit::tuner {

// What a compiled kernel asks of an SM (ptxas' report, or an estimate).
struct KernelResources {
  int threads = 0;
  int registers = 0;     // per thread
  int shared_bytes = 0;  // per block, static + dynamic
  bool estimated = true;
};

// Resident blocks per SM and what limits them.
struct Occupancy {
  int blocks_per_sm = 0;
  int by_threads = 0, by_registers = 0, by_shared = 0, by_blocks = 0;
  std::string limiter;  // "shared memory", "registers", "threads", "blocks per SM", or "none"
};
Occupancy occupancy(const KernelResources& resources, const cuda::DeviceProperties& device);

// How whole work units (output tiles x K splits, or a grid's blocks) fill the SMs.
struct Waves {
  int64_t units = 0;
  int64_t slots = 0;     // SMs x resident blocks
  int64_t waves = 0;     // ceil(units / slots)
  double last_fill = 0;  // the last wave's fraction of busy slots
  // units / (waves x slots): the fraction of SM time that does work.
  double utilization() const;
};
Waves waves_of(int64_t units, int64_t slots);

// What one launch computes and the fewest bytes it must move (inputs read once,
// outputs written once): the roofline's two axes.
struct Work {
  double flops = 0;
  double bytes = 0;
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
};

// The rates the model uses for a device, from its properties.
struct DeviceRates {
  int sms = 0;
  double sm_clock_hz = 0;
  double dram_bytes_per_s = 0;  // achievable: 90% of 2 x memory clock x bus width
  // L2 to the SMs (the tiles' re-reads of A and B): kL2BytesPerSmClock per SM per
  // clock, a prior. It scales with the SMs and their clock, not with DRAM.
  double l2_bytes_per_s = 0;
  // Dense tensor-core FLOP/s per SM per clock for 16-bit inputs: 4096 on sm_90
  // (wgmma), 2048 on sm_80/86/89 (mma.sync); tf32 half of that; SIMT fp32 256.
  double tensor_flops_per_sm_clock = 0;
  double simt_flops_per_sm_clock = 0;
  // The device's dense tensor-core peak, FLOP/s (16-bit inputs).
  double tensor_peak() const { return tensor_flops_per_sm_clock * sm_clock_hz * sms; }
  // The ridge point: FLOPs per byte above which the tensor cores, not DRAM, bound.
  double ridge() const;
};
DeviceRates rates_of(const cuda::DeviceProperties& device);
// Bytes per SM per clock that L2 serves, a prior: the H200's 2.5 x achievable DRAM
// over 132 SMs at 1.98 GHz (11.06 TB/s), which its tunes were fitted with. It was
// 2.5 x DRAM on every GPU, which on the H100 (same SMs and L2, 2/3 of the DRAM)
// priced 128 x 256 tiles as L2-bound at 0.216 ms for 4096^3; measured 0.179, the
// 192 x 192 tiles the model picked instead 0.200
// (docs/perf/2026-12-05-h200-cluster-multicast.md, call 1).
inline constexpr double kL2BytesPerSmClock = 42.33;
// Bytes per SM per clock at which an output tile leaves the SM (the consumers'
// stores, or their hand-over to the copy engine), a prior: the H200's achievable
// DRAM over its SMs (4.43 TB/s over 132 SMs at 1.98 GHz), at which the matmul
// model's write-out costs were fitted. It was that DRAM share on every GPU; the H100
// (2/3 of the DRAM) ran the same tiles within 2% of the H200 (call 1 of the same
// note: 4096^3 in 128 x 256 tiles 0.1791 ms against 0.1759, 16384 x 8192 x 1024
// 0.3919 against 0.3882).
inline constexpr double kWriteBytesPerSmClock = 16.93;

// Measured efficiencies by key for one GPU model, over priors the families give.
class Efficiencies {
 public:
  struct Fitted {
    double value = 0;
    int samples = 0;
  };
  // The fitted value for `key`, else `prior`.
  double get(const std::string& key, double prior) const;
  bool fitted(const std::string& key) const { return values_.count(key) > 0; }
  void set(const std::string& key, double value, int samples);
  const std::map<std::string, Fitted>& values() const { return values_; }

 private:
  std::map<std::string, Fitted> values_;
};

struct Prediction {
  Work work;
  double ms = 0;           // predicted time of one launch (every kernel of the config)
  double compute_ms = 0;   // tensor or CUDA cores, waves included
  double memory_ms = 0;    // DRAM and L2 traffic
  double overhead_ms = 0;  // launches, pipeline fill, write-out, copies, reductions
  std::string bound;       // "compute", "memory" or "latency" (overheads dominate)
  KernelResources resources;
  Occupancy occupancy;
  Waves waves;
  // Persistent schedules: the blocks launched, each walking several of the
  // waves.units work items (0: one block per item).
  int64_t persistent_blocks = 0;
  std::string efficiency_key;
  // The kernel's coarse shape (engine and block tile): configs of one group differ
  // only in finer knobs (stages, split-K, raster, grid). The model strategy
  // measures several groups first, then the winner's group more closely.
  std::string group;
  // Where a family's schedules differ in ways the model cannot rank (elementwise: the
  // grid schedules, measured within 1-5% of each other on the H200 while predicted
  // within 1.5%), their names; the model strategy then measures the top groups of
  // each schedule, not of all together. Empty: one ranking for all (matmul).
  std::string schedule;
  double efficiency = 0;  // the value used (fitted or prior)
  bool efficiency_fitted = false;
  // Between predictions of the same ms, the smaller comes first (predicted_faster).
  // A family sets it where its ties are known to hide a difference; 0 keeps the
  // space's order.
  double tie_break = 0;
  // Extra lines for `kjit explain`, e.g. "split-K: 4 splits, 33.6 MB of fp32 partials".
  std::vector<std::string> notes;
};

// The order the model ranks configs in: by ms, then by tie_break.
inline bool predicted_faster(const Prediction& a, const Prediction& b) {
  return a.ms < b.ms || (a.ms == b.ms && a.tie_break < b.tie_break);
}

}  // namespace kjit::tuner
