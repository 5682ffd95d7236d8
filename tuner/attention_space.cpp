#include "kjit/tuner/attention_space.h"

#include <fmt/format.h>

namespace kjit::tuner {

namespace {

// Registers a thread needs beyond its accumulators (addresses, the row state,
// fragments in flight): what ptxas reports for the kernels minus D/2 + BN/2, with
// a margin.
constexpr int kOverheadRegisters = 72;

bool fits_registers(const attention::Problem& p, const attention::Config& c) {
  return p.head_dim / 2 + c.bn / 2 + kOverheadRegisters <= 255;
}

}  // namespace

std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<std::string>* pruned) {
  std::vector<attention::Config> space;
  for (int bm : {64, 128}) {
    for (int bn : {32, 64, 128}) {
      for (int stages : {2, 3}) {
        const attention::Config c{bm, bn, stages};
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
                "{}: head dim {} and {} keys per tile need ~{} registers per thread (> 255)",
                c.to_string(), problem.head_dim, bn,
                problem.head_dim / 2 + bn / 2 + kOverheadRegisters));
          continue;
        }
        space.push_back(c);
      }
    }
  }
  return space;
}

attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device) {
  attention::Config c;
  c.bn = problem.head_dim > 128 ? 32 : 64;
  c.stages = 2;
  const int64_t blocks_of_128 = (problem.seq_q + 127) / 128 * problem.heads * problem.batch;
  c.bm = blocks_of_128 >= device.sm_count ? 128 : 64;
  if (attention::shared_bytes(problem, c) > device.shared_per_block_optin) c.bm = 64;
  return c;
}

}  // namespace kjit::tuner
