// The embedding API: a Runtime owns a device's context and turns KernelSources
// into loaded kernels, once per process.
//
//   kjit::Runtime runtime;                        // device 0
//   auto kernel = runtime.compile(source);        // in-process map -> SQLite store -> NVRTC
//   kernel->function().launch(config, args);      // asynchronous, on your stream
//
// Thread-safe: compile() may be called from any thread; two threads asking for
// the same kernel share one compilation.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kjit/cache/store.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/tuner/choose.h"

namespace kjit {

struct RuntimeOptions {
  int device = 0;
  // Compile for this architecture instead of the device's (e.g. "sm_90a").
  std::string arch;
  // The binary store; nullptr opens the user's (cache::Store::open_default(),
  // which honours KJIT_CACHE=off and KJIT_CACHE_DIR).
  std::shared_ptr<cache::Store> store;
  // Tune a problem the store has no tuning for on its first use (as Triton's
  // autotune does) instead of taking the nearest tuned problem or the model's
  // choice. Unset: KJIT_TUNE=1 turns it on.
  std::optional<bool> tune_on_first_use;
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

// Whether a Runtime can start here: the driver loads and reports a device. When
// not, `reason` says why ("libcuda.so.1 not found", "no CUDA device"); emitting
// and compiling (NVRTC) work without one.
bool gpu_available(std::string* reason = nullptr);

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

  // The store binaries and tunings are kept in (possibly a disabled one).
  cache::Store& store() const { return *store_; }
  // The key of this GPU model in the store: "NVIDIA H200 cc9.0 132SM".
  const std::string& gpu_model() const { return gpu_model_; }

  // Kernels held in the in-process map.
  size_t cached_kernels() const;

  // Where configs come from (tuner/choose.h): the store's tunings for this GPU
  // model, the nearest tuned problem, the model.
  tuner::Chooser& chooser() const { return *chooser_; }
  bool tune_on_first_use() const { return tune_on_first_use_; }

 private:
  std::shared_ptr<const CompiledKernel> build(const KernelSource& source, const std::string& key);

  RuntimeOptions options_;
  std::unique_ptr<cuda::Context> context_;
  cuda::DeviceProperties device_;
  std::string arch_;
  std::string gpu_model_;
  std::shared_ptr<cache::Store> store_;
  std::unique_ptr<tuner::Chooser> chooser_;
  bool tune_on_first_use_ = false;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>>
      kernels_;
};

}  // namespace kjit
