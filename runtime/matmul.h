// The matmul family's kernel: a Problem on a Runtime, its config from the tuner
// (tuner/choose.h), compiled through Runtime::compile, launched (padding path,
// split-K, TMA descriptors) on the caller's stream.
//
//   kjit::Runtime runtime;
//   matmul::Problem p{.m = 4096, .n = 4096, .k = 4096};
//   matmul::Matmul mm(runtime, p);
//   mm.launch({.a = a, .b = b, .c = c}, stream);   // packed row-major A, B, C
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/runtime.h"

namespace kjit::matmul {

// One call's device pointers and strides, in elements. A leading dimension or
// batch stride of 0 means "packed" (the inner dimension; rows x ld).
struct Tensors {
  CUdeviceptr a = 0, b = 0, c0 = 0, c = 0;
  int64_t lda = 0, ldb = 0, ldc0 = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c0 = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  struct Extra {
    CUdeviceptr pointer = 0;
    int64_t ld = 0;            // Tensor operands; 0: N
    int64_t batch_stride = 0;  // 0: shared by every batch
  };
  std::vector<Extra> extras;  // one per Epilogue::operands, same order
};

// `tensors` with packed defaults filled in; UserError when a leading dimension is
// smaller than its row or the extras do not match the epilogue.
Tensors resolve(const Problem& problem, Tensors tensors);

// The alignment class of these tensors: A and B pointers 16-byte aligned and their
// leading dimensions and batch strides multiples of 8 elements (16 bytes).
bool is_aligned(const Problem& problem, const Tensors& tensors);

// UserError, with required vs limit and a hint, when the config does not fit the
// device (shared memory, threads). Registers are checked after compilation.
void check_fits_device(const Problem& problem, const Config& config,
                       const cuda::DeviceProperties& device);

class Matmul {
 public:
  // The config comes from the tuner (the store's tuning for this problem on this
  // GPU model, else the nearest tuned problem, else the model), per alignment
  // class: each launch picks the class from its tensors (`problem.aligned` is not
  // used). Kernels compile through the runtime (its map, the store, NVRTC) on the
  // first launch of a class.
  Matmul(Runtime& runtime, Problem problem);
  // A fixed config for the problem's alignment class (`problem.aligned`): what the
  // tuner measures and tests pin. Validates, checks the device and compiles now.
  Matmul(Runtime& runtime, Problem problem, Config config);
  ~Matmul();

  // C = epilogue(alpha * op(A) * op(B) + beta * C0, extras), asynchronously on
  // `stream`. Scratch (padding, split-K partials and arrival counters) is owned by
  // this object and reused across launches; do not launch one Matmul on two streams
  // at once. Threads may share it on one stream: launches and the accessors below
  // take a lock (a launch's host side, microseconds; the first launch of an
  // alignment class compiles under it).
  void launch(const Tensors& tensors, CUstream stream);

  // The problem, config, source and ptxas report of the class used last (before
  // any launch: the aligned class, or the fixed one).
  const Problem& problem() const;
  const Config& config() const;
  const KernelSource& source() const;
  const cuda::KernelStats& stats() const;
  // Where the config came from ("store", "nearest", "model"; "given" for a fixed one).
  std::string config_source() const;
  // Where the main kernel's binary came from: "compiled" (NVRTC), "store", "memory".
  std::string kernel_origin() const;
  // How the last launch finished split-K: "none" (one split), "cluster" (a tile's
  // splits one thread-block cluster, through shared memory), "together" (the splits
  // through the workspace, each summing a slice: a cooperative launch), "last"
  // (through the workspace, the last split of each tile summing it) or "streamk"
  // (schedule=streamk: the last wave's tiles split, each summed by its last split).
  const char* split_way() const;

 private:
  struct Variant;
  Variant& variant(bool aligned);
  Variant& current();  // the class used last, else the aligned one
  void load(Variant& v);

  Runtime* runtime_;
  Problem problem_;
  bool fixed_ = false;
  // Held by launch() and the accessors: what a launch changes (variants_, last_,
  // split_way_, the scratch buffers) is host state shared by the threads.
  mutable std::mutex mutex_;
  std::unique_ptr<Variant> variants_[2];  // [aligned]
  Variant* last_ = nullptr;
  const char* split_way_ = "none";
  cuda::DeviceBuffer scratch_a_, scratch_b_, workspace_;
  // Split-K arrival counters, one per (batch, tile); zero between launches (the
  // last split of each tile sets its counter back).
  cuda::DeviceBuffer arrivals_;
};

}  // namespace kjit::matmul
