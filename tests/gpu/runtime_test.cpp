// The runtime core on a real GPU: load, launch, copy, time, and typed errors.
#include <gtest/gtest.h>

#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/support/error.h"
#include "kjit/templates/embedded.h"
#include "tests/support/gpu_test.h"
#include "tests/support/numeric.h"

namespace kjit {
namespace {

using testing::GpuTest;

std::vector<cuda::SourceHeader> headers() {
  std::vector<cuda::SourceHeader> out;
  for (const TemplateHeader& t : embedded_templates()) out.push_back({t.name, t.content});
  return out;
}

class RuntimeGpu : public GpuTest {
 protected:
  std::shared_ptr<cuda::Module> demo_module() {
    cuda::NvrtcOptions options;
    options.arch = device().arch();
    cuda::CompiledProgram p =
        cuda::nvrtc_compile("#include \"kjit/demo.cuh\"\n", "demo.cu", options, headers());
    return cuda::Module::load(p.cubin);
  }
};

// The C API runs in its runtime's context and gives the caller's back: PyTorch
// keeps its device's context current, and kjit work for another device left that
// one current (or failed in the caller's).
TEST_F(RuntimeGpu, ScopedContextPutsBackTheCallersContext) {
  const cuda::Context& ours = *testing::gpu_state().context;
  auto current = [] {
    CUcontext c = nullptr;
    KJIT_CU(cuCtxGetCurrent, &c);
    return c;
  };
  KJIT_CU(cuCtxSetCurrent, nullptr);  // a thread with no context (or another one)
  {
    const cuda::ScopedContext scope(&ours);
    EXPECT_EQ(current(), ours.get());
  }
  EXPECT_EQ(current(), nullptr);
  {
    const cuda::ScopedContext scope(nullptr);  // work that makes its own current
    ours.make_current();
  }
  EXPECT_EQ(current(), nullptr);
  ours.make_current();
  {
    const cuda::ScopedContext scope(&ours);  // current already: nothing switches
    EXPECT_EQ(current(), ours.get());
  }
  EXPECT_EQ(current(), ours.get());
}

TEST_F(RuntimeGpu, DevicePropertiesAreSane) {
  EXPECT_GT(device().sm_count, 0);
  EXPECT_GE(device().cc_major, 7);
  EXPECT_GT(device().shared_per_block_optin, 0);
  EXPECT_GE(device().shared_per_block_optin, device().shared_per_block);
  EXPECT_GT(device().l2_bytes, 0);
  EXPECT_GT(device().theoretical_bandwidth_gbs(), 100);
}

TEST_F(RuntimeGpu, SaxpyMatchesReferenceOnEveryElement) {
  cuda::Function saxpy = demo_module()->function("kjit_demo_saxpy");
  for (long long n : {1LL, 3LL, 1023LL, (1LL << 20) + 7}) {
    SCOPED_TRACE(n);
    std::vector<float> x = testing::random_floats(n), y = testing::random_floats(n);
    cuda::DeviceBuffer dx = cuda::DeviceBuffer::from(x), dy = cuda::DeviceBuffer::from(y);
    float a = 1.5f;
    CUdeviceptr px = dx.get(), py = dy.get();
    void* args[] = {&a, &px, &py, &n};
    cuda::Stream stream;
    cuda::LaunchConfig launch;
    launch.block = {128, 1, 1};
    launch.grid = {static_cast<unsigned>(device().sm_count), 1, 1};
    launch.stream = stream.get();
    saxpy.launch(launch, args);
    stream.synchronize();
    std::vector<float> out = dy.to_host<float>();
    std::vector<double> got(out.begin(), out.end()), want(n);
    for (long long i = 0; i < n; ++i) want[i] = 1.5 * x[i] + y[i];
    EXPECT_LE(testing::relative_l2_error(got, want), 1e-6);
  }
}

TEST_F(RuntimeGpu, FunctionAttributesAndOccupancy) {
  cuda::Function saxpy = demo_module()->function("kjit_demo_saxpy");
  cuda::FunctionAttributes a = saxpy.attributes();
  EXPECT_GT(a.registers, 0);
  EXPECT_EQ(a.local_bytes, 0);
  EXPECT_GE(a.max_threads_per_block, 256);
  EXPECT_GE(saxpy.max_active_blocks_per_sm(256, 0), 1);
}

TEST_F(RuntimeGpu, MissingKernelIsAUserError) {
  EXPECT_THROW(demo_module()->function("no_such_kernel"), UserError);
}

TEST_F(RuntimeGpu, InvalidLaunchIsACudaErrorNotACrash) {
  cuda::Function saxpy = demo_module()->function("kjit_demo_saxpy");
  float a = 1;
  CUdeviceptr p = 0;
  long long n = 0;
  void* args[] = {&a, &p, &p, &n};
  cuda::LaunchConfig launch;
  launch.block = {4096, 1, 1};  // over the 1024-thread limit
  try {
    saxpy.launch(launch, args);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.call(), "cuLaunchKernel");
    EXPECT_EQ(e.code_name(), "CUDA_ERROR_INVALID_VALUE");
  }
}

TEST_F(RuntimeGpu, BufferCopiesRoundTripAndCheckBounds) {
  std::vector<float> host = testing::random_floats(1000);
  cuda::DeviceBuffer buffer = cuda::DeviceBuffer::from(host);
  EXPECT_EQ(buffer.to_host<float>(), host);
  buffer.fill_bytes(0xff);
  for (float v : buffer.to_host<float>()) EXPECT_TRUE(std::isnan(v));
  float extra[2] = {};
  EXPECT_THROW(buffer.upload(extra, sizeof extra, buffer.bytes() - 4), UserError);
}

// The atomic dQ's sums live in compressible memory (mapped through the virtual
// memory API): it must hold what is written like any buffer, be granted where the
// GPU supports compression, and be given back whole (no mapping or address range
// left behind after 16 rounds of 64 MiB).
TEST_F(RuntimeGpu, CompressibleBufferHoldsItsBytesAndIsGivenBack) {
  const size_t bytes = (size_t{3} << 20) + 12;  // not a whole granule
  cuda::DeviceBuffer buffer = cuda::DeviceBuffer::compressible(bytes);
  ASSERT_NE(buffer.get(), 0u);
  EXPECT_EQ(buffer.bytes(), bytes);
  CUdevice device = 0;
  KJIT_CU(cuCtxGetDevice, &device);
  int supported = 0;
  KJIT_CU(cuDeviceGetAttribute, &supported, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED,
          device);
  const bool granted = buffer.compressed();
  if (supported) {
    EXPECT_TRUE(granted) << "the GPU supports compression";
  }
  std::vector<float> host = testing::random_floats(bytes / 4);
  buffer.upload(host.data(), host.size() * 4);
  EXPECT_EQ(buffer.to_host<float>(), host);
  buffer.fill_bytes(0);
  for (float v : buffer.to_host<float>()) ASSERT_EQ(v, 0.0f);

  cuda::DeviceBuffer moved = std::move(buffer);
  EXPECT_EQ(buffer.get(), 0u);
  EXPECT_EQ(moved.compressed(), granted);
  EXPECT_EQ(moved.to_host<float>().size(), host.size());

  size_t free_before = 0, total = 0;
  KJIT_CU(cuMemGetInfo, &free_before, &total);
  for (int round = 0; round < 16; ++round) {
    cuda::DeviceBuffer big = cuda::DeviceBuffer::compressible(size_t{64} << 20);
    big.fill_bytes(static_cast<unsigned char>(round));
  }
  size_t free_after = 0;
  KJIT_CU(cuMemGetInfo, &free_after, &total);
  EXPECT_GE(free_after + (size_t{4} << 20), free_before) << "compressible buffers leaked";
}

// A fill or an upload has finished on the device when it returns, so a kernel on a
// non-blocking stream (which does not wait for the legacy stream) sees the bytes.
// Under compute-sanitizer racecheck an attention test read its 0xFF poison back:
// cuMemsetD8 had returned with the fill still queued, and ran after the kernel.
TEST_F(RuntimeGpu, FillsAndUploadsAreCompleteWhenTheyReturn) {
  const size_t bytes = size_t{1} << 30;  // ~0.3 ms of memset, ~50 ms of upload
  cuda::DeviceBuffer buffer(bytes);
  for (int round = 0; round < 3; ++round) {
    buffer.fill_bytes(static_cast<unsigned char>(round));
    EXPECT_EQ(cuda::Driver::get().api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS)
        << "the fill is still queued";
  }
  std::vector<unsigned char> host(bytes / 4, 7);
  buffer.upload(host.data(), host.size());
  EXPECT_EQ(cuda::Driver::get().api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS)
      << "the upload is still queued";
  // And what a kernel on a non-blocking stream reads is the uploaded bytes.
  cuda::Stream stream;
  cuda::DeviceBuffer copy(host.size());
  KJIT_CU(cuMemcpyDtoDAsync, copy.get(), buffer.get(), host.size(), stream.get());
  stream.synchronize();
  EXPECT_EQ(copy.to_host<unsigned char>(), host);
}

TEST_F(RuntimeGpu, EventsMeasurePositiveTime) {
  cuda::Function saxpy = demo_module()->function("kjit_demo_saxpy");
  long long n = 1 << 24;
  cuda::DeviceBuffer x(n * 4), y(n * 4);
  x.fill_bytes(0);
  y.fill_bytes(0);
  float a = 1;
  CUdeviceptr px = x.get(), py = y.get();
  void* args[] = {&a, &px, &py, &n};
  cuda::LaunchConfig launch;
  launch.block = {256, 1, 1};
  launch.grid = {static_cast<unsigned>(device().sm_count * 8), 1, 1};
  cuda::Event start, stop;
  start.record();
  saxpy.launch(launch, args);
  stop.record();
  stop.synchronize();
  EXPECT_GT(stop.elapsed_ms_since(start), 0);
}

}  // namespace
}  // namespace kjit
