// A matmul epilogue written in the elementwise IR, lowered to the device function
// the matmul kernel calls per output, with its fp64 twin for checking:
//
//   epilogue_from_ir("gelu(acc + bias)", DType::BF16)
//   epilogue_from_ir("scale:f32[m,1]; r:bf16[m,n]; y = acc * scale + r", DType::BF16)
//
// `acc` is the f32 accumulator (always the function's first parameter); extra
// operands take their kind from their declared shape: [n] or [1,n] per column (a
// bias), [m,1] per row (a scale), [m,n] a full tensor (a residual); undeclared
// operands are per-column vectors of `dtype`. The IR is optimized (fold, CSE, DCE)
// and lowered by the elementwise emitter; the twin evaluates the same graph in fp64
// with the interpreter's op semantics. Pure C++, like the rest of compiler/.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kjit/compiler/lowering/matmul.h"

namespace kjit::matmul {

// An epilogue and its CPU twin: reference(acc, operands in Epilogue::operands order).
struct LoweredEpilogue {
  Epilogue epilogue;
  std::function<double(double acc, const std::vector<double>& operands)> reference;
};

// UserError when the text does not parse, has not exactly one output, does not use
// acc, or reads more than Epilogue::kMaxOperands operands.
LoweredEpilogue epilogue_from_ir(const std::string& text, DType dtype);

}  // namespace kjit::matmul
