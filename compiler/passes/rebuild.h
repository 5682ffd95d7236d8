// Shared by the passes: copies a graph node by node into a new one, letting the
// pass replace or drop nodes, and remaps operands and outputs.
#pragma once

#include <functional>
#include <vector>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

// `visit(index, node, new_graph)` gets each node (`index` in the old graph, its
// operands already remapped to new ids) and returns the node's new id, or -1 to
// drop it. A node that uses a dropped node is dropped too, without a visit;
// dropping a node an output names is a bug in the pass.
Graph rebuild(const Graph& graph,
              const std::function<int(size_t index, Node node, Graph& out)>& visit);

}  // namespace kjit::ir
