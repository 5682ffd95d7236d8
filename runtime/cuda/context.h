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

// Makes a context current on the calling thread for a scope, then puts back the one
// that was current before: what the C API's entry points do. A caller such as
// PyTorch keeps its own device's context current; kjit's work for another device
// must neither fail in that one nor leave it changed (torch would then allocate on
// kjit's device). Switches nothing where `context` is current already; with none
// given it only restores, for work that makes its own context current (creating a
// Runtime).
class ScopedContext {
 public:
  explicit ScopedContext(const Context* context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool restore_ = false;
};

}  // namespace kjit::cuda
