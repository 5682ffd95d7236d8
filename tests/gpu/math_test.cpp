// templates/math.cuh's gelu on the device, against fp64 x * erfc(-x / sqrt 2) / 2.
// tests/unit/emulation/math_test.cpp checks the same source on the CPU, where exact
// 1/y and 2^y stand in for the hardware's approximations; here the MUFU
// instructions themselves run: kjit::gelu_for_16bit's reciprocal and 2^y
// (rcp.approx, ex2.approx) and gelu_f32's reciprocal seed. Floats in [-24, 24] at a
// bit stride, around the flush and the cap, and the specials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/cuda/stream.h"
#include "tests/support/gelu_error.h"
#include "tests/support/gpu_test.h"

namespace kjit {
namespace {

using testing::GpuTest;

constexpr const char* kSource = R"(#include "kjit/math.cuh"
extern "C" __global__ void gelu_both(const float* x, float* exact, float* for_16bit, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    exact[i] = kjit::gelu_f32(x[i]);
    for_16bit[i] = kjit::gelu_for_16bit(x[i]);
  }
}
)";

using testing::from_bits;
using testing::to_bits;

class MathGpu : public GpuTest {
 protected:
  // Both gelus of every x, on the device.
  void run(const std::vector<float>& x, std::vector<float>* exact, std::vector<float>* for_16bit) {
    cuda::NvrtcOptions options;
    options.arch = device().arch();
    const cuda::CompiledProgram program =
        cuda::nvrtc_compile(kSource, "gelu_both.cu", options, template_headers());
    std::shared_ptr<cuda::Module> module = cuda::Module::load(program.cubin);
    cuda::Function gelu = module->function("gelu_both");
    long long n = static_cast<long long>(x.size());
    cuda::DeviceBuffer dx = cuda::DeviceBuffer::from(x);
    cuda::DeviceBuffer de(x.size() * sizeof(float)), d16(x.size() * sizeof(float));
    CUdeviceptr px = dx.get(), pe = de.get(), p16 = d16.get();
    void* args[] = {&px, &pe, &p16, &n};
    cuda::Stream stream;
    cuda::LaunchConfig launch;
    launch.block = {256, 1, 1};
    launch.grid = {static_cast<unsigned>(device().sm_count) * 8, 1, 1};
    launch.stream = stream.get();
    gelu.launch(launch, args);
    stream.synchronize();
    *exact = de.to_host<float>();
    *for_16bit = d16.to_host<float>();
  }
};

TEST_F(MathGpu, GeluOnTheDeviceWithinItsBounds) {
  std::vector<float> x;
  const uint32_t end = to_bits(24.0f);
  for (uint32_t u = 0; u <= end; u += 61) {
    x.push_back(from_bits(u));
    x.push_back(-from_bits(u));
  }
  for (float center : {19.0f, 18.7f, 14.0f, 13.2f, 4.0f, 1.0f})
    for (int i = -2000; i <= 2000; ++i) {
      x.push_back(from_bits(to_bits(center) + i));
      x.push_back(-from_bits(to_bits(center) + i));
    }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {0.0f, -0.0f, 100.0f, -100.0f, inf, -inf};
  x.insert(x.end(), specials.begin(), specials.end());

  std::vector<float> exact, for_16bit;
  run(x, &exact, &for_16bit);

  // gelu_f32: 8 ulps of the result (of FLT_MIN below it), as on the CPU;
  // gelu_for_16bit: the bounds of tests/support/gelu_error.h.
  double exact_ulps = 0;
  float exact_at = 0;
  testing::GeluFor16BitError w;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = testing::gelu_reference(x[i]);
    if (std::isinf(want))
      EXPECT_EQ(exact[i], want) << x[i];
    else
      testing::raise_worst(exact_ulps, exact_at, testing::ulp_error(exact[i], want), x[i]);
    w.check(x[i], for_16bit[i]);
  }
  EXPECT_LE(exact_ulps, 8.0) << "gelu_f32, worst at x = " << exact_at;
  EXPECT_LE(w.near, w.near_bound()) << "gelu_for_16bit, |x| <= 4, worst at x = " << w.near_at;
  EXPECT_LE(w.far, w.far_bound()) << "gelu_for_16bit, worst at x = " << w.far_at;
  EXPECT_LE(w.tiny, w.far_bound())
      << "gelu_for_16bit, subnormal results, worst at x = " << w.tiny_at;
  // The limits: gelu(-inf) = -0, and -0 where Phi underflows.
  const size_t s = x.size() - specials.size();
  EXPECT_EQ(to_bits(for_16bit[s]), to_bits(0.0f));
  EXPECT_EQ(to_bits(for_16bit[s + 1]), to_bits(-0.0f));
  EXPECT_EQ(for_16bit[s + 2], 100.0f);
  EXPECT_EQ(to_bits(for_16bit[s + 3]), to_bits(-0.0f));
  EXPECT_EQ(to_bits(for_16bit[s + 5]), to_bits(-0.0f));
  std::printf(
      "gelu_f32 worst %.2f ulps at %g; gelu_for_16bit worst relative 2^%.2f (|x| <= 4, "
      "at %g), 2^%.2f (at %g)\n",
      exact_ulps, exact_at, std::log2(w.near), w.near_at, std::log2(w.far), w.far_at);
}

}  // namespace
}  // namespace kjit
