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
#include <utility>
#include <vector>

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
  // The score and mask modifiers' extra operands (Problem::modifier_operands(), in
  // that order): a device array of the operand's dtype each, [heads] per head,
  // [seq_q] per query position, [seq_k] per key position (positions within a sequence).
  std::vector<CUdeviceptr> modifier_operands;
};

// `tensors` with packed defaults filled in, for a validated `problem` (Attention
// validates its problem once, when it is made; each launch only checks tensors). UserError when a
// pointer is missing, a pointer or stride breaks 16-byte alignment (the kernel loads 16-byte
// chunks), a stride is negative, a packed problem's tensors have a batch stride, or the
// modifier operands are not one aligned pointer per operand.
Tensors resolve(const Problem& problem, Tensors tensors);

// UserError, with required vs limit, when the config does not fit the device
// (shared memory, threads, architecture: mma.sync needs sm_80).
void check_fits_device(const Problem& problem, const Config& config,
                       const cuda::DeviceProperties& device);

// The backward pass's tensors: the forward's inputs and outputs (O and its LSE as
// the forward pass wrote them), dO, and where dQ, dK, dV go (the problem's dtype,
// laid out like Q, K, V). Strides as in Tensors (0: packed BSHD).
struct BackwardTensors {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0;
  CUdeviceptr lse = 0;  // f32, required
  CUdeviceptr d_o = 0;
  CUdeviceptr dq = 0, dk = 0, dv = 0;
  Strides q_strides, k_strides, v_strides, o_strides;
  Strides do_strides, dq_strides, dk_strides, dv_strides;
  std::vector<CUdeviceptr> modifier_operands;  // as Tensors::modifier_operands
};
BackwardTensors resolve(const Problem& problem, BackwardTensors tensors);

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

// The backward pass: dQ, dK, dV from dO, recomputing P from the forward pass's
// LSE (templates/attention_backward.cuh). The same bits every run with
// Problem::deterministic (dQ in a kernel of its own); otherwise the config may add
// dQ with atomics (dq=atomic, the default at head dim 128), whose last bits vary.
//
//   attention::AttentionBackward grad(runtime, p);  // p as given to Attention
//   grad.launch({.q = q, .k = k, .v = v, .o = o, .lse = lse, .d_o = d_o,
//                .dq = dq, .dk = dk, .dv = dv}, stream);
//
// The object owns a workspace (8 bytes per query row and head); launches on one
// object use it in stream order, so concurrent launches on different streams need
// one object each.
class AttentionBackward {
 public:
  // The config comes from the tuner for `problem` with backward = true.
  AttentionBackward(Runtime& runtime, Problem problem);
  AttentionBackward(Runtime& runtime, Problem problem, Config config);

  void launch(const BackwardTensors& tensors, CUstream stream);

  const Problem& problem() const { return problem_; }  // backward = true
  const Config& config() const { return config_; }
  const std::string& config_source() const { return config_source_; }
  // The kernels in launch order (prep, kv [, kv], q).
  std::vector<KernelSource> sources() const;
  // The first kernel of a role ("prep", "kv", "q"): its source and ptxas statistics.
  const CompiledKernel& kernel(const std::string& role) const;
  std::string kernel_origin() const;

 private:
  void load();

  Runtime* runtime_;
  Problem problem_;
  Config config_;
  std::string config_source_;
  std::vector<std::pair<std::string, std::shared_ptr<const CompiledKernel>>> kernels_;
  cuda::DeviceBuffer offsets_;
  cuda::DeviceBuffer workspace_;  // D, then LSE · log2 e
  cuda::DeviceBuffer dq_accum_;   // dq=atomic: the f32 sums of dQ (one row of D per query row)
};

}  // namespace kjit::attention
