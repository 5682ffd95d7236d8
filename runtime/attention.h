// The attention family's kernel: a Problem on a Runtime, its config from the
// tuner (tuner/attention_space.h), compiled through Runtime::compile, launched on
// the caller's stream.
//
//   kjit::Runtime runtime;
//   attention::Problem p{.batch = 4, .heads = 16, .kv_heads = 4, .seq_q = 2048,
//                        .seq_k = 2048, .head_dim = 128, .causal = true};
//   attention::Attention attn(runtime, p);
//   attn.launch({.q = q, .k = k, .v = v, .o = o, .lse = lse}, stream);  // packed BSHD
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/runtime.h"

namespace kjit::attention {

// One call's device pointers and strides, in elements. The head dimension is
// contiguous; a stride of 0 means "packed BSHD": head stride D, sequence stride
// heads x D (kv_heads x D for K and V), batch stride seq x heads x D. For BHSD
// tensors pass head = seq x D, seq = D, batch = heads x seq x D. Packed
// variable-length problems take [tokens, heads, D] tensors: no batch stride. Packed
// variable-length problems take [tokens, heads, D] tensors: no batch stride.
struct Strides {
  int64_t batch = 0, seq = 0, head = 0;
};
struct Tensors {
  CUdeviceptr q = 0, k = 0, v = 0;  // inputs, the problem's dtype
  CUdeviceptr o = 0;                // output, the problem's dtype
  CUdeviceptr lse = 0;  // f32 [batch, heads, seq_q] ([heads, total_q] packed), natural log;
                        // 0: not written
  Strides q_strides, k_strides, v_strides, o_strides;
};

// `tensors` with packed defaults filled in, for a validated `problem` (Attention
// validates its problem once, when it is made; each launch only checks tensors). UserError when a
// pointer is missing, a pointer or stride breaks 16-byte alignment (the kernel loads 16-byte
// chunks), a stride is negative, or a packed problem's tensors have a batch stride.
Tensors resolve(const Problem& problem, Tensors tensors);

// UserError, with required vs limit, when the config does not fit the device
// (shared memory, threads, architecture: mma.sync needs sm_80).
void check_fits_device(const Problem& problem, const Config& config,
                       const cuda::DeviceProperties& device);

class Attention {
 public:
  // The config comes from the tuner (the store's tuning for this problem on this
  // GPU model, else the nearest tuned problem, else the model). Compiles now.
  Attention(Runtime& runtime, Problem problem);
  // A fixed config: what tests and the benchmark pin. Validates, checks the
  // device and compiles now.
  Attention(Runtime& runtime, Problem problem, Config config);

  // O and LSE, asynchronously on `stream`.
  void launch(const Tensors& tensors, CUstream stream);

  const Problem& problem() const { return problem_; }
  const Config& config() const { return config_; }
  const KernelSource& source() const { return source_; }
  const cuda::KernelStats& stats() const { return kernel_->stats(); }
  // Where the config came from ("store", "nearest", "model"; "given" for a fixed one).
  const std::string& config_source() const { return config_source_; }
  // Where the binary came from: "compiled" (NVRTC), "store", "memory".
  std::string kernel_origin() const;

 private:
  void load();

  Runtime* runtime_;
  Problem problem_;
  Config config_;
  std::string config_source_;
  KernelSource source_;
  std::shared_ptr<const CompiledKernel> kernel_;
  cuda::DeviceBuffer offsets_;  // packed problems: cu_seqlens_q then cu_seqlens_k, int32
};

}  // namespace kjit::attention
