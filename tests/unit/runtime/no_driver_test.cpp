// With no driver (KJIT_LIBCUDA points at a missing library), every driver-backed
// call fails with a typed CudaError naming the call, and nothing crashes.
#include <gtest/gtest.h>

#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/support/error.h"

namespace kjit::cuda {
namespace {

TEST(NoDriver, AvailableIsFalseWithAReason) {
  std::string reason;
  EXPECT_FALSE(Driver::available(&reason));
  EXPECT_NE(reason.find("dlopen"), std::string::npos) << reason;
  EXPECT_NE(reason.find("no NVIDIA driver"), std::string::npos) << reason;
}

TEST(NoDriver, CallsThrowCudaErrorWithName) {
  try {
    Driver::get();
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code_name(), "CUDA_ERROR_NO_DEVICE");
    EXPECT_NE(e.call().find("dlopen"), std::string::npos);
  }
  EXPECT_THROW(device_count(), CudaError);
  EXPECT_THROW(Context context(0), CudaError);
  EXPECT_THROW(DeviceBuffer buffer(16), CudaError);
}

TEST(NoDriver, NvrtcStillCompiles) {
  CompiledProgram p = nvrtc_compile("extern \"C\" __global__ void k() {}", "k.cu", {});
  EXPECT_FALSE(p.cubin.empty());
}

}  // namespace
}  // namespace kjit::cuda
