// What kjit needs to know about a GPU: read once from the driver, used by the
// lowering (SM count for whole-wave grids), the tuner (limits, bandwidth) and
// `kjit info`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kjit::cuda {

struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int warp_size = 32;
  int64_t shared_per_block = 0;        // default limit, bytes
  int64_t shared_per_block_optin = 0;  // the most a kernel can opt in to, bytes
  int64_t shared_per_sm = 0;
  int64_t registers_per_sm = 0;
  int64_t registers_per_block = 0;
  int64_t l2_bytes = 0;
  int64_t total_memory = 0;
  int sm_clock_khz = 0;      // peak SM clock
  int memory_clock_khz = 0;  // peak memory clock
  int memory_bus_bits = 0;

  // "sm_90" for compute capability 9.0.
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
  // Datasheet-style DRAM bandwidth: 2 transfers per clock × bus width.
  double theoretical_bandwidth_gbs() const {
    return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9;
  }
  // Identifies a GPU model for tuning results: name, compute capability, SM count.
  std::string model_key() const;
};

int device_count();
DeviceProperties device_properties(int ordinal);

// The properties of an H200 (sm_90, 132 SMs, 227 KiB of opt-in shared memory per
// block, 4.9 TB/s), named `name`: what kernels are planned for where there is no GPU.
DeviceProperties h200_class_device(const std::string& name);

// A GPU to plan for without one: "h200", "h100" or "a100" (datasheet limits, clocks
// and bandwidth); UserError naming the known ones otherwise.
DeviceProperties planning_device(const std::string& name);
// The planning device of an architecture: sm_90 -> h200, sm_80 -> a100; sm_86,
// sm_87 and sm_89 -> the a100 under a generic name, with the architecture's shared
// memory. UserError for any other architecture.
DeviceProperties planning_device_for_arch(const std::string& arch);
// The number of an architecture name "sm_NN" with an optional 'a' or 'f' after it
// (90 for "sm_90a"); nullopt for anything else ("sm_9x", "sm_99999999999").
std::optional<int> arch_number(const std::string& arch);

}  // namespace kjit::cuda
