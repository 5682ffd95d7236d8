#include "kjit/runtime/runtime.h"

#include <chrono>

#include "kjit/cache/key.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"
#include "kjit/support/options.h"

namespace kjit {

namespace {
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}
}  // namespace

const char* to_string(KernelOrigin origin) {
  switch (origin) {
    case KernelOrigin::Compiled:
      return "compiled";
    case KernelOrigin::MemoryCache:
      return "memory";
    case KernelOrigin::DiskCache:
      return "store";
  }
  return "?";
}

void CompiledKernel::launch(std::array<unsigned, 3> grid, void** args, CUstream stream) const {
  cuda::LaunchConfig config;
  config.grid = grid;
  config.block = {static_cast<unsigned>(source_.block_threads), 1, 1};
  config.dynamic_shared_bytes = static_cast<unsigned>(source_.dynamic_shared_bytes);
  config.stream = stream;
  function_.launch(config, args);
}

bool gpu_available(std::string* reason) {
  if (!cuda::Driver::available(reason)) return false;
  if (cuda::device_count() == 0) {
    if (reason) *reason = "the driver reports no CUDA device";
    return false;
  }
  return true;
}

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  context_ = std::make_unique<cuda::Context>(options_.device);
  device_ = cuda::device_properties(options_.device);
  arch_ = options_.arch.empty() ? device_.arch() : options_.arch;
  cuda::validate_arch(arch_);
  store_ =
      options_.store ? options_.store : std::shared_ptr<cache::Store>(cache::Store::open_default());
  gpu_model_ = cache::gpu_model(device_.name, device_.cc_major, device_.cc_minor, device_.sm_count);
  cache::DeviceRecord record;
  record.model = gpu_model_;
  record.name = device_.name;
  record.cc_major = device_.cc_major;
  record.cc_minor = device_.cc_minor;
  record.sm_count = device_.sm_count;
  record.driver = cuda::Driver::get().version_string();
  record.memory_bytes = device_.total_memory;
  store_->record_device(record);
  chooser_ = std::make_unique<tuner::Chooser>(store_, gpu_model_, device_);
  tune_on_first_use_ = options_.tune_on_first_use.value_or(env_flag("KJIT_TUNE"));
}

Runtime::~Runtime() = default;

size_t Runtime::cached_kernels() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernels_.size();
}

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSource& source) {
  std::string key = binary_key(source, arch_);
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second.get();  // waits if another thread builds it
    kernels_.emplace(key, promise.get_future().share());
  }
  try {
    std::shared_ptr<const CompiledKernel> kernel = build(source, key);
    promise.set_value(kernel);
    return kernel;
  } catch (...) {
    // Forget the failed entry so a later call can retry, and wake any waiters.
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mutex_);
    kernels_.erase(key);
    throw;
  }
}

std::shared_ptr<const CompiledKernel> Runtime::build(const KernelSource& source,
                                                     const std::string& key) {
  context_->make_current();
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->source_ = source;
  kernel->key_ = key;
  kernel->arch_ = arch_;

  CachedBinary binary = compile_cached(source, arch_, *store_);
  kernel->origin_ = binary.store_hit ? KernelOrigin::DiskCache : KernelOrigin::Compiled;
  kernel->compile_ms_ = binary.ms;
  for (const cuda::KernelStats& stats : binary.kernels)
    if (stats.name == source.name) kernel->stats_ = stats;
  const std::vector<char>& cubin = binary.cubin;

  auto load_started = std::chrono::steady_clock::now();
  std::shared_ptr<cuda::Module> module = cuda::Module::load(cubin);
  kernel->function_ = module->function(source.name);
  if (source.dynamic_shared_bytes > 48 * 1024) {
    if (source.dynamic_shared_bytes > device_.shared_per_block_optin)
      throw UserError("kernel " + source.name + " needs " +
                          std::to_string(source.dynamic_shared_bytes) +
                          " bytes of shared memory; this GPU allows " +
                          std::to_string(device_.shared_per_block_optin) + " per block",
                      "choose smaller tiles or fewer pipeline stages");
    kernel->function_.set_max_dynamic_shared(source.dynamic_shared_bytes);
  }
  kernel->load_ms_ = ms_since(load_started);
  if (kernel->stats_.name.empty()) {
    // No ptxas report for this kernel (an old store row, or a log without it): ask the driver.
    cuda::FunctionAttributes attributes = kernel->function_.attributes();
    kernel->stats_.name = source.name;
    kernel->stats_.registers = attributes.registers;
    kernel->stats_.shared_bytes = attributes.static_shared_bytes;
    kernel->stats_.stack_bytes = attributes.local_bytes;
  }
  return kernel;
}

}  // namespace kjit
