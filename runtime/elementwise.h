// The embedding API for elementwise chains: an ElementwiseKernel holds an
// optimized graph and launches it on the caller's stream with the caller's device
// pointers. Everything is checked before anything runs: counts, dtypes, shapes,
// null and misaligned pointers give a UserError.
//
//   kjit::Runtime runtime;                     // device 0
//   kjit::Graph g = kjit::ir::parse("y = x * sigmoid(x) * g", {kjit::DType::BF16});
//   kjit::ElementwiseKernel kernel(runtime, g);
//   kernel.launch({{x_ptr, DType::BF16, {n}}, {g_ptr, DType::BF16, {n}}},
//                 {{y_ptr, DType::BF16, {n}}}, stream);
//
// The kernel is specialized on each input's access pattern (full, scalar, row,
// column, strided) and on the alignment class, chosen from the actual pointers and
// sizes at launch (or forced). Each specialization is compiled once through the
// Runtime (its in-process map, then the binary store, then NVRTC) and kept; the
// generated source is available.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/lowering/elementwise_plan.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/runtime.h"

namespace kjit {

class ElementwiseKernel {
 public:
  // Verifies and optimizes `graph` (KJIT_DUMP=passes shows each pass). Launches
  // compile through `runtime` and run on its device; the runtime must outlive the
  // kernel, and its context be current on the launching thread. Without `config`,
  // each launch's problem (access patterns, alignment class, sizes) gets its config
  // from the tuner: the store's tuning, the nearest tuned problem, or the model.
  ElementwiseKernel(Runtime& runtime, const Graph& graph,
                    std::optional<ir::ElementwiseConfig> config = std::nullopt);
  // Without a runtime: plan() and source() only (no GPU needed); launch() refuses.
  explicit ElementwiseKernel(const Graph& graph,
                             std::optional<ir::ElementwiseConfig> config = std::nullopt);

  const Graph& graph() const { return graph_; }
  // The fixed config, or the default one (what plan() and source() use when no
  // config was given; launches take the tuner's).
  const ir::ElementwiseConfig& config() const { return config_; }

  // Checks the arguments and picks the specialization; a UserError says what is
  // wrong before anything runs. Needs no GPU.
  ElementwisePlan plan(const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
                       Alignment alignment = Alignment::Auto) const;
  // The CUDA source for a plan (with config(), or `config` when given).
  KernelSource source(const ElementwisePlan& plan) const;
  KernelSource source(const ElementwisePlan& plan, const ir::ElementwiseConfig& config) const;
  // The config a launch with this plan uses: the fixed one, or the tuner's choice.
  ir::ElementwiseConfig config_for(const ElementwisePlan& plan);

  // Checks, compiles on first use, and launches asynchronously on `stream`.
  void launch(const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
              CUstream stream = nullptr, Alignment alignment = Alignment::Auto);

  // What the last launch used: its source, grid, and whether it was a new
  // specialization for this kernel object (then `origin` says where the runtime got it).
  struct LaunchInfo {
    std::string kernel_name;
    std::string source;
    std::string key;  // the runtime's binary key
    std::string config;
    std::string config_source;  // "given", or where the tuner found it: store, nearest, model
    unsigned grid_blocks = 0;
    int block_threads = 0;
    int blocks_per_sm = 0;  // what the grid was sized for: config per_sm (auto), <= resident
    int registers = 0;
    bool compiled_now = false;
    std::string origin;  // "compiled", "memory", "store" (see KernelOrigin)
    double compile_ms = 0;
  };
  LaunchInfo last_launch() const;

 private:
  struct Compiled {
    std::shared_ptr<const CompiledKernel> kernel;
    int blocks_per_sm = 0;  // resident (the occupancy limit)
  };
  std::shared_ptr<const Compiled> compiled(const ElementwisePlan& plan,
                                           const ir::ElementwiseConfig& config, bool* compiled_now);

  Runtime* runtime_ = nullptr;
  Graph graph_;
  std::string ir_digest_;  // of the optimized graph, for problem texts
  ir::ElementwiseConfig config_;
  bool fixed_ = false;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Compiled>> cache_;  // by problem + config source
  struct Chosen {
    ir::ElementwiseConfig config;
    std::string source;  // where it came from
  };
  std::map<std::string, Chosen> chosen_;  // by problem text and sizes
  LaunchInfo last_;
};

}  // namespace kjit
