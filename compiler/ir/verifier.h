// Checks a graph's invariants: operands come earlier, arities and dtypes and
// shapes follow the op table, names are unique identifiers, there is at least one
// output. Throws a UserError naming the failing node, its op, dtypes and shapes.
#pragma once

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

void verify(const Graph& graph);

}  // namespace kjit::ir
