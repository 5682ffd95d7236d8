// Offline tuning of many problems on one or several GPUs of this machine: one
// measuring worker process per GPU (tuner/worker.h), the problems handed out from
// one queue, every result and trial written to the one store as it is measured.
// Compiles happen in this process (no GPU needed), on every core, while the
// workers measure.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/cache/store.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/tune.h"
#include "kjit/tuner/worker.h"

namespace kjit::tuner {

struct OfflineOptions {
  TuneOptions tune;
  std::vector<int> gpus = {0};  // device ordinals, one worker each
  // The worker's command line for a device ordinal, e.g. {kjit, "__tune-worker",
  // "--device", "1"}.
  std::function<std::vector<std::string>(int device)> worker_argv;
  double check_timeout_s = 60;  // see WorkerOptions
};

struct OfflineProgress {
  int problem = 0, problems = 0;  // the problem this update is about (0-based), of how many
  int gpu = 0;
  std::string signature;
  TuneProgress tune;
};

struct OfflineResult {
  std::vector<TuneResult> results;  // in the order of `problems`
  std::vector<int> gpu_of;          // the device ordinal each problem was measured on
  std::vector<std::string> errors;  // per problem: why it could not be tuned ("" if tuned)
  double seconds = 0;
  int worker_starts = 0;  // processes started (1 per GPU, plus one per fault or hang)
};

// Tunes every problem; a problem that cannot be tuned (no config runs, the worker
// cannot start) is reported in `errors` and the rest go on.
OfflineResult tune_offline(const std::vector<const TuningProblem*>& problems,
                           std::shared_ptr<cache::Store> store, const OfflineOptions& options,
                           const std::function<void(const OfflineProgress&)>& progress = nullptr);

}  // namespace kjit::tuner
