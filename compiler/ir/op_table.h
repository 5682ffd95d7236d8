// The op table: one entry per IR op with its name, arity, type rule, CPU
// reference (fp64) and CUDA spelling. The verifier, the interpreter, the printer,
// the parser and the CUDA emitter all read this table; adding an op is one entry.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::ir {

enum class OpCode {
  Input,
  Const,
  // unary
  Neg,
  Abs,
  Exp,
  Exp2,
  Log,
  Log2,
  Sqrt,
  Rsqrt,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,
  GeluTanh,
  Silu,
  Softplus,
  Floor,
  Ceil,
  // binary
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  // ternary
  Select,
  Fma,
  // unary with a target dtype
  Cast,
};

// How an op's result dtype follows from its operands' (see dtype.h promote()).
enum class TypeRule {
  Leaf,        // Input, Const: the dtype is given
  FloatMath,   // the operand's dtype if floating, else f32 (sin of an i32 is f32)
  Arithmetic,  // the promoted operand dtype, at least i32 (bool + bool is i32)
  FloatArith,  // the promoted operand dtype if floating, else f32 (i32 / i32 is f32)
  Compare,     // bool
  Select,      // operand 0 must be bool; the promoted dtype of operands 1 and 2
  Cast,        // the node's target dtype
};

struct OpInfo {
  OpCode code;
  const char* name;  // as written in the text form: "sigmoid", "add", "cast"
  int arity;         // operands; 0 for leaves
  TypeRule rule;
  // fp64 reference on the operands (already converted to double).
  double (*reference)(const double* operands);
  // Exact integer reference when the result is i32 (add, mul, ...), else nullptr.
  int64_t (*integer_reference)(const int64_t* operands);
  // CUDA C for a float result, {0} {1} {2} standing for the operands.
  const char* cuda_float;
  // CUDA C for an int result, or nullptr when the op always gives a float or bool.
  const char* cuda_int;
  // Operand values on which the op is well conditioned, for random tests.
  double domain_lo, domain_hi;
  const char* description;
};

// Every op, in OpCode order.
const std::vector<OpInfo>& op_table();
const OpInfo& op_info(OpCode code);
// The op named `name` in the text form, or nullptr.
const OpInfo* find_op(std::string_view name);
// Up to `count` op names nearest to `name` (edit distance), for "did you mean".
std::vector<std::string> nearest_op_names(std::string_view name, size_t count = 3);
// Insertions, deletions and substitutions that turn `a` into `b` (Levenshtein).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kjit::ir
