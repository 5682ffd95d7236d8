#include "kjit/tuner/attention_space.h"

#include <fmt/format.h>

#include <utility>

namespace kjit::tuner {

namespace {

// Registers a thread needs beyond its accumulators (addresses, the row state,
// fragments in flight), with a margin: ptxas's counts for the compiled space
// minus the accumulators (tests/unit/attention/compile_test.cpp checks that
// nothing kept spills).
constexpr int kOverheadRegisters = 110;

// O (head_dim / 2 floats per 16 rows) and the scores (bn / 2 per 16 rows).
int accumulator_registers(const attention::Problem& p, const attention::Config& c) {
  return c.warp_rows / 16 * (p.head_dim / 2 + c.bn / 2);
}

bool fits_registers(const attention::Problem& p, const attention::Config& c) {
  return accumulator_registers(p, c) + kOverheadRegisters <= 255;
}

// wgmma: the producer warpgroup gives registers to the two consumers (setmaxnreg:
// 40 and 232 per thread); a consumer holds O (head_dim / 2), S (bn / 2) and P as
// 16-bit pairs (bn / 4), plus ~40 more.
constexpr int kWgmmaRegisterLimit = 232;
constexpr int kWgmmaOverheadRegisters = 40;
int wgmma_registers(const attention::Problem& p, const attention::Config& c) {
  return p.head_dim / 2 + c.bn / 2 + c.bn / 4 + kWgmmaOverheadRegisters;
}

}  // namespace

std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<std::string>* pruned) {
  std::vector<attention::Config> space;
  for (int bm : {64, 128}) {
    for (int bn : {32, 64, 128}) {
      for (int stages : {2, 3}) {
        for (int warp_rows : {16, 32}) {
          const attention::Config c{bm, bn, stages, warp_rows};
          const int shared = attention::shared_bytes(problem, c);
          if (shared > device.shared_per_block_optin) {
            if (pruned)
              pruned->push_back(fmt::format("{}: {} B of shared memory > the device's {} B",
                                            c.to_string(), shared, device.shared_per_block_optin));
            continue;
          }
          if (!fits_registers(problem, c)) {
            if (pruned)
              pruned->push_back(fmt::format(
                  "{}: head dim {}, {} keys per tile and {} rows per warp need ~{} registers "
                  "per thread (> 255)",
                  c.to_string(), problem.head_dim, bn, warp_rows,
                  accumulator_registers(problem, c) + kOverheadRegisters));
            continue;
          }
          space.push_back(c);
        }
      }
    }
  }
  // The TMA + wgmma engine (sm_90): 128 rows per block, 64 or 128 keys per tile.
  for (int bn : {64, 128}) {
    for (int stages : {2, 3}) {
      for (bool pingpong : {false, true}) {
        attention::Config c;
        c.wgmma = true;
        c.bm = 128;
        c.bn = bn;
        c.stages = stages;
        c.pingpong = pingpong;
        std::string why;
        if (device.cc_major * 10 + device.cc_minor != 90) {
          why = "wgmma and TMA need an sm_90 GPU; " + device.arch() + " has neither";
        } else if (problem.head_dim != 64 && problem.head_dim != 128) {
          why =
              fmt::format("the wgmma engine takes head dims 64 and 128, not {}", problem.head_dim);
        } else if (attention::shared_bytes(problem, c) > device.shared_per_block_optin) {
          why = fmt::format("{} B of shared memory > the device's {} B",
                            attention::shared_bytes(problem, c), device.shared_per_block_optin);
        } else if (wgmma_registers(problem, c) > kWgmmaRegisterLimit) {
          why = fmt::format(
              "head dim {} and {} keys per tile need ~{} registers per thread (> {} "
              "for 384 threads)",
              problem.head_dim, bn, wgmma_registers(problem, c), kWgmmaRegisterLimit);
        }
        if (why.empty()) {
          space.push_back(c);
        } else if (pruned) {
          pruned->push_back(c.to_string() + ": " + why);
        }
      }
    }
  }
  return space;
}

attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device) {
  // Measured on the H200 (docs/perf/2026-11-30-h200-attention.md): 32 rows per
  // warp wins where its accumulators fit without spilling (each K/V fragment read
  // from shared memory then feeds two mma), else 16 rows and the widest key tile.
  attention::Config c;
  c.stages = 2;
  // On sm_90 the TMA + wgmma engine: 2-2.7x the mma.sync engine's best at head dims
  // 64 and 128, fastest with 128 keys per tile, three buffers and the consumers
  // taking turns (measured on the H200: docs/perf/2026-11-30-h200-attention.md);
  // fewer keys and buffers where shared memory is short.
  if (device.cc_major * 10 + device.cc_minor == 90 &&
      (problem.head_dim == 64 || problem.head_dim == 128)) {
    for (const auto& [bn, stages] : {std::pair{128, 3}, std::pair{64, 3}, std::pair{64, 2}}) {
      attention::Config w;
      w.wgmma = true;
      w.pingpong = true;
      w.bm = 128;
      w.bn = bn;
      w.stages = stages;
      if (attention::shared_bytes(problem, w) <= device.shared_per_block_optin &&
          wgmma_registers(problem, w) <= kWgmmaRegisterLimit)
        return w;
    }
  }
  const int64_t blocks_of_128 = (problem.seq_q + 127) / 128 * problem.heads * problem.batch;
  c.bm = blocks_of_128 >= device.sm_count ? 128 : 64;
  // (warp_rows, bn) in order of preference; the first that fits is taken.
  const std::pair<int, int> preference[] = {{32, 64}, {32, 32}, {16, 128}, {16, 64}, {16, 32}};
  for (const auto& [warp_rows, bn] : preference) {
    attention::Config candidate = c;
    candidate.warp_rows = warp_rows;
    candidate.bn = bn;
    if (fits_registers(problem, candidate) &&
        attention::shared_bytes(problem, candidate) <= device.shared_per_block_optin)
      return candidate;
  }
  c.bm = 64;
  c.bn = 32;
  c.warp_rows = 16;
  return c;
}

}  // namespace kjit::tuner
