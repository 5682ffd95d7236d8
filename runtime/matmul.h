// The matmul family's host side: the default config heuristic, device-limit
// checks, compilation, and launch (padding path, split-K) on a caller's stream.
//
//   matmul::Problem p{.m = 4096, .n = 4096, .k = 4096};
//   matmul::Matmul mm(p, matmul::default_config(p, device), device);
//   mm.launch({.a = a, .b = b, .c = c}, stream);   // packed row-major A, B, C
//
// The heuristic is documented in docs/matmul.md; the tuner replaces it.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiler/lowering/matmul.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/memory.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/runtime.h"

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

// The configs a tuner would search first; every one is compiled by the unit tests.
std::vector<Config> default_space(DType input);

// A simple documented heuristic (docs/matmul.md): for each candidate tile, the
// number of waves (tiles / (SMs x resident blocks)) times the per-block work over
// the tile's relative efficiency; the cheapest wins, larger tiles on ties. Then
// split-K when the tiles fill less than half a wave and K is long.
Config default_config(const Problem& problem, const cuda::DeviceProperties& device);

// UserError, with required vs limit and a hint, when the config does not fit the
// device (shared memory, threads). Registers are checked after compilation.
void check_fits_device(const Problem& problem, const Config& config,
                       const cuda::DeviceProperties& device);

// NVRTC compile of a matmul KernelSource for `arch`; no GPU needed.
cuda::CompiledProgram compile_source(const KernelSource& source, const std::string& arch);

// Compiles the kernels of these (problem, config) pairs on `threads` threads ahead
// of time (NVRTC needs no GPU); Matmul then only loads them. Rethrows the first
// compile failure.
void precompile(const std::vector<std::pair<Problem, Config>>& work, const std::string& arch,
                int threads);

class Matmul {
 public:
  // Validates, lowers, compiles (cached in-process by source and arch) and loads
  // into the current context.
  Matmul(Problem problem, Config config, const cuda::DeviceProperties& device);
  // The same through a Runtime: its in-process map and binary store (disk cache).
  Matmul(Problem problem, Config config, Runtime& runtime);

  // C = epilogue(alpha * op(A) * op(B) + beta * C0, extras), asynchronously on
  // `stream`. Scratch (padding, split-K partials) is owned by this object and
  // reused across launches; do not launch one Matmul on two streams at once.
  void launch(const Tensors& tensors, CUstream stream);

  const Problem& problem() const { return problem_; }
  const Config& config() const { return config_; }
  const KernelSource& source() const { return source_; }
  const cuda::KernelStats& stats() const { return stats_; }

 private:
  void init(const std::function<cuda::Function(const KernelSource&, cuda::KernelStats*)>& load);
  Problem problem_;
  Config config_;
  cuda::DeviceProperties device_;
  KernelSource source_;
  cuda::KernelStats stats_;
  cuda::Function main_, reduce_, pad_, stage_;
  cuda::DeviceBuffer scratch_a_, scratch_b_, workspace_;
};

}  // namespace kjit::matmul
