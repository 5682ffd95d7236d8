// Measuring configs on the GPU in this process: each is prepared (compiled and
// loaded), launched once on poisoned output and checked against the fp64
// reference — a config that fails any of that is recorded with its error and never
// timed — then the survivors are timed together in interleaved rounds.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/harness.h"
#include "kjit/tuner/timer.h"

namespace kjit::tuner {

struct Measured {
  std::string config;
  Summary summary;             // empty (runs = 0) when it failed
  std::string error;           // why it failed: the compile, the check, a fault...
  bool stopped_early = false;  // timed for two rounds only: hopeless
  KernelResources resources;
  double check_error = 0;  // relative L2 against the reference
  bool ok() const { return error.empty() && summary.runs > 0; }
};

// Progress events, in order per config: "checking" (before its first launch),
// then "checked" or "failed"; then "timed" per config once the rounds are done.
struct MeasureEvent {
  std::string phase;  // "checking", "checked", "failed", "timed"
  std::string config;
  const Measured* result = nullptr;  // for "checked", "failed", "timed"
};
using MeasureListener = std::function<void(const MeasureEvent&)>;

// The error of a config whose check gave no verdict within `timeout_s` (the measuring
// process was stopped), and, read back from a stored trial, that limit: 0 for any
// other error. A resumed tune with a longer limit measures such a config again.
std::string hung_error(double timeout_s);
double hung_within(const std::string& error);

// The error of a config the measuring process never reached (it ended on an earlier
// config's fault): no verdict on the config itself, so a tune does not store it.
inline constexpr const char* kNotMeasured = "not measured";

// Whether a trial's error is a verdict against the kernel itself: its check found a
// wrong result, or its launch faulted (a CUDA error). Not a compile or resource
// limit, a hang, or a config never reached.
bool refutes_kernel(const std::string& error);

std::vector<Measured> measure(Harness& harness, const std::vector<std::string>& configs,
                              const cuda::DeviceProperties& device, const TimerOptions& options,
                              double leader_ms = 0, const MeasureListener& listener = nullptr);

}  // namespace kjit::tuner
