// Dead code elimination: drops every node no output depends on. Inputs always
// stay: they are the kernel's parameters, which callers pass whether used or not.
#pragma once

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

Graph dce(const Graph& graph);

}  // namespace kjit::ir
