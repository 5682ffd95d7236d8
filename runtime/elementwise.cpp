#include "kjit/runtime/elementwise.h"

#include <fmt/format.h>

#include <algorithm>

#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/tuner/elementwise_space.h"

namespace kjit {

ElementwiseKernel::ElementwiseKernel(Runtime& runtime, const Graph& graph,
                                     std::optional<ir::ElementwiseConfig> config)
    : runtime_(&runtime),
      graph_(ir::optimize(graph)),
      ir_digest_(hex64(hash64(ir::print(graph_)))),
      config_(config.value_or(ir::ElementwiseConfig())),
      fixed_(config.has_value()) {}

ElementwiseKernel::ElementwiseKernel(const Graph& graph,
                                     std::optional<ir::ElementwiseConfig> config)
    : graph_(ir::optimize(graph)),
      ir_digest_(hex64(hash64(ir::print(graph_)))),
      config_(config.value_or(ir::ElementwiseConfig())),
      fixed_(config.has_value()) {}

ElementwisePlan ElementwiseKernel::plan(const std::vector<TensorArg>& inputs,
                                        const std::vector<TensorArg>& outputs,
                                        Alignment alignment) const {
  return ir::plan_elementwise(graph_, ir_digest_, config_, inputs, outputs, alignment);
}

KernelSource ElementwiseKernel::source(const ElementwisePlan& plan) const {
  return ir::lower_elementwise(plan.problem, config_);
}

KernelSource ElementwiseKernel::source(const ElementwisePlan& plan,
                                       const ir::ElementwiseConfig& config) const {
  return ir::lower_elementwise(plan.problem, config);
}

ir::ElementwiseConfig ElementwiseKernel::config_for(const ElementwisePlan& plan) {
  if (fixed_) return config_;
  const std::string key = fmt::format("{} n={} cols={}", plan.problem.text(), plan.n, plan.cols);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = chosen_.find(key);
    if (it != chosen_.end()) return it->second.config;
  }
  if (!runtime_) return config_;
  const tuner::Choice choice = choose_config(*runtime_, tuner::ElementwiseTuning(plan));
  std::lock_guard<std::mutex> lock(mutex_);
  return chosen_
      .emplace(key,
               Chosen{ir::ElementwiseConfig::parse(choice.config), tuner::to_string(choice.source)})
      .first->second.config;
}

std::shared_ptr<const ElementwiseKernel::Compiled> ElementwiseKernel::compiled(
    const ElementwisePlan& plan, const ir::ElementwiseConfig& config, bool* compiled_now) {
  const std::string key = plan.problem.text() + " " + config.source_text();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *compiled_now = false;
      return it->second;
    }
  }
  if (!runtime_)
    throw UserError(
        "this ElementwiseKernel was made without a Runtime; it can plan and emit "
        "source but not launch",
        "construct it as ElementwiseKernel(runtime, graph)");
  auto result = std::make_shared<Compiled>();
  result->kernel = runtime_->compile(source(plan, config));
  result->blocks_per_sm =
      std::max(1, result->kernel->function().max_active_blocks_per_sm(config.block_threads, 0));
  *compiled_now = true;
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.emplace(key, std::move(result)).first->second;
}

void ElementwiseKernel::launch(const std::vector<TensorArg>& inputs,
                               const std::vector<TensorArg>& outputs, CUstream stream,
                               Alignment alignment) {
  if (!runtime_)
    throw UserError(
        "this ElementwiseKernel was made without a Runtime; it can plan and emit "
        "source but not launch",
        "construct it as ElementwiseKernel(runtime, graph)");
  ElementwisePlan p = plan(inputs, outputs, alignment);
  const ir::ElementwiseConfig config = config_for(p);
  bool compiled_now = false;
  std::shared_ptr<const Compiled> kernel = compiled(p, config, &compiled_now);
  const int V = ir::effective_vector_width(p.problem, config);
  const int64_t vectors = p.n / V;
  const KernelSource& source = kernel->kernel->source();
  // grid=waves: every SM gets per_sm blocks (auto: 2048 vectors in flight, at most
  // the resident limit), fewer when there is less work; grid=tiles: one block per tile.
  const int64_t blocks =
      ir::grid_blocks(config, vectors, runtime_->device().sm_count, kernel->blocks_per_sm);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string config_source = "given";
    if (!fixed_) {
      auto it = chosen_.find(fmt::format("{} n={} cols={}", p.problem.text(), p.n, p.cols));
      if (it != chosen_.end()) config_source = it->second.source;
    }
    last_ = LaunchInfo{source.name,
                       source.source,
                       kernel->kernel->key(),
                       config.text(),
                       config_source,
                       static_cast<unsigned>(blocks),
                       source.block_threads,
                       ir::grid_blocks_per_sm(config, kernel->blocks_per_sm),
                       kernel->kernel->stats().registers,
                       compiled_now,
                       to_string(kernel->kernel->origin()),
                       kernel->kernel->compile_ms()};
  }
  if (p.n == 0) return;
  std::vector<CUdeviceptr> pointers;
  for (const TensorArg& t : inputs) pointers.push_back(t.data);
  for (const TensorArg& t : outputs) pointers.push_back(t.data);
  std::vector<void*> args;
  for (CUdeviceptr& ptr : pointers) args.push_back(&ptr);
  long long n = p.n, cols = p.cols;
  args.push_back(&n);
  args.push_back(&cols);
  std::vector<long long> strides;
  strides.reserve(2 * inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (p.problem.access[i] != ir::Access::Strided) continue;
    strides.push_back(p.strides[i].first);
    strides.push_back(p.strides[i].second);
  }
  for (long long& s : strides) args.push_back(&s);
  kernel->kernel->launch({static_cast<unsigned>(blocks), 1, 1}, args.data(), stream);
}

ElementwiseKernel::LaunchInfo ElementwiseKernel::last_launch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_;
}

}  // namespace kjit
