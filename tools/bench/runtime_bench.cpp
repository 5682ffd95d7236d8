// The fixed costs of a JIT: NVRTC compile of the demo kernel (cold: NVRTC keeps
// nothing between programs), cuModuleLoadData of its cubin, and the host cost of
// launching an empty kernel (enqueue only, and enqueue + synchronize).
//
// Also the warm start of a second process (store open + lookup + module load),
// a hit in the Runtime's in-process map, and the host cost of one family launch
// through the C++ API (what the Python package's per-call overhead is measured
// against: tests/python/torch_check.py).
//
//   build/release/tools/bench/runtime_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/runtime.h"
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

// ElementwiseKernel::launch of y = x * sigmoid(x) * g over 4096 bf16 (enqueue
// only: the host's cost per call, the kernel itself is ~2 us).
void BM_ElementwiseLaunch(benchmark::State& state) {
  if (!need_gpu(state)) return;
  Runtime runtime;
  ir::ParseOptions options;
  options.default_dtype = ir::DType::BF16;
  ElementwiseKernel kernel(runtime, ir::parse("y = x * sigmoid(x) * g", options));
  const int64_t n = 4096;
  cuda::DeviceBuffer x(n * 2), g(n * 2), y(n * 2);
  cuda::Stream stream;
  const std::vector<TensorArg> inputs = {{x.get(), ir::DType::BF16, {n}},
                                         {g.get(), ir::DType::BF16, {n}}};
  const std::vector<TensorArg> outputs = {{y.get(), ir::DType::BF16, {n}}};
  kernel.launch(inputs, outputs, stream.get());
  stream.synchronize();
  int64_t calls = 0;
  for (auto _ : state) {
    kernel.launch(inputs, outputs, stream.get());
    if (++calls % 1024 == 0) stream.synchronize();  // keep the queue from filling
  }
  stream.synchronize();
  state.SetLabel("elementwise, 4096 bf16, enqueue");
}
BENCHMARK(BM_ElementwiseLaunch)->Unit(benchmark::kMicrosecond);

// Matmul::launch, 256 x 256 x 256 bf16 with gelu(acc + bias) (enqueue only).
void BM_MatmulLaunch(benchmark::State& state) {
  if (!need_gpu(state)) return;
  Runtime runtime;
  matmul::Problem problem;
  problem.m = problem.n = problem.k = 256;
  problem.epilogue = matmul::epilogue_from_ir("gelu(acc + bias)", problem.input).epilogue;
  matmul::Matmul gemm(runtime, problem);
  cuda::DeviceBuffer a(256 * 256 * 2), b(256 * 256 * 2), c(256 * 256 * 2), bias(256 * 2);
  matmul::Tensors tensors;
  tensors.a = a.get(), tensors.b = b.get(), tensors.c = c.get();
  tensors.extras = {{bias.get()}};
  cuda::Stream stream;
  gemm.launch(tensors, stream.get());
  stream.synchronize();
  int64_t calls = 0;
  for (auto _ : state) {
    gemm.launch(tensors, stream.get());
    if (++calls % 1024 == 0) stream.synchronize();
  }
  stream.synchronize();
  state.SetLabel("matmul 256^3 bf16 + gelu(acc + bias), enqueue");
}
BENCHMARK(BM_MatmulLaunch)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kjit

BENCHMARK_MAIN();
