// Reads the text form: statements separated by ';' or newlines, '#' comments.
//
//   x:bf16[n]                      a declaration (dtype and/or shape; defaults below)
//   t = x * sigmoid(x)             an assignment; operators + - * / ^ < <= > >= == !=
//   y = t * g                      names never read again are the outputs...
//   return y                       ...unless a return line lists them
//   sin(x)^2 + cos(x)^2            a lone expression is the output y
//
// Undeclared names are inputs of the default dtype and shape. Functions are the op
// table's names (plus where = select); cast(x, bf16) converts. Errors are
// UserErrors naming line and column with a caret under the spot.
//
// Parsing takes time linear in the text. The limits below keep one expression
// within what one fused kernel can be: past them a UserError says which limit
// was reached (docs/limits.md has the measurements behind them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kjit/compiler/ir/graph.h"

namespace kjit::ir {

// An input the caller declares before the text (a matmul epilogue's `acc`): it is
// the graph's first input, and error positions stay those of the user's text.
struct Predeclared {
  std::string name;
  DType dtype;
  Shape shape;
};

struct ParseOptions {
  DType default_dtype = DType::F32;
  Shape default_shape = {Dim::named("n")};
  std::vector<Predeclared> inputs;
};

// Bytes of text: 1 MiB, far beyond kMaxOps ops written out.
inline constexpr size_t kMaxTextBytes = size_t{1} << 20;
// Ops (every operator and call; inputs and literals are not ops). NVRTC's time
// and memory grow with the op count: a 20 000-op chain took minutes and 5.8 GB;
// 2048 ops compile in about 15 s and 0.5 GB (sm_90, docs/limits.md).
inline constexpr int kMaxOps = 2048;
// Inputs and outputs: each is a kernel parameter (an input read with strides
// takes three), and 128 inputs + 64 outputs stay inside CUDA's 4 KiB of
// kernel parameters on every supported toolkit.
inline constexpr int kMaxInputs = 128;
inline constexpr int kMaxOutputs = 64;
// Parentheses, calls and unary operators nested inside one another (the parser
// recurses, so this also bounds its stack).
inline constexpr int kMaxNesting = 256;

// A UserError for text that does not parse, for a graph whose outputs do not
// broadcast to one shape (one kernel writes them all), or past a limit above.
Graph parse(const std::string& text, const ParseOptions& options = {});

// The text spelled one way, for keys that must not depend on how it was typed:
// comments dropped, statements joined by "; ", one space around binary operators
// and '=', none around '^' (also for '**'), ':', brackets or unary signs, ", "
// between arguments. "gelu( acc+bias )  # fused" and "gelu(acc + bias)" both give
// "gelu(acc + bias)". Only the spelling changes, not the meaning. UserError for a
// character the tokenizer rejects; parse the text first for everything else.
std::string canonical_text(const std::string& text);

}  // namespace kjit::ir
