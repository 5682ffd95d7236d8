// Fusion: partitions a graph into kernels. Every op here is elementwise, so one
// kernel can run the whole graph: each element is loaded once, every intermediate
// stays in registers, and every output is stored in the same pass over memory.
//
// Until registers run out. The generated kernel loads every input of a thread's
// vectors before any math (memory-level parallelism), so a chain that reads many
// inputs, or keeps many values alive, needs a register per live value per element;
// past 255 per thread ptxas spills to local memory. split() estimates each group's
// registers (at the smallest config: one element per vector, one vector per thread)
// and, past the budget, cuts the chain into several kernels: a value needed across a
// cut is stored to a temporary ("_t<id>", f32 for 16-bit floats so the split kernels
// compute exactly what the fused one does) and read back by the next kernel. fuse()
// takes that split only when the temporaries are cheap next to the chain's own
// traffic (kSplitTrafficLimit); where many values are alive at the cut, a spill
// that stays in L1/L2 costs less than sending them all through DRAM.
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
// splits it: just under the 255 a thread can have, so a chain is split only where
// it would otherwise spill. Measured on the H200 (n = 2^24): splitting chains that
// ptxas fits without spilling is slower — a 128-input bf16 sum 4.51 ms split at 128
// registers vs 1.66 ms fused (153 registers estimated, 32 used: ptxas issues scalar
// loads late), 120 live f32 values 11.5 vs 6.3 ms — so the budget is not lower. The
// estimate tracks ptxas where it matters: 300 live values, ~325 estimated, spill
// 480 bytes at 255 fused; 200 live values, ~225 estimated, 222 used.
inline constexpr int kRegisterBudget = 240;  // KJIT_REGISTER_BUDGET overrides it

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
std::vector<KernelGroup> split(const Graph& graph, int register_budget = kRegisterBudget);

// What a split moves through memory per output element, in bytes: the temporaries
// (each written once and read back) and the chain's own inputs and outputs.
struct SplitTraffic {
  int64_t temporaries = 0;
  int64_t own = 0;
};
SplitTraffic split_traffic(const Graph& graph, const std::vector<KernelGroup>& groups);

// A split costs its temporaries' traffic; a spill costs local-memory traffic that
// mostly stays in L1 and L2. A chain over the budget is split when its temporaries
// move at most this many times the chain's own bytes; otherwise it stays one kernel
// and spills. Where the cut falls between many live values (300 values alive at
// once: ~215 cross the cut, 1720 bytes per element against the chain's 8) the split
// kernels' predicted time was 88 ms at n = 2^24 for the first of them alone.
inline constexpr int64_t kSplitTrafficLimit = 2;

// split(), when the split is worth its traffic (kSplitTrafficLimit); else one group.
std::vector<KernelGroup> fuse(const Graph& graph, int register_budget = kRegisterBudget);
std::vector<KernelGroup> unfuse(const Graph& graph);

}  // namespace kjit::ir
