// Constant folding: an op whose operands are all literals becomes a literal.
//   1. walk the nodes in order;
//   2. for an op with only literal operands, evaluate it with the interpreter's
//      scalar semantics (evaluate_node), so folding never changes a result;
//   3. keep the op when the value is not finite, when its dtype has no literal form
//      (f16/bf16), or when it is a cast (a cast's result does not adapt to other
//      operands the way a literal does, see Node::weak).
#pragma once

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

Graph constant_fold(const Graph& graph);

}  // namespace kjit::ir
