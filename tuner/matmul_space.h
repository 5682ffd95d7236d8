// The matmul family for the tuner: its space (engines, tiles, warps, stages,
// split-K, rasterization, load mode), the constraints that prune it, and its
// performance model. docs/tuner.md explains the model's terms.
#pragma once

#include <memory>
#include <string>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner {

class MatmulTuning : public TuningProblem {
 public:
  // `epilogue_ir`: the epilogue's IR text when the problem has one written in the
  // IR (what the spec keeps; empty for none or a hand-written one).
  explicit MatmulTuning(matmul::Problem problem, std::string epilogue_ir = "");

  const matmul::Problem& problem() const { return problem_; }

  std::string family() const override { return "matmul"; }
  std::string signature() const override { return problem_.to_string(); }
  std::string problem_class() const override { return problem_.kernel_class(); }
  std::vector<double> sizes() const override;
  nlohmann::json spec() const override;
  Space space(const cuda::DeviceProperties& device) const override;
  Prediction predict(const std::string& config, const cuda::DeviceProperties& device,
                     const Efficiencies& efficiencies,
                     const KernelResources* resources = nullptr) const override;
  std::string canonical(const std::string& config) const override;
  std::vector<KernelSource> sources(const std::string& config) const override;
  Work work() const override;
  // The config with pitch=line the other way (the same kernel; wgmma configs only).
  std::vector<std::string> run_time_twins(const std::string& config) const override;

  // The same for a parsed config.
  Prediction predict(const matmul::Config& config, const cuda::DeviceProperties& device,
                     const Efficiencies& efficiencies, const KernelResources* resources) const;

 private:
  matmul::Problem problem_;
  std::string epilogue_ir_;
};

// The problem a matmul spec describes: {"family": "matmul", "m", "n", "k", "batch",
// "layout", "dtype", "out", "epilogue", "align"} (batch 1, layout nn, dtype bf16,
// out = dtype (f32 for tf32), no epilogue, align from packed leading dimensions by
// default). UserError naming the field otherwise.
std::unique_ptr<MatmulTuning> matmul_from_spec(const nlohmann::json& spec);
// What the model needs, from a signature (Problem::to_string()); nullptr if it is
// not one.
std::unique_ptr<MatmulTuning> matmul_from_signature(const std::string& signature);

// Whether A and B, packed (leading dimension = stored row length), are in the
// aligned class: their rows are whole 16-byte chunks.
bool packed_operands_aligned(const matmul::Problem& problem);

// The efficiency key of a config, e.g. "matmul:wgmma:128x256:s4" (+ ":splitk"), and its
// prior: the
// fraction of the device's tensor (or SIMT) peak a block of this shape reaches on
// the H200, measured (docs/tuner.md). Fitted values replace it per GPU model.
std::string matmul_efficiency_key(const matmul::Problem& problem, const matmul::Config& config);
double matmul_efficiency_prior(const matmul::Problem& problem, const matmul::Config& config);

}  // namespace kjit::tuner
