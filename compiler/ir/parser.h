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
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"

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

Graph parse(const std::string& text, const ParseOptions& options = {});

}  // namespace kjit::ir
