// A loaded module (cubin) and its kernels. Only cubins that NVRTC produced are
// ever loaded; the module is unloaded when the last Function from it is gone.
#pragma once

#include <cuda.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace kjit::cuda {

// Per-kernel resources as the driver reports them after loading.
struct FunctionAttributes {
  int registers = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;  // per thread: stack and spills
  int max_threads_per_block = 0;
  int max_dynamic_shared_bytes = 0;
};

struct LaunchConfig {
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned dynamic_shared_bytes = 0;
  CUstream stream = nullptr;
  // Launch cooperatively: every block resident at once, or the launch fails
  // (a kernel whose blocks wait for each other needs it).
  bool cooperative = false;
  // Thread-block cluster dimensions (sm_90): {1, 1, 1} is no cluster. Each grid
  // dimension must be a multiple of the cluster's; a cluster's blocks run at the
  // same time on one GPC and may read each other's shared memory.
  std::array<unsigned, 3> cluster{1, 1, 1};
};

class Module;

class Function {
 public:
  Function() = default;
  CUfunction get() const { return function_; }
  const std::string& name() const { return name_; }
  FunctionAttributes attributes() const;
  // Raises the dynamic shared memory limit past the 48 KB default.
  void set_max_dynamic_shared(int bytes) const;
  // Resident blocks per SM for this block size and shared memory.
  int max_active_blocks_per_sm(int block_threads, size_t dynamic_shared_bytes) const;
  // Clusters of `config.cluster` that run at once on the whole GPU with this block
  // size and shared memory (a GPC holds whole clusters only: this depends on how
  // many SMs each GPC has). 0 when a cluster does not fit at all.
  int max_active_clusters(const LaunchConfig& config) const;
  // Asynchronous; `args` points at each kernel argument, in order.
  void launch(const LaunchConfig& config, void** args) const;

 private:
  friend class Module;
  std::shared_ptr<const Module> module_;  // keeps the module loaded
  CUfunction function_ = nullptr;
  std::string name_;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  // Loads a cubin into the current context (cuModuleLoadData).
  static std::shared_ptr<Module> load(const std::vector<char>& cubin);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Function function(const std::string& name) const;

 private:
  Module() = default;
  CUmodule module_ = nullptr;
};

}  // namespace kjit::cuda
