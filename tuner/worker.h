// Measuring in a child process, so that a candidate that faults (an illegal
// address poisons the CUDA context for good) or hangs costs that candidate, not the
// tune, and never the parent's CUDA context.
//
// The parent starts the worker (argv, e.g. `kjit __tune-worker --device 0`) and
// sends it one job per line on stdin:
//   {"spec": {...problem...}, "configs": [...], "timer": {...}, "leader_ms": 0.18}
// The worker answers with one JSON event per line on stdout (the MeasureEvents:
// "checking", "checked", "failed", "timed", then "done"; "error" for a job it
// cannot start). When the worker dies or stays silent past a timeout while
// checking a config, that config is recorded as failed with the reason (the signal,
// the exit status, or the timeout) and a fresh worker measures the rest.
#pragma once

#include <sys/types.h>

#include <functional>
#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/measure.h"

namespace kjit::tuner {

struct WorkerOptions {
  std::vector<std::string> argv;  // the worker's command line
  // Seconds a config may take from "checking" to its verdict (load, one launch, the
  // check) before it counts as hung.
  double check_timeout_s = 60;
  // Seconds the timing rounds of one job may take.
  double timing_timeout_s = 900;
};

class MeasureWorker {
 public:
  explicit MeasureWorker(WorkerOptions options);
  ~MeasureWorker();
  MeasureWorker(const MeasureWorker&) = delete;
  MeasureWorker& operator=(const MeasureWorker&) = delete;

  // Measures `configs` of the problem described by `spec` (see measure()).
  std::vector<Measured> measure(const nlohmann::json& spec, const std::vector<std::string>& configs,
                                const TimerOptions& timer, double leader_ms = 0,
                                const MeasureListener& listener = nullptr);
  // Worker processes started so far (1 + restarts after faults and hangs).
  int starts() const { return starts_; }

 private:
  void start();
  // Ends the worker: closes its stdin and waits (kill: SIGKILL first). Returns
  // the reason it ended, e.g. "killed by signal 11 (Segmentation fault)".
  std::string stop(bool kill);
  // The next line from the worker, or nullopt after `timeout_s` or at its end.
  bool read_line(std::string& line, double timeout_s, bool* timed_out);

  WorkerOptions options_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;
  int starts_ = 0;
};

// The worker's side: serves jobs from `in` until its end, writing events to `out`.
// `make_harness` builds the family's harness for a job's spec (on the CUDA context
// the caller made current). Returns the process's exit status: 0 after the last
// job, 3 after a CUDA fault (the context is lost; the parent starts another).
using HarnessFactory = std::function<std::unique_ptr<Harness>(const nlohmann::json& spec)>;
int serve_measurements(const HarnessFactory& make_harness, const cuda::DeviceProperties& device,
                       std::istream& in, std::ostream& out);

// TimerOptions as JSON and back (the job's "timer").
nlohmann::json to_json(const TimerOptions& options);
TimerOptions timer_options_from_json(const nlohmann::json& json);

}  // namespace kjit::tuner
