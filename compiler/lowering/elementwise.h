// Lowering of a fused elementwise graph to one CUDA kernel.
//
// Problem (what): the optimized graph, how each input is read (its access
// pattern) and the alignment class. Config (how): threads per block, vector
// width, independent vectors per thread. Both have canonical text forms that
// enter the generated header comment and so the cache key.
//
// The kernel views the output as [rows, cols] (a 1-D output has rows = 1) and
// takes n = rows * cols and cols at run time; it is specialized on the access
// patterns and the alignment class, never on exact sizes.
#pragma once

#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/support/key_values.h"

namespace kjit::ir {

// How an input element is found from the output index i (row = i / cols, col = i % cols).
enum class Access {
  Full,     // same shape as the output, contiguous: in[i]
  Scalar,   // one element: in[0], loaded once per thread
  Row,      // one row [cols] broadcast down the rows: in[i % cols]
  Column,   // one column [rows, 1] broadcast across: in[i / cols]
  Strided,  // the output's shape with any strides: in[row * stride0 + col * stride1]
};
const char* to_string(Access access);
std::optional<Access> parse_access(const std::string& name);

struct ElementwiseProblem {
  Graph graph;                 // optimized (pipeline.h), one kernel group
  std::vector<Access> access;  // one per input, in declaration order
  // The alignment class. true: every vector-read input and every output pointer is
  // 16-byte aligned, and n and cols are multiples of the vector width, so the kernel
  // moves whole 16-byte vectors with no tail. false: one element at a time.
  bool aligned = false;
  // hex64(hash64(print(graph))), when the caller has it already (launchers compute it
  // once per graph rather than once per launch); empty: text() computes it.
  std::string ir_digest;

  // "elementwise ir=<hash> in=x:f32:full,g:bf16:row out=y:bf16 align=16"
  std::string text() const;
};

// The default, block=512 and unroll=2, was measured on the H200 (2^28 elements,
// against block=256,unroll=4): sin(x)^2 + cos(x)^2 f32 0.553 vs 0.588 ms,
// x * sigmoid(x) * g bf16 0.399 vs 0.407 ms, a * b + c f16 0.503 vs 0.508 ms.
struct ElementwiseConfig {
  int block_threads = 512;
  int vector_width =
      0;           // elements per vector on the aligned path; 0: 16 bytes of the narrowest dtype
  int unroll = 2;  // independent vectors per thread per loop iteration (loads in flight)
  // 1: software pipelining — the loads of the next grid-stride iteration are issued
  // before this iteration's math, so memory stays busy while long chains compute.
  int prefetch = 0;
  // 1: the aligned path's stores are streaming stores (st.global.cs, evict-first in
  // L2). Off by default: on the H200 it did not move either targeted chain (2^28
  // elements: sin/cos 91.1% vs 91.2% of copy, silu gate 94.6% vs 95.1%, same run),
  // though a hand-written copy kernel gained 0.2 points. A knob for the tuner.
  int stream = 0;
  // Blocks per SM the grid is sized for (whole waves of SMs x per_sm blocks), at most
  // the resident limit. 0 (auto): 2048 vectors in flight per SM (block x unroll x
  // blocks = 2048; the default 512 x 2 gives 2 blocks). On the H200 (2^28 elements,
  // same run) 2 blocks of 512 x 2 per SM instead of the 4 that fit took sin(x)^2 +
  // cos(x)^2 f32 from 91.5% to 93.3% of copy and x * sigmoid(x) * g bf16 from 96.8%
  // to 97.8%, a * b + c f16 unchanged (100.8%); 1 block of 1024 x 2 gave 93.0%, 2 of
  // 1024 x 1 92.4%, 1 of 1024 x 1 83.3% (half the vectors in flight). The SM clock was
  // the same, 1961 MHz, in every variant. A launch parameter: the kernel's source does
  // not depend on it.
  int per_sm = 0;
  // The grid schedule (grid=...).
  //   Waves: whole waves of SMs x per_sm blocks, each looping over the work (grid-stride).
  //   Tiles: one block per tile of block x unroll vectors, no loop, the last wave partly
  //          full (per_sm unused). Waves and Tiles are launch parameters.
  //   Rows:  for [rows, cols] outputs: a 2-D grid, x over the column vectors of a row,
  //          y over groups of `unroll` rows (looping when they pass 65535); each thread
  //          covers one column vector in `unroll` rows, so a row-broadcast operand is
  //          loaded once per thread and kept in registers, and row and column come from
  //          the block's coordinates instead of a division. Changes the source.
  //          Measured on the H200 (x * r + c, bf16 16384 x 16384, a hand-written
  //          kernel of this form, tools/device/experiments/broadcast_2d.cu): 4 rows of
  //          128 threads at 99.6-99.9% of cudaMemcpy's bandwidth, the 1-D grid's best
  //          97.3% (torch.compile: 100.2% of its copy).
  enum class Grid { Waves, Tiles, Rows };
  Grid grid = Grid::Waves;

  // "block=512,vec=0,unroll=2" (+ ",prefetch=1", ",stream=1", ",grid=rows", ",per_sm=2",
  // ",grid=tiles" where set)
  std::string text() const;
  // The part of text() the generated source depends on (without per_sm, and without
  // grid unless it is rows).
  std::string source_text() const;
  // Parses "block=128,vec=8,unroll=2" (any subset, any order); a UserError names a
  // bad key or value.
  static ElementwiseConfig parse(const std::string& text);
  // The same over pairs split already (support/key_values.h).
  static ElementwiseConfig parse(const KeyValues& pairs);
};

// "waves", "tiles" or "rows", as config grid=... spells it.
const char* to_string(ElementwiseConfig::Grid grid);

// Blocks per SM a launch sizes its grid for: config per_sm (auto: 2048 vectors in
// flight per SM), at most `resident` (the occupancy limit of the compiled kernel).
int grid_blocks_per_sm(const ElementwiseConfig& config, int resident);

// The blocks a launch over `vectors` vectors uses: grid=tiles, one per block x unroll
// vectors; grid=waves, at most SMs x grid_blocks_per_sm() (fewer when there is less
// work). `resident`: the kernel's occupancy limit per SM. (grid=rows: grid_dims.)
int64_t grid_blocks(const ElementwiseConfig& config, int64_t vectors, int sm_count, int resident);

// A launch's grid, x by y blocks.
struct GridDims {
  int64_t x = 1;
  int64_t y = 1;
};
// The grid of a launch over n elements in rows of `cols`, V elements per vector:
// grid=rows, ceil(cols / V / block) x min(ceil(rows / unroll), 65535); else
// grid_blocks() x 1. A UserError names the limit when the columns need more than
// 2^31 - 1 blocks.
GridDims grid_dims(const ElementwiseConfig& config, int64_t n, int64_t cols, int vector_width,
                   int sm_count, int resident);

// The elements per vector the kernel uses: 1 off the aligned path, else the
// config's width or 16 bytes of the narrowest dtype that moves as vectors.
int effective_vector_width(const ElementwiseProblem& problem, const ElementwiseConfig& config);

// One kernel for the problem. Identical inputs give byte-identical source.
KernelSource lower_elementwise(const ElementwiseProblem& problem, const ElementwiseConfig& config);

// How a fused chain evaluates float math.
//   Exact: as the elementwise family does (IEEE division, tanhf, kjit::gelu_f32: the
//     results an fp64 check expects to a few ulps).
//   Rounded16: as Exact, but gelu by kjit::gelu_for_16bit (relative error 2^-19
//     against 2^-20, 21 PTX instructions against 39), for a matmul epilogue whose result
//     is rounded to bf16 or f16 (templates/math.cuh says what such a result keeps).
//   Fast: as Rounded16, and division by __fdividef (2 ulps) and tanh by the hardware's
//     tanh.approx.f32 (one MUFU instruction, relative error 2^-10.99 by the PTX ISA),
//     for a score modifier run once per attention score beside the tensor cores,
//     where the exact subroutines halved the kernel's speed and the error stays below
//     the bf16 rounding of P.
enum class ScalarMath { Exact, Rounded16, Fast };

// The chain as a device function over named scalar values, for fusing a graph into
// another kernel (a matmul epilogue). The graph must have exactly one output and
// floating inputs only; the parameters are the inputs in declaration order, all
// `float`, named in_<name>:
//   __device__ __forceinline__ float NAME(float in_acc, float in_bias) { ... return t3; }
// The text is stable: the same graph gives the same function.
std::string emit_epilogue_function(const Graph& graph, const std::string& function_name,
                                   ScalarMath math = ScalarMath::Exact);

// Output `output` of the graph as a device function over named scalar values, for
// fusing into another kernel (an attention score or mask modifier): the parameters
// are the inputs in declaration order, each in its compute type (float for f32, f16
// and bf16; int for i32; bool), named in_<name>; the result is float for a floating
// output, else the output's own compute type. `title` heads the comment above it:
//   // <title>, fused from the IR:
//   //   <the graph's text>
//   __device__ __forceinline__ float NAME(float in_s, int in_q_idx) { ... }
std::string emit_scalar_function(const Graph& graph, int output, const std::string& function_name,
                                 const std::string& title, ScalarMath math = ScalarMath::Exact);

// The body of the chain: one `const <type> t<id> = ...;` line per op, each under a
// comment naming the IR op; inputs are read as `in_<name>` (in their compute
// type). Returns the lines, each prefixed with `indent`; `result_names` gets the
// C expression of each output, in output order.
std::string emit_chain_statements(const Graph& graph, const std::string& indent,
                                  std::vector<std::string>* result_names,
                                  ScalarMath math = ScalarMath::Exact);

}  // namespace kjit::ir
