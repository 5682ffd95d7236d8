#include "kjit/compiler/passes/rebuild.h"

#include "kjit/support/error.h"

namespace kjit::ir {

Graph rebuild(const Graph& graph,
              const std::function<int(size_t index, Node node, Graph& out)>& visit) {
  Graph out;
  std::vector<int> remap(graph.nodes().size(), -1);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    Node node = graph.nodes()[i];
    bool uses_dropped = false;
    for (int& operand : node.operands) {
      operand = remap[static_cast<size_t>(operand)];
      uses_dropped = uses_dropped || operand < 0;
    }
    remap[i] = uses_dropped ? -1 : visit(i, std::move(node), out);
  }
  std::vector<std::pair<std::string, int>> outputs;
  for (const auto& [name, id] : graph.outputs()) {
    KJIT_CHECK(remap[static_cast<size_t>(id)] >= 0, "a pass dropped an output");
    outputs.emplace_back(name, remap[static_cast<size_t>(id)]);
  }
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace kjit::ir
