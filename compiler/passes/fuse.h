// Fusion: partitions a graph into kernels. Every op here is elementwise, so one
// kernel can run the whole graph: each element is loaded once, every intermediate
// stays in registers, and every output is stored in the same pass over memory.
//
// Until registers run out. The generated kernel loads every input of a thread's
// vectors before any math (memory-level parallelism), so a chain that reads many
// inputs, or keeps many values alive, needs a register per live value per element;
// past 255 per thread ptxas spills to local memory, which is slower than a second
// pass over memory. fuse() therefore estimates each group's registers (at the
// smallest config: one element per vector, one vector per thread) and, past the
// budget, cuts the chain into several kernels: a value needed across a cut is
// stored to a temporary ("_t<id>", f32 for 16-bit floats so the split kernels
// compute exactly what the fused one does) and read back by the next kernel.
//
// unfuse() is the opposite extreme, for comparison (`kjit bench` reports both): one
// kernel per op, each intermediate written to memory and read back by the next
// kernel, as an eager framework runs the chain.
#pragma once

#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

// Registers per thread a group may need at its smallest config before fuse()
// splits it. Half of the 255 a thread can have: the tuner widens vectors and
// unrolls (more values per thread) only as far as its register estimate allows,
// and a block of 256 threads at 128 registers still keeps 8 warps per scheduler.
inline constexpr int kRegisterBudget = 128;

struct KernelGroup {
  // Inputs and outputs named as in the original graph; values crossing a cut are
  // outputs of one group and inputs of a later one, named "_t<id>".
  Graph graph;
  int registers = 0;  // estimated_registers(graph)
};

// The registers a kernel of `graph` needs per thread at one element per vector and
// one vector per thread: a base for indices and addresses, plus the values live at
// the busiest point of the chain (every input is loaded up front and lives until its
// last use; an intermediate from its op to its last use; an output to the end).
int estimated_registers(const Graph& graph);

// One group when the graph fits `register_budget`, else several, in launch order.
// A group always writes at least one value of the graph's full output shape (the
// kernel's iteration space), so a chain is cut only where such a value is live.
std::vector<KernelGroup> fuse(const Graph& graph, int register_budget = kRegisterBudget);
std::vector<KernelGroup> unfuse(const Graph& graph);

}  // namespace kjit::ir
