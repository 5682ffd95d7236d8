#include "kjit/runtime/cuda/device.h"

#include <cctype>

#include <fmt/format.h>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

std::string DeviceProperties::model_key() const {
  return name + "|sm_" + std::to_string(cc_major * 10 + cc_minor) + "|" + std::to_string(sm_count) +
         "sm";
}

int device_count() {
  int count = 0;
  KJIT_CU(cuDeviceGetCount, &count);
  return count;
}

DeviceProperties h200_class_device(const std::string& name) {
  DeviceProperties d;
  d.name = name;
  d.cc_major = 9;
  d.sm_count = 132;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.max_blocks_per_sm = 32;
  d.shared_per_block = 49152;
  d.shared_per_block_optin = 232448;
  d.shared_per_sm = 233472;
  d.registers_per_sm = 65536;
  d.registers_per_block = 65536;
  d.l2_bytes = 62914560;
  d.total_memory = int64_t{150754820096};
  d.sm_clock_khz = 1980000;
  d.memory_clock_khz = 3201000;
  d.memory_bus_bits = 6144;
  return d;
}

DeviceProperties planning_device(const std::string& name) {
  if (name == "h200") return h200_class_device("NVIDIA H200");
  if (name == "h100") {
    DeviceProperties d = h200_class_device("NVIDIA H100 80GB HBM3");
    d.l2_bytes = 52428800;
    d.total_memory = int64_t{85520809984};
    d.memory_clock_khz = 2619000;
    d.memory_bus_bits = 5120;
    return d;
  }
  if (name == "a100") {
    DeviceProperties d = h200_class_device("NVIDIA A100-SXM4-80GB");
    d.cc_major = 8;
    d.sm_count = 108;
    d.shared_per_block_optin = 166912;
    d.shared_per_sm = 167936;
    d.l2_bytes = 41943040;
    d.total_memory = int64_t{85899345920};
    d.sm_clock_khz = 1410000;
    d.memory_clock_khz = 1593000;
    d.memory_bus_bits = 5120;
    return d;
  }
  throw UserError("unknown GPU '" + name + "' to plan for", "use h200, h100 or a100");
}

std::optional<int> arch_number(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return std::nullopt;
  size_t end = arch.size();
  if (end > 3 && (arch.back() == 'a' || arch.back() == 'f')) --end;
  // Up to four digits: every architecture there is, and no int overflow.
  if (end - 3 < 2 || end - 3 > 4) return std::nullopt;
  int number = 0;
  for (size_t i = 3; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(arch[i]))) return std::nullopt;
    number = number * 10 + (arch[i] - '0');
  }
  return number;
}

DeviceProperties planning_device_for_arch(const std::string& arch) {
  const std::optional<int> number = arch_number(arch);
  constexpr const char* kKnown = "use sm_80, sm_86, sm_87, sm_89 or sm_90 (sm_90a)";
  // The architectures of the GPUs kjit plans for: Ampere (sm_80 A100, sm_86 GA10x,
  // sm_87 Orin), Ada (sm_89) and Hopper (sm_90). "sm_85" or "sm_95" name no GPU.
  if (!number ||
      (*number != 80 && *number != 86 && *number != 87 && *number != 89 && *number != 90))
    throw UserError("no GPU to plan for architecture " + arch, kKnown);
  if (*number == 90) return planning_device("h200");
  DeviceProperties d = planning_device("a100");
  if (*number == 80) return d;
  // No datasheet of one card stands for sm_86, sm_87 or sm_89: plan with the A100's
  // figures and the architecture's own limits (the CUDA programming guide's table of
  // compute capabilities), under a name that says so (it shows in kjit emit and
  // explain). All three keep 1536 threads (48 warps) resident per SM; sm_86 and sm_87
  // 16 blocks, sm_89 24. sm_86 and sm_89 give a block at most 99 KiB of shared memory
  // (100 KiB per SM); sm_87 the A100's 163 KiB.
  d.cc_minor = *number % 10;
  d.name = fmt::format("a generic sm_{} GPU (A100 figures)", *number);
  d.max_threads_per_sm = 1536;
  d.max_blocks_per_sm = *number == 89 ? 24 : 16;
  if (*number != 87) {
    d.shared_per_block_optin = 101376;
    d.shared_per_sm = 102400;
  }
  return d;
}

DeviceProperties device_properties(int ordinal) {
  int count = device_count();
  if (ordinal < 0 || ordinal >= count)
    throw UserError("device " + std::to_string(ordinal) + " does not exist; this machine has " +
                    std::to_string(count) + " CUDA device(s)");
  CUdevice device;
  KJIT_CU(cuDeviceGet, &device, ordinal);
  DeviceProperties p;
  p.ordinal = ordinal;
  char name[256] = {};
  KJIT_CU(cuDeviceGetName, name, static_cast<int>(sizeof name), device);
  p.name = name;
  auto attribute = [&](CUdevice_attribute a) {
    int value = 0;
    KJIT_CU(cuDeviceGetAttribute, &value, a, device);
    return value;
  };
  p.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.max_threads_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  p.max_blocks_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  p.warp_size = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p.shared_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p.shared_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p.shared_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  p.registers_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  p.registers_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.sm_clock_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p.memory_clock_khz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  p.memory_bus_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  size_t total = 0;
  KJIT_CU(cuDeviceTotalMem, &total, device);
  p.total_memory = static_cast<int64_t>(total);
  return p;
}

}  // namespace kjit::cuda
