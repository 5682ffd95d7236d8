// GPU tests: a fixture that skips with the reason when no GPU is usable, and
// fails instead when KJIT_REQUIRE_GPU=1 (the GPU machine's check script sets it).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/options.h"

namespace kjit::testing {

struct GpuState {
  bool usable = false;
  std::string reason;
  std::unique_ptr<cuda::Context> context;  // device 0's primary context
  cuda::DeviceProperties device;
};

// Probed once per process.
inline GpuState& gpu_state() {
  static GpuState state = [] {
    GpuState s;
    try {
      if (!cuda::Driver::available(&s.reason)) return s;
      if (cuda::device_count() == 0) {
        s.reason = "the driver reports no CUDA device";
        return s;
      }
      s.context = std::make_unique<cuda::Context>(0);
      s.device = cuda::device_properties(0);
      s.usable = true;
    } catch (const std::exception& e) {
      s.reason = e.what();
    }
    return s;
  }();
  return state;
}

class GpuTest : public ::testing::Test {
 public:
  // One Runtime on device 0 for the whole test binary, made on first use (after a
  // fixture found a GPU); its store is the one KJIT_CACHE_DIR names (ctest points
  // it into the build folder). Never destroyed: its context must outlive every
  // kernel, even at exit.
  static Runtime& runtime() {
    static Runtime* shared = new Runtime();
    return *shared;
  }

 protected:
  void SetUp() override {
    GpuState& state = gpu_state();
    if (!state.usable) {
      if (env_flag("KJIT_REQUIRE_GPU"))
        FAIL() << "KJIT_REQUIRE_GPU=1 but no GPU is usable: " << state.reason;
      GTEST_SKIP() << "no usable GPU: " << state.reason;
    }
    state.context->make_current();
  }
  const cuda::DeviceProperties& device() const { return gpu_state().device; }
};

}  // namespace kjit::testing
