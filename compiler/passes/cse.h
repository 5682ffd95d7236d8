// Common subexpression elimination: two nodes with the same op, operands (after
// merging), literal value and target dtype become one. sin(x)^2 + sin(x)^2 computes
// sin(x) once.
#pragma once

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

Graph cse(const Graph& graph);

}  // namespace kjit::ir
