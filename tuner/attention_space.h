// The attention family's configs (compiler/lowering/attention.h): the space the
// tuner may search, and the config it picks before anything is measured.
//
//   for (const attention::Config& c : attention_space(problem, device)) ...
//   attention::Config c = attention_default(problem, device);
#pragma once

#include <string>
#include <vector>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/runtime/cuda/device.h"

namespace kjit::tuner {

// bm in {64, 128} x bn in {32, 64, 128} x stages in {2, 3}, without the configs
// that cannot run well: over the device's shared memory (opt-in limit), or whose
// per-thread state (the O accumulators, head_dim / 2 floats, plus the scores, bn / 2)
// leaves too few of the 255 registers (those spill). `pruned`, when given, gets
// one line per config left out and why.
std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<std::string>* pruned = nullptr);

// Before measuring: 64 keys per tile (32 at head dim 256, for registers), two
// stages, and 128 query rows per block when that still gives every SM a block
// (else 64: short sequences would leave SMs idle).
attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device);

}  // namespace kjit::tuner
