// Fusion: partitions a graph into kernels. Every op here is elementwise, so the
// whole graph is one kernel: each element is loaded once, every intermediate stays
// in registers, and every output is stored in the same pass over memory.
//
// unfuse() is the opposite, for comparison (`kjit bench` reports both): one kernel
// per op, each intermediate written to memory and read back by the next kernel, as
// an eager framework runs the chain.
#pragma once

#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

struct KernelGroup {
  Graph graph;  // inputs and outputs named as in the original graph; intermediates "_t<id>"
};

std::vector<KernelGroup> fuse(const Graph& graph);
std::vector<KernelGroup> unfuse(const Graph& graph);

}  // namespace kjit::ir
