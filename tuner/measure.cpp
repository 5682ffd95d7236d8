#include "kjit/tuner/measure.h"

#include <fmt/format.h>

#include <cstdlib>

#include "kjit/runtime/cuda/stream.h"
#include "kjit/support/error.h"

namespace kjit::tuner {

std::string hung_error(double timeout_s) {
  // The limit exactly (shortest round trip: 60, 60.4), as hung_within reads it back.
  return fmt::format("hung: the check did not finish in {} s (measuring process stopped)",
                     timeout_s);
}

double hung_within(const std::string& error) {
  static const std::string kPrefix = "hung: the check did not finish in ";
  if (error.compare(0, kPrefix.size(), kPrefix) != 0) return 0;
  char* end = nullptr;
  const double seconds = std::strtod(error.c_str() + kPrefix.size(), &end);
  return end != error.c_str() + kPrefix.size() && seconds > 0 ? seconds : 0;
}

bool refutes_kernel(const std::string& error) {
  // measure()'s own words for a failed check, and CudaError's "<call> failed:
  // CUDA_ERROR_<name> (<code>): ..." for a launch that faulted (memory the GPU was
  // short of is the machine's state, not the kernel's).
  if (error.rfind("wrong result: ", 0) == 0) return true;
  return error.find("CUDA_ERROR_") != std::string::npos &&
         error.find("CUDA_ERROR_OUT_OF_MEMORY") == std::string::npos;
}

std::vector<Measured> measure(Harness& harness, const std::vector<std::string>& configs,
                              const cuda::DeviceProperties& device, const TimerOptions& options,
                              double leader_ms, const MeasureListener& listener) {
  auto tell = [&](const char* phase, const std::string& config, const Measured* m) {
    if (listener) listener(MeasureEvent{phase, config, m});
  };
  cuda::Stream stream;
  std::vector<Measured> out(configs.size());
  std::vector<std::unique_ptr<Trial>> trials(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    Measured& m = out[i];
    m.config = configs[i];
    tell("checking", m.config, nullptr);
    try {
      trials[i] = harness.prepare(m.config);
      m.resources = trials[i]->resources();
      harness.poison(stream.get());
      trials[i]->launch(stream.get(), 0);
      stream.synchronize();
      const CheckOutcome check = harness.check();
      m.check_error = check.relative_l2;
      if (!check.passed()) m.error = "wrong result: " + check.describe();
    } catch (const CudaError& e) {
      // A fault poisons the context: nothing after it can run in this process.
      m.error = e.what();
      tell("failed", m.config, &m);
      throw;
    } catch (const Error& e) {
      m.error = e.what();
    }
    if (!m.error.empty()) trials[i].reset();
    tell(m.error.empty() ? "checked" : "failed", m.config, &m);
  }
  std::vector<Timer::Work> works;
  std::vector<size_t> index;
  const int sets = std::max(harness.input_sets(), 1);
  for (size_t i = 0; i < configs.size(); ++i) {
    if (!trials[i]) continue;
    Trial* trial = trials[i].get();
    works.push_back([trial, &stream, sets](int run) { trial->launch(stream.get(), run % sets); });
    index.push_back(i);
  }
  Timer timer(stream.get(), device.l2_bytes, options, device.sm_clock_khz);
  const std::vector<Timer::Result> timed = timer.interleaved(works, leader_ms);
  for (size_t j = 0; j < index.size(); ++j) {
    Measured& m = out[index[j]];
    m.summary = timed[j].summary;
    m.stopped_early = timed[j].stopped_early;
    tell("timed", m.config, &m);
  }
  return out;
}

}  // namespace kjit::tuner
