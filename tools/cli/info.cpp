// kjit info — the GPU as kjit sees it, and the NVRTC it compiles with.
#include <fmt/format.h>

#include <iostream>

#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

struct InfoOptions {
  bool json = false;
  int device = 0;
};

nlohmann::json device_json(const cuda::DeviceProperties& p) {
  return {{"ordinal", p.ordinal},
          {"name", p.name},
          {"compute_capability", fmt::format("{}.{}", p.cc_major, p.cc_minor)},
          {"arch", p.arch()},
          {"sm_count", p.sm_count},
          {"shared_per_block", p.shared_per_block},
          {"shared_per_block_optin", p.shared_per_block_optin},
          {"shared_per_sm", p.shared_per_sm},
          {"registers_per_sm", p.registers_per_sm},
          {"l2_bytes", p.l2_bytes},
          {"max_threads_per_sm", p.max_threads_per_sm},
          {"total_memory", p.total_memory},
          {"sm_clock_mhz", p.sm_clock_khz / 1000},
          {"memory_clock_mhz", p.memory_clock_khz / 1000},
          {"memory_bus_bits", p.memory_bus_bits},
          {"theoretical_bandwidth_gbs", p.theoretical_bandwidth_gbs()}};
}

void run_info(const InfoOptions& o) {
  nlohmann::json out;
  out["nvrtc_version"] = cuda::nvrtc_version();
  std::string reason;
  bool have_driver = cuda::Driver::available(&reason);
  int count = 0;
  if (have_driver) {
    out["driver_version"] = cuda::Driver::get().version_string();
    count = cuda::device_count();
    if (count == 0) reason = "the driver reports no CUDA device";
  }
  if (count == 0) {
    out["gpu"] = nullptr;
    out["reason"] = reason;
    if (o.json) {
      print_json(out);
    } else {
      std::cout << "No usable GPU: " << reason << "\n";
      std::cout << fmt::format("NVRTC {} (kernels can still be compiled with --arch sm_90)\n",
                               out["nvrtc_version"].get<std::string>());
    }
    return;  // not an error: kjit works without a GPU
  }
  cuda::DeviceProperties p = cuda::device_properties(o.device);
  out["gpu"] = device_json(p);
  out["device_count"] = count;
  if (o.json) return print_json(out);
  std::cout << fmt::format(
      "GPU {}: {}\n"
      "  compute capability   {}.{} ({})\n"
      "  SMs                  {}\n"
      "  shared memory/block  {} KiB (opt-in max {} KiB), {} KiB per SM\n"
      "  registers/SM         {}\n"
      "  L2 cache             {} MiB\n"
      "  memory               {:.1f} GiB, {}-bit bus, {} MHz: {:.0f} GB/s theoretical\n"
      "  SM clock             {} MHz\n"
      "Driver {} · NVRTC {}\n",
      p.ordinal, p.name, p.cc_major, p.cc_minor, p.arch(), p.sm_count, p.shared_per_block / 1024,
      p.shared_per_block_optin / 1024, p.shared_per_sm / 1024, p.registers_per_sm,
      p.l2_bytes / (1024 * 1024), p.total_memory / double(1 << 30), p.memory_bus_bits,
      p.memory_clock_khz / 1000, p.theoretical_bandwidth_gbs(), p.sm_clock_khz / 1000,
      out["driver_version"].get<std::string>(), out["nvrtc_version"].get<std::string>());
}

}  // namespace

namespace {
void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Show the GPU, driver and NVRTC versions");
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->add_option("--device", options->device, "Device ordinal")->check(CLI::Range(0, 2147483647));
  cmd->callback([options] { run_info(*options); });
}

}  // namespace

KJIT_REGISTER_COMMAND(10, add_info_command);

}  // namespace kjit::cli
