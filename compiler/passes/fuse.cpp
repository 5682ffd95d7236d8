#include "kjit/compiler/passes/fuse.h"

#include <map>

namespace kjit::ir {

std::vector<KernelGroup> fuse(const Graph& graph) {
  return {KernelGroup{graph}};
}

std::vector<KernelGroup> unfuse(const Graph& graph) {
  // The name under which each node's value lives in memory.
  std::map<int, std::string> stored;
  for (int id : graph.inputs()) stored[id] = graph.node(id).name;
  std::map<int, std::vector<std::string>> output_names;
  for (const auto& [name, id] : graph.outputs()) output_names[id].push_back(name);
  std::vector<KernelGroup> groups;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    int id = static_cast<int>(i);
    const Node& n = graph.node(id);
    if (n.op == OpCode::Input || n.op == OpCode::Const) continue;
    Graph g;
    std::vector<Value> operands;
    for (int operand : n.operands) {
      const Node& o = graph.node(operand);
      if (o.op == OpCode::Const) {
        operands.push_back(g.constant(o.value, o.dtype));
      } else {
        int existing = g.find_input(stored.at(operand));
        operands.push_back(existing >= 0 ? g.value(existing)
                                         : g.input(stored.at(operand), o.dtype, o.shape));
      }
    }
    Value v = g.apply(n.op, operands, n.cast_to);
    std::string name =
        output_names.count(id) ? output_names[id].front() : "_t" + std::to_string(id);
    g.output(name, v);
    stored[id] = name;
    groups.push_back(KernelGroup{std::move(g)});
  }
  return groups;
}

}  // namespace kjit::ir
