#include "kjit/compiler/passes/constant_fold.h"

#include <cmath>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/passes/rebuild.h"

namespace kjit::ir {

Graph constant_fold(const Graph& graph) {
  return rebuild(graph, [](size_t /*index*/, Node node, Graph& out) {
    bool all_literal = !node.operands.empty();
    double operands[3] = {0, 0, 0};
    for (size_t k = 0; k < node.operands.size(); ++k) {
      const Node& operand = out.node(node.operands[k]);
      if (operand.op != OpCode::Const) {
        all_literal = false;
        break;
      }
      operands[k] = operand.value;
    }
    // A cast stays: its result is not a literal (it does not adapt to other operands).
    bool literal_dtype =
        node.op != OpCode::Cast &&
        (node.dtype == DType::F32 || node.dtype == DType::I32 || node.dtype == DType::Bool);
    if (all_literal && literal_dtype) {
      double value = evaluate_node(node, operands);
      // The kernel computes in f32: fold to the value it would hold.
      if (node.dtype == DType::F32) value = static_cast<float>(value);
      if (std::isfinite(value)) return out.constant(value, node.dtype).id;
    }
    return out.add_node_unchecked(std::move(node));
  });
}

}  // namespace kjit::ir
