// The optimization pipeline, a flat list run top to bottom:
//   verify -> constant_fold -> cse -> dce -> verify
// With KJIT_DUMP=passes (read once per call), the IR is printed to stderr after
// each pass, or "(unchanged)" when the pass did nothing.
#pragma once

#include <ostream>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

// `log` (may be null) receives the dump; by default stderr when KJIT_DUMP=passes.
Graph optimize(const Graph& graph, std::ostream* log = nullptr);

// Whether KJIT_DUMP lists "passes" (comma-separated list).
bool dump_passes_requested();

}  // namespace kjit::ir
