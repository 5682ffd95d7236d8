#include "kjit/runtime/cuda/driver.h"

#include <dlfcn.h>

#include <memory>

#include "kjit/support/error.h"
#include "kjit/support/options.h"

namespace kjit::cuda {

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// Loading is attempted once per process; the outcome (driver or error) is kept.
struct LoadState {
  std::once_flag once;
  std::unique_ptr<Driver> driver;
  std::unique_ptr<CudaError> error;
};

LoadState& state() {
  static LoadState instance;
  return instance;
}

}  // namespace

std::string Driver::version_string() const {
  return std::to_string(version_ / 1000) + "." + std::to_string((version_ % 1000) / 10);
}

std::string Driver::error_name(CUresult result) const {
  const char* name = nullptr;
  if (api_.cuGetErrorName && api_.cuGetErrorName(result, &name) == CUDA_SUCCESS && name)
    return name;
  return "CUDA_ERROR_" + std::to_string(static_cast<int>(result));
}

void Driver::check(CUresult result, const char* call) const {
  if (result == CUDA_SUCCESS) return;
  const char* description = nullptr;
  if (!api_.cuGetErrorString || api_.cuGetErrorString(result, &description) != CUDA_SUCCESS ||
      description == nullptr)
    description = "no description";
  throw CudaError(call, static_cast<int>(result), error_name(result), description);
}

void Driver::load() {
  // KJIT_LIBCUDA lets tests point at a missing or fake library.
  std::string library = env("KJIT_LIBCUDA").value_or("libcuda.so.1");
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    throw CudaError(
        "dlopen(" + library + ")", static_cast<int>(CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE",
        std::string(why ? why : "not found") + "; no NVIDIA driver is installed on this machine");
  }
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle_, "cuGetProcAddress_v2"));
  if (get_proc == nullptr)
    throw CudaError(
        "dlsym(cuGetProcAddress_v2)", static_cast<int>(CUDA_ERROR_NOT_SUPPORTED),
        "CUDA_ERROR_NOT_SUPPORTED",
        "the driver is too old for kjit; install an NVIDIA driver for CUDA 12 or newer");

  // Ask for each entry point's CUDA 12.0 ABI. cuGetProcAddress returns the newest
  // variant at or below the version asked for, and newer variants may change the
  // signature (CUDA 13.0's cuCtxSynchronize takes a context), while cuda.h's
  // plain prototypes, which DriverApi's pointer types come from, keep the old one.
  constexpr int kAbiVersion = 12000;
  auto resolve = [&](const char* name, void** pointer) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult result = get_proc(name, pointer, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || *pointer == nullptr)
      throw CudaError(std::string("cuGetProcAddress(") + name + ")",
                      static_cast<int>(CUDA_ERROR_NOT_FOUND), "CUDA_ERROR_NOT_FOUND",
                      "the driver does not provide this entry point with the CUDA 12.0 "
                      "interface; update the NVIDIA driver");
  };
#define KJIT_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&api_.name));
  KJIT_DRIVER_FUNCTIONS(KJIT_RESOLVE)
#undef KJIT_RESOLVE

  check(api_.cuInit(0), "cuInit");
  check(api_.cuDriverGetVersion(&version_), "cuDriverGetVersion");
}

const Driver& Driver::get() {
  LoadState& s = state();
  std::call_once(s.once, [&s] {
    auto driver = std::unique_ptr<Driver>(new Driver());
    try {
      driver->load();
      s.driver = std::move(driver);
    } catch (const CudaError& e) {
      s.error = std::make_unique<CudaError>(e);
    }
  });
  if (s.error) throw *s.error;
  return *s.driver;
}

bool Driver::available(std::string* reason) {
  try {
    get();
    return true;
  } catch (const CudaError& e) {
    if (reason) *reason = e.what();
    return false;
  }
}

}  // namespace kjit::cuda
