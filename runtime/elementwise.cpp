#include "kjit/runtime/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>

#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/support/log.h"
#include "kjit/tuner/elementwise_space.h"

namespace kjit {

namespace {

// The register budget a fused chain may need before it is split: ir::kRegisterBudget,
// or KJIT_REGISTER_BUDGET (a number of registers; "off" never splits), read when a
// kernel is made, for measuring what a split costs.
int register_budget() {
  const char* text = std::getenv("KJIT_REGISTER_BUDGET");
  if (text == nullptr || *text == '\0') return ir::kRegisterBudget;
  if (std::string(text) == "off") return std::numeric_limits<int>::max();
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 1 || value > 100000) {
    log_warning(
        fmt::format("KJIT_REGISTER_BUDGET='{}' is not a number of registers or 'off'; using {}",
                    text, ir::kRegisterBudget));
    return ir::kRegisterBudget;
  }
  return static_cast<int>(value);
}

}  // namespace

ElementwiseKernel::ElementwiseKernel(Runtime& runtime, const Graph& graph,
                                     std::optional<ir::ElementwiseConfig> config)
    : ElementwiseKernel(&runtime, graph, std::move(config), true) {}

ElementwiseKernel::ElementwiseKernel(const Graph& graph,
                                     std::optional<ir::ElementwiseConfig> config)
    : ElementwiseKernel(nullptr, graph, std::move(config), true) {}

ElementwiseKernel::ElementwiseKernel(Runtime* runtime, const Graph& graph,
                                     std::optional<ir::ElementwiseConfig> config, bool may_split)
    : runtime_(runtime),
      graph_(ir::optimize(graph)),
      ir_digest_(hex64(hash64(ir::print(graph_)))),
      config_(config.value_or(ir::ElementwiseConfig())),
      fixed_(config.has_value()) {
  budget_ = register_budget();
  groups_ = may_split ? ir::fuse(graph_, budget_)
                      : std::vector<ir::KernelGroup>{{graph_, ir::estimated_registers(graph_)}};
  if (groups_.size() == 1) return;
  std::set<std::string> outputs;
  for (const auto& [name, id] : graph_.outputs()) outputs.insert(name);
  for (const ir::KernelGroup& group : groups_) {
    stages_.push_back(std::unique_ptr<ElementwiseKernel>(
        new ElementwiseKernel(runtime, group.graph, config, false)));
    for (const auto& [name, id] : group.graph.outputs())
      if (!outputs.count(name)) temporaries_.push_back({name, group.graph.node(id).dtype});
  }
}

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
  return chosen_for(plan).config;
}

ElementwiseKernel::Chosen ElementwiseKernel::chosen_for(const ElementwisePlan& plan) {
  if (fixed_ || !runtime_) return Chosen{config_, "given"};
  const std::string key = fmt::format("{} n={} cols={}", plan.problem.text(), plan.n, plan.cols);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = chosen_.find(key);
    if (it != chosen_.end()) return it->second;
  }
  const tuner::Choice choice = choose_config(*runtime_, tuner::ElementwiseTuning(plan));
  std::lock_guard<std::mutex> lock(mutex_);
  return chosen_
      .emplace(key,
               Chosen{ir::ElementwiseConfig::parse(choice.config), tuner::to_string(choice.source)})
      .first->second;
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

namespace {

// What a launch's plan depends on besides the graph: each tensor's dtype, shape,
// strides, whether its pointer is null and its address modulo 16 (the alignment
// class), and the requested alignment. Launches with equal keys plan alike.
void launch_key(const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
                Alignment alignment, std::vector<int64_t>& key) {
  key.clear();
  key.push_back(static_cast<int64_t>(alignment));
  for (const std::vector<TensorArg>* list : {&inputs, &outputs}) {
    key.push_back(static_cast<int64_t>(list->size()));
    for (const TensorArg& t : *list) {
      key.push_back(static_cast<int64_t>(t.dtype));
      key.push_back(t.data == 0 ? -1 : static_cast<int64_t>(t.data % 16));
      key.push_back(static_cast<int64_t>(t.shape.size()));
      key.insert(key.end(), t.shape.begin(), t.shape.end());
      key.push_back(static_cast<int64_t>(t.strides.size()));
      key.insert(key.end(), t.strides.begin(), t.strides.end());
    }
  }
}

}  // namespace

std::shared_ptr<const ElementwiseKernel::Prepared> ElementwiseKernel::prepare(
    const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
    Alignment alignment, std::vector<int64_t> key, bool* compiled_now) {
  const ElementwisePlan p = plan(inputs, outputs, alignment);
  auto out = std::make_shared<Prepared>();
  out->key = std::move(key);
  const Chosen chosen = chosen_for(p);
  out->config = chosen.config;
  out->config_source = chosen.source;
  out->kernel = compiled(p, out->config, compiled_now);
  const int V = ir::effective_vector_width(p.problem, out->config);
  // grid=waves: every SM gets per_sm blocks (auto: 2048 vectors in flight, at most
  // the resident limit), fewer when there is less work; grid=tiles: one block per tile;
  // grid=rows: one per column strip and group of rows.
  const ir::GridDims grid = ir::grid_dims(out->config, p.n, p.cols, V, runtime_->device().sm_count,
                                          out->kernel->blocks_per_sm);
  out->blocks = static_cast<unsigned>(grid.x);
  out->blocks_y = static_cast<unsigned>(grid.y);
  out->n = p.n;
  out->cols = p.cols;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (p.problem.access[i] != ir::Access::Strided) continue;
    out->strides.push_back(p.strides[i].first);
    out->strides.push_back(p.strides[i].second);
  }
  return out;
}

void ElementwiseKernel::launch(const std::vector<TensorArg>& inputs,
                               const std::vector<TensorArg>& outputs, CUstream stream,
                               Alignment alignment) {
  if (!runtime_)
    throw UserError(
        "this ElementwiseKernel was made without a Runtime; it can plan and emit "
        "source but not launch",
        "construct it as ElementwiseKernel(runtime, graph)");
  check_outputs_apart(graph_, inputs, outputs);
  if (split()) return launch_split(inputs, outputs, stream, alignment);
  thread_local std::vector<int64_t> key;
  launch_key(inputs, outputs, alignment, key);
  std::shared_ptr<const Prepared> prepared;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (prepared_ && prepared_->key == key) {
      prepared = prepared_;
      last_compiled_now_ = false;
    }
  }
  if (!prepared) {
    bool compiled_now = false;
    prepared = prepare(inputs, outputs, alignment, key, &compiled_now);
    std::lock_guard<std::mutex> lock(mutex_);
    prepared_ = prepared;
    last_compiled_now_ = compiled_now;
  }
  if (prepared->n == 0) return;
  // The kernel's parameters: input pointers, output pointers, n, cols, then
  // {stride0, stride1} per strided input.
  thread_local std::vector<CUdeviceptr> pointers;
  thread_local std::vector<void*> args;
  pointers.clear();
  args.clear();
  for (const TensorArg& t : inputs) pointers.push_back(t.data);
  for (const TensorArg& t : outputs) pointers.push_back(t.data);
  for (CUdeviceptr& ptr : pointers) args.push_back(&ptr);
  long long n = prepared->n, cols = prepared->cols;
  args.push_back(&n);
  args.push_back(&cols);
  for (const long long& s : prepared->strides) args.push_back(const_cast<long long*>(&s));
  prepared->kernel->kernel->launch({prepared->blocks, prepared->blocks_y, 1}, args.data(), stream);
}

std::vector<ElementwiseKernel::StageArguments> ElementwiseKernel::stage_arguments(
    const std::vector<TensorArg>& inputs, const std::vector<TensorArg>& outputs,
    const std::vector<uint64_t>& addresses) const {
  if (addresses.size() != temporaries_.size())
    throw InternalError("stage_arguments: one address per temporary");
  std::map<std::string, TensorArg> named;
  const std::vector<int> ids = graph_.inputs();
  for (size_t i = 0; i < ids.size() && i < inputs.size(); ++i)
    named[graph_.node(ids[i]).name] = inputs[i];
  for (size_t k = 0; k < graph_.outputs().size() && k < outputs.size(); ++k)
    named[graph_.outputs()[k].first] = outputs[k];
  const std::vector<int64_t> shape = outputs.empty() ? std::vector<int64_t>{} : outputs[0].shape;
  for (size_t t = 0; t < temporaries_.size(); ++t)
    named[temporaries_[t].name] = TensorArg{addresses[t], temporaries_[t].dtype, shape, {}};
  std::vector<StageArguments> out;
  for (const auto& stage : stages_) {
    StageArguments a;
    for (int id : stage->graph().inputs())
      a.inputs.push_back(named.at(stage->graph().node(id).name));
    for (const auto& [name, id] : stage->graph().outputs()) a.outputs.push_back(named.at(name));
    out.push_back(std::move(a));
  }
  return out;
}

void ElementwiseKernel::launch_split(const std::vector<TensorArg>& inputs,
                                     const std::vector<TensorArg>& outputs, CUstream stream,
                                     Alignment alignment) {
  // The caller's tensors are checked against the whole chain first, so an error
  // names what the caller passed, not a stage's temporaries.
  const ElementwisePlan whole = plan(inputs, outputs, alignment);
  // In place is safe in one kernel (each thread reads its element before writing it),
  // not across stages: a later stage still reads the input an earlier one overwrote.
  for (const TensorArg& out : outputs)
    for (const TensorArg& in : inputs)
      if (out.data == in.data && whole.n > 0)
        throw UserError(fmt::format("this chain runs as {} kernels (over the register budget), "
                                    "and an output is written over an input at 0x{:x} that a "
                                    "later kernel still reads",
                                    stages_.size(), in.data),
                        "write the outputs apart from the inputs");
  std::vector<cuda::StreamBuffer> buffers;
  std::vector<uint64_t> addresses;
  for (const Temporary& t : temporaries_) {
    const int64_t bytes = checked_size({std::max<int64_t>(whole.n, 1)}, ir::size_bytes(t.dtype),
                                       "a temporary of the split chain");
    buffers.emplace_back(static_cast<size_t>(bytes), stream);
    addresses.push_back(buffers.back().get());
  }
  const std::vector<StageArguments> arguments = stage_arguments(inputs, outputs, addresses);
  LaunchInfo info;
  for (size_t i = 0; i < stages_.size(); ++i) {
    stages_[i]->launch(arguments[i].inputs, arguments[i].outputs, stream, alignment);
    const LaunchInfo stage = stages_[i]->last_launch();
    const std::string sep = i == 0 ? "" : " + ";
    info.kernel_name += sep + stage.kernel_name;
    info.source += (i == 0 ? "" : "\n") + stage.source;
    info.key += sep + stage.key;
    info.config += (i == 0 ? "" : "; ") + stage.config;
    info.config_source += (i == 0 ? "" : "; ") + stage.config_source;
    info.origin += (i == 0 ? "" : ", ") + stage.origin;
    info.grid_blocks = stage.grid_blocks;
    info.block_threads = stage.block_threads;
    info.blocks_per_sm = stage.blocks_per_sm;
    info.registers = std::max(info.registers, stage.registers);
    info.compiled_now = info.compiled_now || stage.compiled_now;
    info.compile_ms += stage.compile_ms;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  last_split_ = std::move(info);
}

std::string ElementwiseKernel::split_note() const {
  if (!split()) {
    const int registers = ir::estimated_registers(graph_);
    if (registers <= budget_) return "";
    // Over the budget, but fuse() kept one kernel: say why.
    const ir::SplitTraffic t = ir::split_traffic(graph_, ir::split(graph_, budget_));
    if (t.temporaries == 0) return "";
    return fmt::format(
        "// kjit kept this chain in one kernel although it may need ~{} registers per thread\n"
        "// (over the budget of {}; ptxas spills what does not fit to local memory): cut\n"
        "// where the budget allows, {} bytes per element would go through temporaries,\n"
        "// more than {} times the {} bytes the chain itself reads and writes.\n",
        registers, budget_, t.temporaries, ir::kSplitTrafficLimit, t.own);
  }
  std::string s = fmt::format(
      "// kjit split this chain into {} kernels. Fused into one, it would need ~{} registers\n"
      "// per thread at its smallest config (every input loaded up front, every value kept\n"
      "// until its last use), over the budget of {}: near the 255 a thread can have,\n"
      "// past which ptxas spills to local memory. Values that cross a cut are written to\n"
      "// temporaries with the output's shape (16-bit floats as f32, so the result is what\n"
      "// the fused kernel computes) and read by the next kernel:\n",
      stages_.size(), ir::estimated_registers(graph_), budget_);
  // "a, b, c", or "x0, x1, x2, ..., x127 (128)" for long lists.
  auto listed = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names.size() > 8 && i == 3) {
        out += ", ...";
        i = names.size() - 2;
      }
      out += (out.empty() ? "" : ", ") + names[i];
    }
    return names.size() > 8 ? fmt::format("{} ({})", out, names.size()) : out;
  };
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Graph& g = groups_[i].graph;
    std::vector<std::string> inputs, outputs;
    for (int id : g.inputs()) inputs.push_back(g.node(id).name);
    for (const auto& [name, id] : g.outputs()) outputs.push_back(name);
    const std::string reads = listed(inputs), writes = listed(outputs);
    s += fmt::format("//   kernel {}: ~{} registers; reads {}; writes {}\n", i + 1,
                     groups_[i].registers, reads, writes);
  }
  return s;
}

ElementwiseKernel::LaunchInfo ElementwiseKernel::last_launch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (split()) return last_split_;
  if (!prepared_) return {};
  const Prepared& p = *prepared_;
  const CompiledKernel& kernel = *p.kernel->kernel;
  const KernelSource& source = kernel.source();
  return LaunchInfo{source.name,
                    source.source,
                    kernel.key(),
                    p.config.text(),
                    p.config_source,
                    static_cast<unsigned>(std::min<uint64_t>(uint64_t{p.blocks} * p.blocks_y,
                                                             std::numeric_limits<unsigned>::max())),
                    source.block_threads,
                    ir::grid_blocks_per_sm(p.config, p.kernel->blocks_per_sm),
                    kernel.stats().registers,
                    last_compiled_now_,
                    to_string(kernel.origin()),
                    kernel.compile_ms()};
}

}  // namespace kjit
