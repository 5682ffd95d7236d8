// The embedding API: a Runtime owns a device's context and turns KernelSources
// into loaded kernels, once per process.
//
//   kjit::Runtime runtime;                        // device 0
//   auto kernel = runtime.compile(source);        // in-process map -> store -> NVRTC
//   kernel->function().launch(config, args);      // asynchronous, on your stream
//
// Thread-safe: compile() may be called from any thread; two threads asking for
// the same kernel share one compilation.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compiler/kernel_source.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/nvrtc.h"

namespace kjit {

struct RuntimeOptions {
  int device = 0;
  // Compile for this architecture instead of the device's (e.g. "sm_90a").
  std::string arch;
};

// Where a kernel came from, for logs and `--json` output.
enum class KernelOrigin { Compiled, MemoryCache, DiskCache };
const char* to_string(KernelOrigin origin);

class CompiledKernel {
 public:
  const KernelSource& source() const { return source_; }
  const cuda::Function& function() const { return function_; }
  const cuda::KernelStats& stats() const { return stats_; }
  const std::string& key() const { return key_; }
  const std::string& arch() const { return arch_; }
  // How this kernel was obtained the first time, and what that cost (ms).
  KernelOrigin origin() const { return origin_; }
  double compile_ms() const { return compile_ms_; }
  double load_ms() const { return load_ms_; }

  // Asynchronous launch with the source's block size and dynamic shared memory.
  void launch(std::array<unsigned, 3> grid, void** args, CUstream stream = nullptr) const;

 private:
  friend class Runtime;
  KernelSource source_;
  std::string key_, arch_;
  cuda::Function function_;
  cuda::KernelStats stats_;
  KernelOrigin origin_ = KernelOrigin::Compiled;
  double compile_ms_ = 0, load_ms_ = 0;
};

// A persistent binary store (cache/). The runtime asks it before compiling and
// gives it every new cubin. Implementations must not throw on lookup failures.
class BinaryStore {
 public:
  virtual ~BinaryStore() = default;
  virtual bool find(const std::string& key, std::vector<char>* cubin) = 0;
  virtual void put(const std::string& key, const KernelSource& source, const std::string& arch,
                   const cuda::CompiledProgram& program) = 0;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const cuda::DeviceProperties& device() const { return device_; }
  const std::string& arch() const { return arch_; }
  const cuda::Context& context() const { return *context_; }

  // The loaded kernel for `source`; compiles at most once per process.
  std::shared_ptr<const CompiledKernel> compile(const KernelSource& source);

  // Uses `store` for binaries from now on (nullptr: none). The default Runtime
  // opens the user's store (see cache/) unless KJIT_CACHE=off.
  void set_binary_store(std::shared_ptr<BinaryStore> store);

  // Kernels held in the in-process map.
  size_t cached_kernels() const;

 private:
  std::shared_ptr<const CompiledKernel> build(const KernelSource& source, const std::string& key);

  RuntimeOptions options_;
  std::unique_ptr<cuda::Context> context_;
  cuda::DeviceProperties device_;
  std::string arch_;
  std::shared_ptr<BinaryStore> store_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>>
      kernels_;
};

}  // namespace kjit
