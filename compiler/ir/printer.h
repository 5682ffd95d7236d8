// The IR's text form. print() writes declarations, one op per line in function
// form and a return line; parse() (parser.h) reads it back to the same graph:
//
//   x:f32[n]
//   _1 = sin(x)
//   _2 = pow(_1, 2)
//   ...
//   return y
#pragma once

#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

std::string print(const Graph& graph);

// The name print() gives each node, by id: inputs their own, an op node its first
// output's name or a fresh temporary (_1, _2, ...); "" for literals (printed inline
// with format_literal). Generated kernels use these names in their comments, so the
// code reads against the IR listing in their header.
std::vector<std::string> value_names(const Graph& graph);

// The line print() writes for op node `id`, e.g. "_2 = mul(x, _1)", with `names`
// from value_names(graph).
std::string node_line(const Graph& graph, int id, const std::vector<std::string>& names);

// A literal as the parser reads it back: "2" (i32), "2.0", "1e-05" (f32), "true".
std::string format_literal(double value, DType dtype);

}  // namespace kjit::ir
