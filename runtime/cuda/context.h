// The device's primary context (the one the CUDA runtime and PyTorch share), held
// for the lifetime of this object and made current on the calling thread.
#pragma once

#include <cuda.h>

namespace kjit::cuda {

class Context {
 public:
  explicit Context(int ordinal = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Makes the context current on the calling thread (cheap; call before driver work
  // on a thread that did not create the Context).
  void make_current() const;
  void synchronize() const;
  CUcontext get() const { return context_; }
  int ordinal() const { return ordinal_; }

 private:
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

}  // namespace kjit::cuda
