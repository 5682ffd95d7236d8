// Planning an elementwise launch: from the caller's tensors (dtypes, shapes,
// strides, addresses) to the Problem the kernel is specialized on — each input's
// access pattern and the alignment class — and the sizes passed at run time.
// Pure C++: the runtime plans every launch with it, and the tuner plans the
// problems it tunes without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/lowering/elementwise.h"

namespace kjit {

// A device tensor as the caller owns it.
struct TensorArg {
  uint64_t data = 0;  // device address (a CUdeviceptr)
  DType dtype = DType::F32;
  std::vector<int64_t> shape;    // {} for a scalar
  std::vector<int64_t> strides;  // in elements, one per dim; empty: contiguous
};

// How one launch maps onto the kernel: the problem it needs and the sizes.
struct ElementwisePlan {
  ir::ElementwiseProblem problem;
  int64_t n = 0;     // output elements
  int64_t cols = 1;  // the output's last dim (n for a 1-D output)
  // Per input: {stride0, stride1} in elements over the [rows, cols] view (strided only).
  std::vector<std::pair<int64_t, int64_t>> strides;
};

enum class Alignment { Auto, Aligned, Unaligned };

namespace ir {

// Checks the tensors against the graph (counts, dtypes, ranks, symbolic dims, null
// and misaligned pointers: UserError saying what is wrong) and picks each input's
// access pattern and the alignment class. `graph` is optimized; `ir_digest` its
// hex64(hash64(print(graph))).
ElementwisePlan plan_elementwise(const Graph& graph, const std::string& ir_digest,
                                 const ElementwiseConfig& config,
                                 const std::vector<TensorArg>& inputs,
                                 const std::vector<TensorArg>& outputs,
                                 Alignment alignment = Alignment::Auto);

// Launch-time: an output must share no byte with another output, nor with an input
// unless it is that input element for element (same address, dtype and shape, both
// contiguous: each thread reads its element before writing it). A UserError naming
// them otherwise: the kernel's threads write an output while others still read the
// inputs. (Not part of planning, whose tensors may be stand-ins.)
void check_outputs_apart(const Graph& graph, const std::vector<TensorArg>& inputs,
                         const std::vector<TensorArg>& outputs);

}  // namespace ir
}  // namespace kjit
