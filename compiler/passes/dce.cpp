#include "kjit/compiler/passes/dce.h"

#include "kjit/compiler/passes/rebuild.h"

namespace kjit::ir {

Graph dce(const Graph& graph) {
  std::vector<bool> live(graph.nodes().size(), false);
  for (const auto& [name, id] : graph.outputs()) live[static_cast<size_t>(id)] = true;
  for (size_t i = graph.nodes().size(); i-- > 0;) {
    if (!live[i]) continue;
    for (int operand : graph.nodes()[i].operands) live[static_cast<size_t>(operand)] = true;
  }
  return rebuild(graph, [&](size_t index, Node node, Graph& out) {
    bool keep = live[index] || node.op == OpCode::Input;
    return keep ? out.add_node_unchecked(std::move(node)) : -1;
  });
}

}  // namespace kjit::ir
