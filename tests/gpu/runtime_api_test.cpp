// kjit::Runtime on a GPU: compile once per process, share across threads.
#include <gtest/gtest.h>

#include <thread>

#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/error.h"
#include "tests/support/gpu_test.h"

namespace kjit {
namespace {

class RuntimeApi : public testing::GpuTest {};

KernelSource demo() {
  KernelSource s;
  s.name = "kjit_demo_saxpy";
  s.source = "#include \"kjit/demo.cuh\"\n";
  s.family = "demo";
  s.block_threads = 256;
  return s;
}

TEST_F(RuntimeApi, CompilesOnceAndReusesTheKernel) {
  // No store, so the first compile is a real one on every run.
  Runtime runtime(RuntimeOptions{0, "", cache::Store::disabled("test")});
  EXPECT_EQ(runtime.device().sm_count, device().sm_count);
  auto first = runtime.compile(demo());
  auto second = runtime.compile(demo());
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(runtime.cached_kernels(), 1u);
  EXPECT_EQ(first->origin(), KernelOrigin::Compiled);
  EXPECT_GT(first->stats().registers, 0);
}

TEST_F(RuntimeApi, ConcurrentCompilesShareOneBuild) {
  Runtime runtime;
  std::vector<std::shared_ptr<const CompiledKernel>> kernels(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kernels.size(); ++i)
    threads.emplace_back([&, i] { kernels[i] = runtime.compile(demo()); });
  for (std::thread& t : threads) t.join();
  for (auto& k : kernels) EXPECT_EQ(k.get(), kernels[0].get());
}

TEST_F(RuntimeApi, LaunchRunsTheKernel) {
  Runtime runtime;
  auto kernel = runtime.compile(demo());
  long long n = 4097;
  std::vector<float> x(n, 2.0f), y(n, 1.0f);
  cuda::DeviceBuffer dx = cuda::DeviceBuffer::from(x), dy = cuda::DeviceBuffer::from(y);
  float a = 3;
  CUdeviceptr px = dx.get(), py = dy.get();
  void* args[] = {&a, &px, &py, &n};
  kernel->launch({4, 1, 1}, args);
  runtime.context().synchronize();
  for (float v : dy.to_host<float>()) ASSERT_EQ(v, 7.0f);
}

TEST_F(RuntimeApi, TooMuchSharedMemoryIsAUserError) {
  Runtime runtime;
  KernelSource s = demo();
  s.dynamic_shared_bytes = static_cast<int>(device().shared_per_block_optin) + 1024;
  EXPECT_THROW(runtime.compile(s), UserError);
}

}  // namespace
}  // namespace kjit
