// The elementwise family for the tuner: its space (block size, vector width,
// unroll, prefetch, streaming stores, grid schedule: whole waves with a
// grid-stride loop or one tile per block, blocks per SM) and its model (bytes over
// bandwidth, enough loads in flight to cover DRAM latency, the arithmetic of the
// chain, and the grid's tail). docs/tuner.md explains the terms.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/lowering/elementwise_plan.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner {

class ElementwiseTuning : public TuningProblem {
 public:
  // `expression` in the IR's text form; inputs contiguous with the declared shapes,
  // symbolic dims bound by `sizes` ({"n": 268435456}); `dtype` the default dtype of
  // undeclared inputs ("" for f32). `strides` (elements, one per dim) makes an input
  // strided: read through a view whose elements are that far apart (a transposed or
  // padded tensor, every k-th element), as the runtime reads such tensors.
  ElementwiseTuning(std::string expression, std::string dtype, std::map<std::string, int64_t> sizes,
                    std::map<std::string, std::vector<int64_t>> strides = {});
  // For a planned launch of an optimized graph (the runtime's path).
  explicit ElementwiseTuning(ElementwisePlan plan);

  const ElementwisePlan& plan() const { return plan_; }
  // The shapes of the inputs and outputs the spec describes (contiguous).
  const std::vector<TensorArg>& inputs() const { return inputs_; }
  const std::vector<TensorArg>& outputs() const { return outputs_; }
  const std::string& expression() const { return expression_; }

  std::string family() const override { return "elementwise"; }
  // problem_class() + " n=.. cols=.. cost=..": the sizes and what the model needs.
  std::string signature() const override;
  std::string problem_class() const override { return class_text_; }
  std::vector<double> sizes() const override;
  nlohmann::json spec() const override;
  bool has_spec() const override { return !expression_.empty(); }
  Space space(const cuda::DeviceProperties& device) const override;
  Prediction predict(const std::string& config, const cuda::DeviceProperties& device,
                     const Efficiencies& efficiencies,
                     const KernelResources* resources = nullptr) const override;
  std::string canonical(const std::string& config) const override;
  std::vector<KernelSource> sources(const std::string& config) const override;
  Work work() const override;

  // What the model reads: sizes, each tensor's dtype and access, the arithmetic.
  struct Shape {
    int64_t n = 0, cols = 1;
    bool aligned = false;
    std::vector<std::pair<DType, ir::Access>> inputs;
    std::vector<DType> outputs;
    double cost = 0;  // elementwise_cost()
    // DRAM bytes fetched beyond the useful ones: strided inputs whose consecutive
    // elements (along a row) are more than one element apart pull a 32-byte sector
    // per element (L2 reuse across rows not counted).
    double wasted_bytes = 0;
    // Registers the chain holds besides its loaded inputs, at its busiest point
    // (ir::estimated_registers less the base and the inputs; 0 from a signature).
    int chain_registers = 0;
  };

 private:
  void derive_shape();
  friend std::unique_ptr<TuningProblem> elementwise_from_signature(const std::string&);
  ElementwiseTuning() = default;

  std::string expression_, dtype_;
  std::map<std::string, int64_t> sizes_;
  std::map<std::string, std::vector<int64_t>> strides_;
  ElementwisePlan plan_;
  bool has_plan_ = false;  // false when rebuilt from a signature (model only)
  std::vector<TensorArg> inputs_, outputs_;
  Shape shape_;
  std::string class_text_;

  bool has_strided_input() const;
};

// The spec {"family": "elementwise", "expr": "...", "dtype": "bf16", "sizes": {"n": ..}}.
std::unique_ptr<ElementwiseTuning> elementwise_from_spec(const nlohmann::json& spec);
std::unique_ptr<TuningProblem> elementwise_from_signature(const std::string& signature);

// The dims an expression's shapes name ("n", "m", ...): what a spec's sizes may
// give (one that names none is refused).
std::set<std::string> symbolic_dims(const Graph& graph);

// The chain's arithmetic per element, in FMA issue slots: 1 per simple op, 4 for a
// division or square root, 16 for a transcendental (sin, exp, tanh, erf...).
double elementwise_cost(const Graph& graph);

}  // namespace kjit::tuner
