// The runtime's side of tuning: how each family's configs are measured on this
// device (the harnesses the tuner drives), where a kernel's config comes from at
// run time, and the measuring worker process `kjit tune` starts.
//
//   tuner::Choice c = choose_config(runtime, tuner::MatmulTuning(problem));
//
// Harnesses own random inputs (fresh, never zeros) and scratch outputs; a
// candidate never writes into a caller's buffers.
#pragma once

#include <memory>
#include <string>

#include "kjit/runtime/runtime.h"
#include "kjit/tuner/harness.h"
#include "kjit/tuner/tune.h"
#include "kjit/tuner/worker.h"

namespace kjit {

// The config for `problem` on `runtime`'s GPU (tuner/choose.h). With
// tune_on_first_use (KJIT_TUNE=1), a problem the store has no tuning for is tuned
// first (the model's top 8, measured in this process, or in the worker named by
// KJIT_TUNE_WORKER, e.g. the path of the kjit binary; an elementwise problem planned
// from tensors has no spec to send it and is measured in this process).
tuner::Choice choose_config(Runtime& runtime, const tuner::TuningProblem& problem);

// The harness that measures configs of `problem` on `runtime`'s device: matmul or
// elementwise (UserError for another family).
std::unique_ptr<tuner::Harness> make_harness(Runtime& runtime, const tuner::TuningProblem& problem);

// Measures in this process, on `runtime`'s context.
tuner::Measurer in_process_measurer(Runtime& runtime);

// Measures in child processes started as `worker_argv` (see tuner/worker.h).
tuner::Measurer worker_measurer(std::shared_ptr<tuner::MeasureWorker> worker);

// The body of `kjit __tune-worker --device N`: a Runtime on device N serving
// measurement jobs on stdin/stdout. Returns the exit status.
int serve_tuning_worker(int device);

}  // namespace kjit
