// Host-side helpers to check attention against an fp64 reference: random Q, K, V
// rounded to their dtype (the reference sees exactly what the GPU sees), the
// reference for sampled rows (O and the log-sum-exp), and the comparison. Used by
// the GPU tests and `kjit run|bench attention`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/compiler/lowering/attention_modifier.h"
#include "kjit/runtime/attention.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/matmul_check.h"

namespace kjit::attention {

// The matmul checker's dtype for an attention dtype (bf16 or f16).
matmul::DType host_dtype(const Problem& problem);

// Q, K, V packed BSHD ([batch, seq, heads, D]; [tokens, heads, D] for a packed
// variable-length problem), values rounded to the dtype.
// One operand of the problem's modifiers (Problem::modifier_operands() order): its
// values, rounded to its dtype, and the bytes to upload.
struct HostOperand {
  ModifierOperand operand;
  std::vector<double> values;  // [heads], [seq_q] or [seq_k]
  std::vector<unsigned char> bytes;
};
struct HostAttention {
  Problem problem;
  matmul::HostTensor q, k, v;
  std::vector<HostOperand> operands;
};
// Uniform random values in [-spread, spread): larger spreads give peakier softmaxes.
// Modifier operands: floating ones uniform in [0, 1), i32 ones in [0, max(seq_q,
// seq_k)] (a position, for masks that compare with one).
HostAttention make_host_attention(const Problem& problem, uint64_t seed, float spread = 1.0f);
// The modifier operands on the device, in order, and their pointers for
// Tensors::modifier_operands.
struct DeviceOperands {
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<CUdeviceptr> pointers() const;
};
DeviceOperands upload_operands(const HostAttention& host);

// The fp64 twins of the problem's modifiers at one score: what the kernels compute
// with the fused functions. `s` is the scaled score, scale · q·k.
class HostModifiers {
 public:
  explicit HostModifiers(const HostAttention& host);
  bool keeps(int64_t head, int64_t q_idx, int64_t kv_idx) const;  // the mask modifier
  double score(int64_t head, int64_t q_idx, int64_t kv_idx, double s) const;
  double slope(int64_t head, int64_t q_idx, int64_t kv_idx, double s) const;  // d score / ds

 private:
  ScorePoint point(int64_t head, int64_t q_idx, int64_t kv_idx, double s, size_t first,
                   size_t count) const;
  const HostAttention* host_;
  std::shared_ptr<const Modifier> score_, mask_;
};

// One output row to check: query `row` of (batch, head).
struct Sample {
  int64_t batch = 0, head = 0, row = 0;
};
// Every row when the reference is cheap, else a spread (first and last rows, tile
// edges, random rows of random heads) keeping it under ~1e8 multiply-adds.
std::vector<Sample> samples_to_check(const Problem& problem, uint64_t seed);

// The fp64 reference of one row: O (D values, before rounding) and LSE (natural
// log; -inf when every key is masked, O then 0).
void reference_row(const HostAttention& host, const Sample& sample, double* o, double* lse);

struct AttentionCheck {
  double relative_l2 = 0;    // over O's sampled rows
  double lse_max_error = 0;  // |lse - reference|, rows with a finite reference
  int64_t rows = 0;
  int64_t nan_count = 0;
  bool lse_bad = false;   // an infinite reference LSE not matched, or a NaN LSE
  std::string first_bad;  // "batch 0 head 3 row 17 d 5: 0.12 vs 0.31", or empty
  bool ok(double tolerance) const {
    return relative_l2 <= tolerance && nan_count == 0 && !lse_bad && lse_max_error <= 1e-3;
  }
  std::string describe() const;
};

// Compares O (downloaded, as doubles, laid out by `o_strides`, resolved) and LSE
// (f32 [batch, heads, seq_q], or [heads, total_q] packed; empty: not checked) with
// the reference on `samples`.
AttentionCheck check_attention(const HostAttention& host, const std::vector<double>& o,
                               const Strides& o_strides, const std::vector<float>& lse,
                               const std::vector<Sample>& samples);

// The relative L2 error O may have: 1e-2 (bf16/f16 inputs, P rounded to 16 bits).
double check_tolerance(const Problem& problem);

// ---- the backward pass ----

// dQ, dK and dV in fp64 for every row of one (batch, K/V head): its keys' dK and dV
// (summed over the query heads sharing it) and dQ of those query heads' rows, from
// the exact P, dP = dO Vᵀ and D = rowsum(P ∘ dP). `d_o` is laid out like Q.
struct GradientReference {
  int64_t batch = 0, kv_head = 0;
  std::vector<double> dq;      // [group heads][seq_q][D], the group's heads in order
  std::vector<double> dk, dv;  // [seq_k][D]
};
GradientReference reference_gradients(const HostAttention& host, const matmul::HostTensor& d_o,
                                      int64_t batch, int64_t kv_head);

// Which (batch, K/V head) groups to check: the first and the last, then random ones,
// keeping the reference under ~2e9 multiply-adds (at least one group).
std::vector<std::pair<int64_t, int64_t>> gradient_groups_to_check(const Problem& problem,
                                                                  uint64_t seed);

struct BackwardCheck {
  double dq_relative_l2 = 0, dk_relative_l2 = 0, dv_relative_l2 = 0;
  int64_t groups = 0, nan_count = 0;
  std::string first_bad;  // "dK batch 0 kv head 1 key 17 d 5: 0.12 vs 0.31", or empty
  double worst() const { return std::max({dq_relative_l2, dk_relative_l2, dv_relative_l2}); }
  bool ok(double tolerance) const { return worst() <= tolerance && nan_count == 0; }
  std::string describe() const;
};

// Compares dQ, dK, dV (downloaded as doubles, laid out by their resolved strides)
// with the reference on `groups`.
BackwardCheck check_backward(const HostAttention& host, const matmul::HostTensor& d_o,
                             const std::vector<double>& dq, const std::vector<double>& dk,
                             const std::vector<double>& dv, const BackwardTensors& strides,
                             const std::vector<std::pair<int64_t, int64_t>>& groups);

// The relative L2 error the gradients may have: 2e-2 (16-bit inputs; P and dS are
// rounded to 16 bits as operands of the next product).
double backward_tolerance(const Problem& problem);

}  // namespace kjit::attention
