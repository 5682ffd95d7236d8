#include "kjit/compiler/ir/verifier.h"

#include <cmath>
#include <set>

#include "kjit/support/error.h"

namespace kjit::ir {

namespace {
[[noreturn]] void fail(const Graph& graph, int id, const std::string& message) {
  const Node& n = graph.node(id);
  throw UserError("invalid IR at node " + std::to_string(id) + " (" + describe(graph, id) + ", " +
                  op_info(n.op).name + ", " + to_string(n.dtype) + to_string(n.shape) +
                  "): " + message);
}
}  // namespace

void verify(const Graph& graph) {
  std::set<std::string> names;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    int id = static_cast<int>(i);
    const Node& n = graph.node(id);
    if (static_cast<size_t>(n.op) >= op_table().size()) fail(graph, id, "unknown op code");
    for (int operand : n.operands) {
      if (operand < 0 || operand >= id)
        fail(graph, id, "operand " + std::to_string(operand) + " does not come before this node");
    }
    if (n.op == OpCode::Input) {
      if (!is_identifier(n.name)) fail(graph, id, "input name is not an identifier");
      if (!names.insert(n.name).second) fail(graph, id, "input name '" + n.name + "' is taken");
      if (!n.operands.empty()) fail(graph, id, "an input has no operands");
      for (const Dim& d : n.shape) {
        if (!d.is_symbolic() && d.size < 1) fail(graph, id, "a static dim must be >= 1");
      }
      continue;
    }
    if (n.op == OpCode::Const) {
      if (!n.operands.empty()) fail(graph, id, "a constant has no operands");
      if (!std::isfinite(n.value)) fail(graph, id, "a constant must be finite");
      if (!n.shape.empty()) fail(graph, id, "a constant is a scalar");
      if (!n.weak) fail(graph, id, "a constant is a literal (weak)");
      continue;
    }
    Node expected = n;
    std::string error = infer(graph, expected);
    if (!error.empty()) fail(graph, id, error);
    if (expected.dtype != n.dtype)
      fail(graph, id,
           std::string("dtype should be ") + to_string(expected.dtype) + " by the " +
               op_info(n.op).name + " type rule");
    if (expected.weak != n.weak)
      fail(graph, id,
           "the literal-only flag should be " + std::string(expected.weak ? "set" : "clear"));
    if (expected.shape != n.shape)
      fail(graph, id,
           "shape should be " + to_string(expected.shape) + " (the operands' broadcast)");
  }
  if (graph.outputs().empty()) throw UserError("invalid IR: the graph has no output");
  std::set<std::string> output_names;
  for (const auto& [name, id] : graph.outputs()) {
    if (id < 0 || static_cast<size_t>(id) >= graph.nodes().size())
      throw UserError("invalid IR: output '" + name + "' names no node");
    if (!is_identifier(name)) throw UserError("invalid IR: output '" + name + "' is not a name");
    if (names.count(name) || !output_names.insert(name).second)
      throw UserError("invalid IR: output name '" + name + "' is taken");
  }
  graph.output_shape();  // throws when the outputs do not broadcast together
}

}  // namespace kjit::ir
