// The CUDA driver, loaded at run time.
//
// kjit never links libcuda: `Driver::get()` opens libcuda.so.1 with dlopen and
// resolves every entry point through cuGetProcAddress, asking for the CUDA 12.0
// interface of each (see driver.cpp for why). A machine without a driver still runs
// every kjit binary; only calls that need the GPU fail, with a CudaError.
#pragma once

#include <cuda.h>

#include <mutex>
#include <string>

namespace kjit::cuda {

// One function pointer per driver entry point we use. `decltype(&::cuX)` is the
// header's prototype for the versioned symbol cuda.h maps cuX to.
struct DriverApi {
// clang-format off (one entry point per line; the formatter folds it unstably)
#define KJIT_DRIVER_FUNCTIONS(X)                 \
  X(cuInit)                                      \
  X(cuDriverGetVersion)                          \
  X(cuGetErrorName)                              \
  X(cuGetErrorString)                            \
  X(cuDeviceGetCount)                            \
  X(cuDeviceGet)                                 \
  X(cuDeviceGetName)                             \
  X(cuDeviceGetAttribute)                        \
  X(cuDeviceTotalMem)                            \
  X(cuDeviceGetUuid)                             \
  X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease)                   \
  X(cuCtxSetCurrent)                             \
  X(cuCtxGetCurrent)                             \
  X(cuCtxSynchronize)                            \
  X(cuMemAlloc)                                  \
  X(cuMemFree)                                   \
  X(cuMemAllocAsync)                             \
  X(cuMemFreeAsync)                              \
  X(cuMemcpyHtoD)                                \
  X(cuMemcpyDtoH)                                \
  X(cuMemcpyDtoD)                                \
  X(cuMemcpyHtoDAsync)                           \
  X(cuMemcpyDtoHAsync)                           \
  X(cuMemcpyDtoDAsync)                           \
  X(cuMemsetD8)                                  \
  X(cuMemsetD8Async)                             \
  X(cuMemsetD32Async)                            \
  X(cuMemGetInfo)                                \
  X(cuMemCreate)                                 \
  X(cuMemRelease)                                \
  X(cuMemAddressReserve)                         \
  X(cuMemAddressFree)                            \
  X(cuMemMap)                                    \
  X(cuMemUnmap)                                  \
  X(cuMemSetAccess)                              \
  X(cuMemGetAllocationGranularity)               \
  X(cuMemGetAllocationPropertiesFromHandle)      \
  X(cuCtxGetDevice)                              \
  X(cuStreamCreate)                              \
  X(cuStreamDestroy)                             \
  X(cuStreamSynchronize)                         \
  X(cuStreamQuery)                               \
  X(cuStreamIsCapturing)                         \
  X(cuStreamBeginCapture)                        \
  X(cuStreamEndCapture)                          \
  X(cuGraphInstantiateWithFlags)                 \
  X(cuGraphLaunch)                               \
  X(cuGraphDestroy)                              \
  X(cuGraphExecDestroy)                          \
  X(cuEventCreate)                               \
  X(cuEventDestroy)                              \
  X(cuEventRecord)                               \
  X(cuEventSynchronize)                          \
  X(cuEventElapsedTime)                          \
  X(cuModuleLoadData)                            \
  X(cuModuleUnload)                              \
  X(cuModuleGetFunction)                         \
  X(cuFuncGetAttribute)                          \
  X(cuFuncSetAttribute)                          \
  X(cuLaunchKernel)                              \
  X(cuLaunchCooperativeKernel)                   \
  X(cuLaunchKernelEx)                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxActiveClusters)                \
  X(cuPointerGetAttribute)                       \
  X(cuTensorMapEncodeTiled)
// clang-format on
#define KJIT_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
  KJIT_DRIVER_FUNCTIONS(KJIT_DECLARE_POINTER)
#undef KJIT_DECLARE_POINTER
};

class Driver {
 public:
  // The loaded driver, with cuInit done. Throws CudaError (call "dlopen" or
  // "cuInit") when there is no usable driver; the message says what to install.
  static const Driver& get();

  // Whether a driver loads and initializes, without throwing. On false, `reason`
  // (if given) gets the one-line explanation.
  static bool available(std::string* reason = nullptr);

  const DriverApi& api() const { return api_; }
  int version() const { return version_; }  // e.g. 13000 for CUDA 13.0
  std::string version_string() const;       // e.g. "13.0"

  // Throws CudaError naming `call` when `result` is not CUDA_SUCCESS.
  void check(CUresult result, const char* call) const;
  std::string error_name(CUresult result) const;

 private:
  Driver() = default;
  void load();

  void* handle_ = nullptr;
  DriverApi api_;
  int version_ = 0;
};

// Shorthand used everywhere in runtime/cuda: KJIT_CU(cuMemAlloc, &ptr, bytes).
#define KJIT_CU(name, ...)                                                  \
  do {                                                                      \
    const ::kjit::cuda::Driver& kjit_driver_ = ::kjit::cuda::Driver::get(); \
    kjit_driver_.check(kjit_driver_.api().name(__VA_ARGS__), #name);        \
  } while (0)

}  // namespace kjit::cuda
