// The CPU reference: evaluates a graph in fp64 over the op table's references,
// with NumPy broadcasting. GPU results are checked against it (after rounding the
// reference to the output dtype).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"
#include "kjit/support/npy.h"

namespace kjit::ir {

struct HostTensor {
  std::vector<int64_t> shape;  // concrete sizes; {} for a scalar
  std::vector<double> data;    // row-major, element_count(shape) values
};

// One node on scalar operands, with the dtype semantics of the GPU: i32 results
// wrap at 32 bits, casts round to the target dtype, f32 results stay in fp64.
double evaluate_node(const Node& node, const double* operands);

// Every node of `graph` at one point, in fp64: `inputs` holds the inputs' values
// in declaration order (as given: not rounded to their dtypes); returns each node's
// value by id. For fused scalar functions' twins (matmul epilogues, attention
// modifiers), where broadcasting does not arise. InternalError when the counts differ.
std::vector<double> evaluate_point(const Graph& graph, const std::vector<double>& inputs);

// Rounds `value` to what a `dtype` element stores (f32/f16/bf16 rounding, i32
// truncation with saturation, bool as 0/1).
double round_to(DType dtype, double value);

// Values on which every op that reads input `input_id` directly is well
// conditioned (the intersection of their op-table domains), for random tests:
// [0.1, 4] for an input of log, [-3, 3] for sin.
std::pair<double, double> input_domain(const Graph& graph, int input_id);

// Fresh random values for input `input_id` in its ops' domain (input_domain), as
// an .npy array of its dtype (whole numbers for i32, 0/1 for bool); never all zeros.
NpyArray random_input(const Graph& graph, int input_id, const std::vector<int64_t>& shape,
                      uint64_t seed);

// Evaluates every output; `inputs` by name. Binds symbolic dims from the inputs'
// shapes; a UserError names a missing input, a dtype-independent shape mismatch.
std::map<std::string, HostTensor> interpret(const Graph& graph,
                                            const std::map<std::string, HostTensor>& inputs);

}  // namespace kjit::ir
