#include "kjit/runtime/cuda/module.h"

#include <fmt/format.h>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

std::shared_ptr<Module> Module::load(const std::vector<char>& cubin) {
  if (cubin.empty()) throw UserError("cannot load an empty cubin");
  std::shared_ptr<Module> module(new Module());
  KJIT_CU(cuModuleLoadData, &module->module_, cubin.data());
  return module;
}

Module::~Module() {
  if (module_) Driver::get().api().cuModuleUnload(module_);
}

Function Module::function(const std::string& name) const {
  Function f;
  const Driver& driver = Driver::get();
  CUresult result = driver.api().cuModuleGetFunction(&f.function_, module_, name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND)
    throw UserError("the module has no kernel named '" + name + "'",
                    "kernels must be declared extern \"C\" __global__ to keep their names");
  driver.check(result, "cuModuleGetFunction");
  f.module_ = shared_from_this();
  f.name_ = name;
  return f;
}

FunctionAttributes Function::attributes() const {
  auto get = [&](CUfunction_attribute a) {
    int value = 0;
    KJIT_CU(cuFuncGetAttribute, &value, a, function_);
    return value;
  };
  FunctionAttributes out;
  out.registers = get(CU_FUNC_ATTRIBUTE_NUM_REGS);
  out.static_shared_bytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  out.local_bytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  out.max_threads_per_block = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  out.max_dynamic_shared_bytes = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  return out;
}

void Function::set_max_dynamic_shared(int bytes) const {
  KJIT_CU(cuFuncSetAttribute, function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

int Function::max_active_blocks_per_sm(int block_threads, size_t dynamic_shared_bytes) const {
  int blocks = 0;
  KJIT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &blocks, function_, block_threads,
          dynamic_shared_bytes);
  return blocks;
}

namespace {

// The driver's form of a launch with a cluster dimension; `attribute` must outlive
// the returned config.
CUlaunchConfig cluster_launch(const LaunchConfig& c, CUlaunchAttribute& attribute) {
  attribute = {};
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = c.cluster[0];
  attribute.value.clusterDim.y = c.cluster[1];
  attribute.value.clusterDim.z = c.cluster[2];
  CUlaunchConfig config{};
  config.gridDimX = c.grid[0];
  config.gridDimY = c.grid[1];
  config.gridDimZ = c.grid[2];
  config.blockDimX = c.block[0];
  config.blockDimY = c.block[1];
  config.blockDimZ = c.block[2];
  config.sharedMemBytes = c.dynamic_shared_bytes;
  config.hStream = c.stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

}  // namespace

int Function::max_active_clusters(const LaunchConfig& c) const {
  CUlaunchAttribute attribute;
  const CUlaunchConfig config = cluster_launch(c, attribute);
  int clusters = 0;
  KJIT_CU(cuOccupancyMaxActiveClusters, &clusters, function_, &config);
  return clusters;
}

void Function::launch(const LaunchConfig& c, void** args) const {
  for (int i = 0; i < 3; ++i)
    if (c.grid[i] == 0 || c.block[i] == 0)
      throw UserError("launch of '" + name_ + "' with an empty grid or block dimension");
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] > 1) {
    if (c.cooperative)
      throw UserError("launch of '" + name_ + "': a cooperative launch with thread-block clusters");
    for (int i = 0; i < 3; ++i)
      if (c.grid[i] % c.cluster[i] != 0)
        throw UserError(
            fmt::format("launch of '{}': grid dimension {} ({}) is not a multiple of "
                        "the cluster's ({})",
                        name_, i, c.grid[i], c.cluster[i]));
    CUlaunchAttribute attribute;
    const CUlaunchConfig config = cluster_launch(c, attribute);
    KJIT_CU(cuLaunchKernelEx, &config, function_, args, nullptr);
  } else if (c.cooperative)
    KJIT_CU(cuLaunchCooperativeKernel, function_, c.grid[0], c.grid[1], c.grid[2], c.block[0],
            c.block[1], c.block[2], c.dynamic_shared_bytes, c.stream, args);
  else
    KJIT_CU(cuLaunchKernel, function_, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1],
            c.block[2], c.dynamic_shared_bytes, c.stream, args, nullptr);
}

}  // namespace kjit::cuda
