// Helpers shared by the elementwise CLI verbs and the demo: random inputs in each
// op's domain, error checks, and the benchmark (fused vs copy vs unfused).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/npy.h"

namespace kjit::cli {

std::string shape_string(const std::vector<int64_t>& shape);
// ||got - want|| / ||want||; infinity when a NaN appears where `want` is finite.
double relative_l2(const std::vector<double>& got, const std::vector<double>& want);
// 1e-5 for f32/i32/bool, 1e-2 for f16/bf16 (against the reference rounded to the dtype).
double tolerance_for(DType dtype);

struct BenchResult {
  std::string kernel_name;
  std::string problem;
  std::string config, config_source;  // what the fused kernel ran, and where it came from
  int64_t n = 0;
  int64_t bytes = 0;  // inputs read + outputs written, once each
  double fused_ms = 0, fused_gbs = 0;
  double copy_ms = 0, copy_gbs = 0;  // device-to-device copy moving the same bytes
  double unfused_ms = 0;
  int unfused_kernels = 0;
  unsigned grid_blocks = 0;
  int block_threads = 0;
  int repeats = 0;
};

// Allocates and fills inputs on the runtime's device, times the fused kernel,
// a copy of the same traffic and the unfused chain (one kernel per op), each as the
// median of `repeats` runs with L2 flushed before each.
// `config`: none for the tuner's choice (what an application's launch would run).
BenchResult bench_elementwise(Runtime& runtime, const Graph& graph,
                              const std::optional<ir::ElementwiseConfig>& config,
                              Alignment alignment, std::vector<TensorArg> inputs,
                              std::vector<TensorArg> outputs, int repeats);
nlohmann::json bench_json(const BenchResult& result);

}  // namespace kjit::cli
