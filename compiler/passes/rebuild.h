// Shared by the passes: copies a graph node by node into a new one, letting the
// pass replace or drop nodes, and remaps operands and outputs.
#pragma once

#include <functional>
#include <vector>

#include "compiler/ir/graph.h"

namespace kjit::ir {

// `visit(node, new_graph)` returns the new id for the node (after remapping its
// operands to new ids), or -1 to drop it (then no kept node may use it).
Graph rebuild(const Graph& graph, const std::function<int(Node node, Graph& out)>& visit);

}  // namespace kjit::ir
