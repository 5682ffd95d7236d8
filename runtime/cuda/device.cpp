#include "runtime/cuda/device.h"

#include "runtime/cuda/driver.h"
#include "support/error.h"

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
  d.shared_per_block_optin = 232448;
  d.registers_per_block = 65536;
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
