#include "tools/cli/elementwise_support.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/passes/fuse.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/tuner/check.h"
#include "kjit/tuner/timer.h"

namespace kjit::cli {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  return tuner::relative_l2(got, want);
}

double tolerance_for(DType dtype) {
  return tuner::tolerance(tuner::precision_of(dtype));
}

namespace {

size_t tensor_bytes(const TensorArg& t) {
  return static_cast<size_t>(checked_size(t.shape, ir::size_bytes(t.dtype), "a tensor"));
}

}  // namespace

BenchResult bench_elementwise(Runtime& runtime, const Graph& graph,
                              const std::optional<ir::ElementwiseConfig>& config,
                              Alignment alignment, std::vector<TensorArg> inputs,
                              std::vector<TensorArg> outputs, int repeats) {
  const cuda::DeviceProperties& device = runtime.device();
  ElementwiseKernel fused(runtime, graph, config);
  const Graph& optimized = fused.graph();
  std::map<std::string, cuda::DeviceBuffer> buffers;
  std::map<std::string, TensorArg> tensors;
  BenchResult r;
  r.repeats = repeats;
  std::vector<int> ids = optimized.inputs();
  ir::Bindings bindings;
  for (size_t i = 0; i < ids.size(); ++i) {
    const ir::Node& n = optimized.node(ids[i]);
    NpyArray values = ir::random_input(optimized, ids[i], inputs[i].shape, 1000 + i);
    cuda::DeviceBuffer& b = buffers[n.name] =
        cuda::DeviceBuffer(std::max<size_t>(values.data.size(), 16));
    if (!values.data.empty()) b.upload(values.data.data(), values.data.size());
    inputs[i].data = b.get();
    tensors[n.name] = inputs[i];
    r.bytes += static_cast<int64_t>(tensor_bytes(inputs[i]));
    for (size_t d = 0; d < n.shape.size(); ++d) {
      if (n.shape[d].is_symbolic()) bindings[n.shape[d].symbol] = inputs[i].shape[d];
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string& name = optimized.outputs()[k].first;
    cuda::DeviceBuffer& b = buffers[name] =
        cuda::DeviceBuffer(std::max<size_t>(tensor_bytes(outputs[k]), 16));
    outputs[k].data = b.get();
    tensors[name] = outputs[k];
    r.bytes += static_cast<int64_t>(tensor_bytes(outputs[k]));
    r.n = ir::element_count(outputs[k].shape);
  }
  cuda::Stream stream;
  // The project's one timer (tuner/timer.h): warm-up, L2 flushed before every run,
  // the median of `repeats` runs.
  tuner::Timer timer(stream.get(), device.l2_bytes);
  auto time_ms = [&](const std::function<void()>& work) {
    return timer.time([&](int) { work(); }, repeats).median_ms;
  };

  r.fused_ms = time_ms([&] { fused.launch(inputs, outputs, stream.get(), alignment); });
  ElementwiseKernel::LaunchInfo info = fused.last_launch();
  r.kernel_name = info.kernel_name;
  r.config = info.config;
  r.config_source = info.config_source;
  r.grid_blocks = info.grid_blocks;
  r.block_threads = info.block_threads;
  r.problem = fused.plan(inputs, outputs, alignment).problem.text();
  r.fused_gbs = static_cast<double>(r.bytes) / (r.fused_ms * 1e-3) / 1e9;

  // A copy that reads and writes as many bytes as the kernel moves in total.
  size_t half = static_cast<size_t>((r.bytes / 2 + 15) / 16 * 16);
  {
    cuda::DeviceBuffer src(half), dst(half);
    src.fill_bytes(1);
    r.copy_ms =
        time_ms([&] { KJIT_CU(cuMemcpyDtoDAsync, dst.get(), src.get(), half, stream.get()); });
    r.copy_gbs = 2.0 * static_cast<double>(half) / (r.copy_ms * 1e-3) / 1e9;
  }

  // Unfused: one kernel per op, intermediates through memory.
  std::vector<ir::KernelGroup> stages = ir::unfuse(optimized);
  std::vector<std::unique_ptr<ElementwiseKernel>> kernels;
  std::vector<std::pair<std::vector<TensorArg>, std::vector<TensorArg>>> arguments;
  for (const ir::KernelGroup& stage : stages) {
    std::vector<TensorArg> in, out;
    for (int id : stage.graph.inputs()) in.push_back(tensors.at(stage.graph.node(id).name));
    for (const auto& [name, id] : stage.graph.outputs()) {
      if (!tensors.count(name)) {
        const ir::Node& n = stage.graph.node(id);
        TensorArg t{0, n.dtype, ir::concrete(n.shape, bindings), {}};
        cuda::DeviceBuffer& b = buffers[name] =
            cuda::DeviceBuffer(std::max<size_t>(tensor_bytes(t), 16));
        t.data = b.get();
        tensors[name] = t;
      }
      out.push_back(tensors.at(name));
    }
    kernels.push_back(std::make_unique<ElementwiseKernel>(runtime, stage.graph, config));
    arguments.emplace_back(std::move(in), std::move(out));
  }
  r.unfused_kernels = static_cast<int>(kernels.size());
  r.unfused_ms = time_ms([&] {
    for (size_t i = 0; i < kernels.size(); ++i)
      kernels[i]->launch(arguments[i].first, arguments[i].second, stream.get());
  });
  return r;
}

nlohmann::json bench_json(const BenchResult& r) {
  return {{"kernel", r.kernel_name},
          {"problem", r.problem},
          {"config", r.config},
          {"config_source", r.config_source},
          {"n", r.n},
          {"bytes", r.bytes},
          {"repeats", r.repeats},
          {"median_ms", r.fused_ms},
          {"gbs", r.fused_gbs},
          {"copy_median_ms", r.copy_ms},
          {"copy_gbs", r.copy_gbs},
          {"fraction_of_copy", r.fused_gbs / r.copy_gbs},
          {"unfused_median_ms", r.unfused_ms},
          {"unfused_kernels", r.unfused_kernels},
          {"fused_speedup", r.unfused_ms / r.fused_ms},
          {"grid_blocks", r.grid_blocks},
          {"block_threads", r.block_threads}};
}

}  // namespace kjit::cli
