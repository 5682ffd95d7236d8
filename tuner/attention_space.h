// The attention family's configs (compiler/lowering/attention.h): the space the
// tuner may search, and the config it picks before anything is measured.
//
//   for (const attention::Config& c : attention_space(problem, device)) ...
//   attention::Config c = attention_default(problem, device);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner {

// bm in {64, 128} x bn in {32, 64, 128} x stages in {2, 3} x warp_rows in {16, 32},
// without the configs that cannot run well: over the device's shared memory
// (opt-in limit), or whose per-thread state (per 16 rows of a warp: the O
// accumulators, head_dim / 2 floats, plus the scores, bn / 2) leaves too few of the
// 255 registers (those spill); then the TMA + wgmma engine (sm_90, head dims 64
// and 128): bm 128 x bn in {64, 128} x stages in {2, 3} x pingpong off and on x persistent
// blocks or not. `pruned`, when
// given, gets each config left out and why. The backward pass (problem.backward):
// mma.sync, bm and bn in {32, 64, 128} x stages in {2, 3}, within shared memory and
// registers (its dK/dV kernel holds both gradients of 16 keys per warp); then wgmma
// (sm_90, head dims 64 and 128): bm and bn in {64, 128} x stages in {2, 3} x pingpong
// off and on, and dq=atomic (bm 64, no ping-pong; not for a deterministic problem).
std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<Pruned>* pruned = nullptr);

// Before measuring: the model's best config of the space (AttentionTuning::predict
// with its prior efficiencies, measured on the H200: on sm_90 at head dims 64 and 128
// the wgmma engine with 128 keys per tile, three buffers and ping-pong; elsewhere
// mma.sync with 32 rows per warp where the registers allow, the widest key tile
// that fits, and 64-row blocks when 128-row ones would leave SMs idle).
attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device);

// The attention family as the tuner sees it (tuner/family.h): the problem, its space,
// and the model: waves of query tiles over the SMs (resident blocks from shared
// memory, registers and threads), each tile's multiply-adds at the tensor cores'
// rate times an efficiency per engine and config (priors from the H200's
// measurements, refit from trials), K and V re-read per query tile through L2.
class AttentionTuning : public TuningProblem {
 public:
  explicit AttentionTuning(attention::Problem problem);

  const attention::Problem& problem() const { return problem_; }

  std::string family() const override { return "attention"; }
  // The problem's text (Problem::to_string()); a packed batch's is its length
  // profile's (length_profile()), which it is tuned as (tuned_as()).
  std::string signature() const override;
  std::unique_ptr<TuningProblem> tuned_as() const override;
  // The kernel class and the kind of mask ("dtype=bf16,d=128,mask=causal").
  std::string problem_class() const override;
  // batch, heads, seq_q, seq_k
  std::vector<double> sizes() const override;
  int64_t prediction_cost() const override { return problem_.packed() ? problem_.batch : 1; }
  nlohmann::json spec() const override;
  Space space(const cuda::DeviceProperties& device) const override;
  Prediction predict(const std::string& config, const cuda::DeviceProperties& device,
                     const Efficiencies& efficiencies,
                     const KernelResources* resources = nullptr) const override;
  std::string canonical(const std::string& config) const override;
  std::vector<KernelSource> sources(const std::string& config) const override;
  Work work() const override;

  Prediction predict(const attention::Config& config, const cuda::DeviceProperties& device,
                     const Efficiencies& efficiencies, const KernelResources* resources) const;

 private:
  attention::Problem problem_;
  attention::Problem profile_;  // length_profile(problem_)
};

// What a packed batch is tuned as: a representative batch of its length profile.
// The sequence count, the longest query and key lengths and the mean length of the
// other sequences are each rounded up to a quarter octave (exact up to 8, then 10,
// 12, 14, 16, 20, ...: 300 -> 320, 2049 -> 2560); the representative has that many
// sequences, the longest first, the others all of the mean. A training loop whose
// packed batches differ in their lengths then shares one tuning (and one entry of
// the store) per profile instead of tuning, with KJIT_TUNE=1, every batch it meets.
// The profile of a representative is itself. Unpacked problems, and batches whose
// representative would pass 2^31 - 1 tokens, are their own profile.
attention::Problem length_profile(const attention::Problem& problem);

// The problem an attention spec describes: {"family": "attention", "batch", "heads",
// "kv_heads", "seq_q", "seq_k", "head_dim", "dtype", "causal", "window": "L:R",
// "scale", "seqlens_q": [...], "seqlens_k": [...], "backward"} (batch 1, heads 1, kv_heads =
// heads, seq_k = seq_q, head_dim 128, bf16; packed when seqlens_q is given).
// UserError naming the field otherwise.
std::unique_ptr<AttentionTuning> attention_from_spec(const nlohmann::json& spec);
// From a signature (Problem::to_string()); nullptr if it is not one (or names more
// than 2^20 packed sequences).
std::unique_ptr<AttentionTuning> attention_from_signature(const std::string& signature);

}  // namespace kjit::tuner
