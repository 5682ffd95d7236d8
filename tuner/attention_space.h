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

// bm in {64, 128} x bn in {32, 64, 128} x stages in {2, 3} x warp_rows in {16, 32},
// without the configs that cannot run well: over the device's shared memory
// (opt-in limit), or whose per-thread state (per 16 rows of a warp: the O
// accumulators, head_dim / 2 floats, plus the scores, bn / 2) leaves too few of the
// 255 registers (those spill); then the TMA + wgmma engine (sm_90, head dims 64
// and 128): bm 128 x bn in {64, 128} x stages in {2, 3} x pingpong off and on. `pruned`, when given, gets
// one line per config left out and why.
std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<std::string>* pruned = nullptr);

// Before measuring: on sm_90 at head dims 64 and 128 the wgmma engine (128 keys
// per tile, three buffers, ping-pong; less where shared memory is short); else the mma.sync engine with 32 rows per warp with 64 (else 32) keys
// per tile where that fits the registers, else 16 rows per warp and the widest tile that fits (128,
// 64, 32 keys); two stages; 128 query rows per block when that still gives every
// SM a block (else 64: short sequences would leave SMs idle).
attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device);

}  // namespace kjit::tuner
