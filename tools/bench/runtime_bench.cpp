// The fixed costs of a JIT: NVRTC compile of the demo kernel (cold: NVRTC keeps
// nothing between programs), cuModuleLoadData of its cubin, and the host cost of
// launching an empty kernel (enqueue only, and enqueue + synchronize).
//
// Also the warm start of a second process (store open + lookup + module load)
// and a hit in the Runtime's in-process map.
//
//   build/release/tools/bench/runtime_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/compile.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/stream.h"
#include "runtime/runtime.h"
#include "tools/cli/command.h"

namespace kjit {
namespace {

KernelSource demo_source() {
  KernelSource s;
  s.name = "kjit_demo_saxpy";
  s.source = "#include \"kjit/demo.cuh\"\n";
  s.family = "demo";
  return s;
}

KernelSource empty_source() {
  KernelSource s;
  s.name = "kjit_empty";
  s.source = "extern \"C\" __global__ void kjit_empty() {}\n";
  s.family = "demo";
  s.block_threads = 32;
  return s;
}

std::string arch() {
  return cli::default_arch();
}

void BM_NvrtcCompileDemo(benchmark::State& state) {
  KernelSource source = demo_source();
  std::string target = arch();
  for (auto _ : state) benchmark::DoNotOptimize(compile_for_arch(source, target).cubin.size());
  state.SetLabel(target);
}
BENCHMARK(BM_NvrtcCompileDemo)->Unit(benchmark::kMillisecond)->Iterations(10);

bool need_gpu(benchmark::State& state) {
  std::string reason;
  if (cli::gpu_available(&reason)) return true;
  state.SkipWithError(("no GPU: " + reason).c_str());
  for (auto _ : state) {
  }
  return false;
}

void BM_ModuleLoadDemo(benchmark::State& state) {
  if (!need_gpu(state)) return;
  cuda::Context context(0);
  std::vector<char> cubin = compile_for_arch(demo_source(), arch()).cubin;
  for (auto _ : state) {
    std::shared_ptr<cuda::Module> module = cuda::Module::load(cubin);
    benchmark::DoNotOptimize(module->function("kjit_demo_saxpy").get());
  }
}
BENCHMARK(BM_ModuleLoadDemo)->Unit(benchmark::kMicrosecond);

// The warm start of a second process: open the store file, find the demo
// kernel's cubin, load it. A fresh Store per iteration, as a new process has.
void BM_WarmHitFreshStore(benchmark::State& state) {
  if (!need_gpu(state)) return;
  cuda::Context context(0);
  std::string path = std::filesystem::temp_directory_path() /
                     ("kjit-runtime-bench-" + std::to_string(::getpid())) / "kjit.db";
  KernelSource source = demo_source();
  std::string target = arch();
  compile_cached(source, target, *cache::Store::open(path));
  for (auto _ : state) {
    std::unique_ptr<cache::Store> store = cache::Store::open(path);
    CachedBinary binary = compile_cached(source, target, *store);
    if (!binary.store_hit) state.SkipWithError("expected a store hit");
    std::shared_ptr<cuda::Module> module = cuda::Module::load(binary.cubin);
    benchmark::DoNotOptimize(module->function(source.name).get());
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}
BENCHMARK(BM_WarmHitFreshStore)->Unit(benchmark::kMicrosecond);

void BM_InProcessCacheHit(benchmark::State& state) {
  if (!need_gpu(state)) return;
  Runtime runtime;
  KernelSource source = demo_source();
  runtime.compile(source);
  for (auto _ : state) benchmark::DoNotOptimize(runtime.compile(source).get());
}
BENCHMARK(BM_InProcessCacheHit)->Unit(benchmark::kMicrosecond);

void BM_EmptyKernelLaunch(benchmark::State& state) {
  if (!need_gpu(state)) return;
  Runtime runtime;
  auto kernel = runtime.compile(empty_source());
  cuda::Stream stream;
  const bool synchronize = state.range(0) != 0;
  for (auto _ : state) {
    kernel->launch({1, 1, 1}, nullptr, stream.get());
    if (synchronize) stream.synchronize();
  }
  stream.synchronize();
  state.SetLabel(synchronize ? "launch + synchronize" : "launch (enqueue only)");
}
BENCHMARK(BM_EmptyKernelLaunch)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kjit

BENCHMARK_MAIN();
