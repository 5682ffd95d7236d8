// Refitting the model to what was measured: each measured trial of a GPU model
// says what efficiency its config's key really reached on that problem; the
// median over a key's trials replaces the key's prior (shrunk toward it while
// there are few).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/cache/records.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/model.h"

namespace kjit::tuner {

// The most work one refit does, in plain problems' predictions
// (TuningProblem::prediction_cost summed over the trials it reads): legitimate
// stores stay far below; trials past it are left out.
inline constexpr int64_t kMaxFitCost = int64_t{1} << 22;

// Efficiencies fitted to `trials` (those with a measurement; signatures this
// version cannot read are skipped), leaving out trials of `exclude_problem` (for an
// honest rank correlation on a problem the fit has not seen).
Efficiencies fit_efficiencies(const std::vector<cache::TrialRecord>& trials,
                              const cuda::DeviceProperties& device,
                              const std::string& exclude_problem = "");

}  // namespace kjit::tuner
