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
//
// A chain that would need more registers than one kernel should hold (many inputs,
// many live values) is split into several kernels (compiler/passes/fuse.h): launch()
// then runs them in order on the stream, passing the values that cross a cut
// through temporaries allocated on that stream.
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
#include "kjit/compiler/passes/fuse.h"
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

  // Checks, compiles on first use, and launches asynchronously on `stream`. A launch
  // like the one before it (same dtypes, shapes, strides and alignment class) reuses
  // that launch's plan, config and kernel: only the pointers change.
  void launch(const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
              CUstream stream = nullptr, Alignment alignment = Alignment::Auto);

  // ---- a chain split into several kernels (over the register budget)
  // The kernel groups of the graph: one, or several when it was split.
  const std::vector<ir::KernelGroup>& groups() const { return groups_; }
  bool split() const { return !stages_.empty(); }
  // The kernel of group i of a split chain (an ElementwiseKernel of its own).
  ElementwiseKernel& stage(size_t i) { return *stages_.at(i); }
  const ElementwiseKernel& stage(size_t i) const { return *stages_.at(i); }
  // A value crossing a cut: written by one stage, read by later ones, stored with
  // the output's shape in `dtype`.
  struct Temporary {
    std::string name;
    DType dtype = DType::F32;
  };
  const std::vector<Temporary>& temporaries() const { return temporaries_; }
  // Why and how the chain was split, as comment lines ("// ..."), for the top of
  // the emitted source; for a chain over the budget kept whole, why it was not;
  // empty otherwise.
  std::string split_note() const;
  // Each stage's tensors for a launch with the caller's `inputs` and `outputs`, the
  // temporaries at `addresses` (one per temporaries() entry, in that order).
  struct StageArguments {
    std::vector<TensorArg> inputs, outputs;
  };
  std::vector<StageArguments> stage_arguments(const std::vector<TensorArg>& inputs,
                                              const std::vector<TensorArg>& outputs,
                                              const std::vector<uint64_t>& addresses) const;

  // What the last launch used: its source, grid, and whether it was a new
  // specialization for this kernel object (then `origin` says where the runtime got it).
  struct LaunchInfo {
    std::string kernel_name;
    std::string source;
    std::string key;  // the runtime's binary key
    std::string config;
    std::string config_source;  // "given", or where the tuner found it: store, nearest, model
    unsigned grid_blocks = 0;   // all of the grid's blocks (x times y)
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
  // Everything a launch needs besides the pointers, for launches like the last one.
  struct Prepared {
    std::vector<int64_t> key;  // launch_key() of the launch it was made for
    std::shared_ptr<const Compiled> kernel;
    ir::ElementwiseConfig config;
    std::string config_source;
    unsigned blocks = 0;    // the grid's x
    unsigned blocks_y = 1;  // and y (grid=rows)
    long long n = 0, cols = 1;
    std::vector<long long> strides;  // {stride0, stride1} per strided input
  };
  std::shared_ptr<const Prepared> prepare(const std::vector<TensorArg>& inputs,
                                          const std::vector<TensorArg>& outputs,
                                          Alignment alignment, std::vector<int64_t> key,
                                          bool* compiled_now);
  void launch_split(const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
                    CUstream stream, Alignment alignment);
  ElementwiseKernel(Runtime* runtime, const Graph& optimized,
                    std::optional<ir::ElementwiseConfig> config, bool may_split);

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
  // The config for a plan and where it came from ("given" for a fixed config).
  Chosen chosen_for(const ElementwisePlan& plan);
  std::shared_ptr<const Prepared> prepared_;  // the last launch's
  bool last_compiled_now_ = false;
  LaunchInfo last_split_;  // a split chain's last launch (its stages' names, the last grid)
  int budget_ = ir::kRegisterBudget;  // registers before a split (KJIT_REGISTER_BUDGET)
  std::vector<ir::KernelGroup> groups_;
  std::vector<std::unique_ptr<ElementwiseKernel>> stages_;  // a split chain's kernels
  std::vector<Temporary> temporaries_;
};

}  // namespace kjit
