// Forward-mode differentiation of an IR graph with respect to one of its inputs.
//
//   Graph d = with_derivative(g, "s");
//
// `d` holds g's nodes unchanged (same ids, same inputs in the same order), then the
// derivative of every node that depends on `wrt`, built with the chain rule from the
// op table's ops; its outputs are each output y of g followed by "d_y", dy / d wrt
// (a literal 0 where y does not depend on wrt). What it is for: an attention score
// modifier mod(s, q_idx, kv_idx, ...) is differentiated with respect to s so that
// the backward pass can scale dS by mod'(s) (FlexAttention's score_mod gradient).
//
// The rules follow the op table's fp64 references: relu'(0) = 0, abs'(0) = 1,
// max/min take the derivative of the operand they return (the first on ties),
// floor, ceil, comparisons and integer values have derivative 0, select passes the
// chosen side's. gelu' = Phi(x) + x phi(x), with Phi(x) = gelu(x) / x (1/2 at 0: the
// IR has no erf). `wrt` must be a floating input; a UserError otherwise.
#pragma once

#include <string>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

Graph with_derivative(const Graph& graph, const std::string& wrt);

}  // namespace kjit::ir
