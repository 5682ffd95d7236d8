#include "kjit/runtime/cuda/context.h"

#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

Context::Context(int ordinal) : ordinal_(ordinal) {
  int count = device_count();
  if (count == 0)
    throw CudaError("cuDeviceGetCount", static_cast<int>(CUDA_ERROR_NO_DEVICE),
                    "CUDA_ERROR_NO_DEVICE", "the driver reports no CUDA device");
  if (ordinal < 0 || ordinal >= count)
    throw UserError("device " + std::to_string(ordinal) + " does not exist; this machine has " +
                    std::to_string(count) + " CUDA device(s)");
  KJIT_CU(cuDeviceGet, &device_, ordinal);
  KJIT_CU(cuDevicePrimaryCtxRetain, &context_, device_);
  make_current();
}

Context::~Context() {
  if (context_ != nullptr) Driver::get().api().cuDevicePrimaryCtxRelease(device_);
}

void Context::make_current() const {
  KJIT_CU(cuCtxSetCurrent, context_);
}

void Context::synchronize() const {
  make_current();
  KJIT_CU(cuCtxSynchronize);
}

ScopedContext::ScopedContext(const Context* context) {
  KJIT_CU(cuCtxGetCurrent, &previous_);
  if (context == nullptr) {
    restore_ = true;
  } else if (context->get() != previous_) {
    context->make_current();
    restore_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (!restore_) return;
  // A failure here (the driver shutting down) leaves the context as it is.
  Driver::get().api().cuCtxSetCurrent(previous_);
}

}  // namespace kjit::cuda
