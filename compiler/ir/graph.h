// The IR graph: nodes in topological order (every operand comes before its user),
// named inputs and named outputs. Nodes are checked when added (dtype and shape
// rules from the op table), so a Graph built through this API is always valid;
// verify() re-checks graphs that passes produce.
//
// Builder:
//   Graph g;
//   Value x = g.input("x", DType::BF16, {Dim::named("n")});
//   Value y = x * sigmoid(x);
//   g.output("y", y);
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kjit/compiler/ir/dtype.h"
#include "kjit/compiler/ir/op_table.h"
#include "kjit/compiler/ir/shape.h"

namespace kjit::ir {

struct Node {
  OpCode op = OpCode::Const;
  std::vector<int> operands;  // node ids, all smaller than this node's
  DType dtype = DType::F32;
  Shape shape;                 // the broadcast of the operands' shapes; [] for a constant
  std::string name;            // Input: its name
  double value = 0;            // Const: its value
  DType cast_to = DType::F32;  // Cast: the target (equals dtype)
  // A literal, or an op over literals only (2.0 * 3.0): it adapts to the dtype of the
  // other operands it meets, so x_bf16 * (2.0 * 3.0) stays bf16. Derived by infer(),
  // and kept by constant folding, so folding never changes a dtype. A cast is never weak.
  bool weak = false;
};

class Graph;

// A handle to a node while building.
struct Value {
  Graph* graph = nullptr;
  int id = -1;
};

class Graph {
 public:
  // Adds a named input; a UserError when the name is taken or not an identifier.
  Value input(const std::string& name, DType dtype, Shape shape);
  // A literal; integral literals are i32, others f32. A literal takes the dtype of
  // the other operands it meets (x_bf16 * 2.0 stays bf16).
  Value constant(double value, DType dtype = DType::F32);
  // Applies an op; a UserError names both sides of a dtype or shape mismatch.
  Value apply(OpCode op, const std::vector<Value>& operands, DType cast_to = DType::F32);
  // Marks `value` as the output `name`.
  void output(const std::string& name, Value value);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<std::pair<std::string, int>>& outputs() const { return outputs_; }
  // Input node ids in declaration order.
  std::vector<int> inputs() const;
  // The input node named `name`, or -1.
  int find_input(const std::string& name) const;
  Value value(int id) { return Value{this, id}; }

  // For passes and tests: appends a node as is (no checks) / replaces the outputs.
  int add_node_unchecked(Node node);
  void set_outputs(std::vector<std::pair<std::string, int>> outputs);

  // The output shape of the kernel: the broadcast of every output's shape.
  Shape output_shape() const;

 private:
  std::vector<Node> nodes_;
  std::vector<std::pair<std::string, int>> outputs_;
  // Name lookups in constant time, so building a graph of n nodes is linear:
  // the parser looks up every name it reads.
  std::unordered_map<std::string, int> input_ids_;
  std::unordered_set<std::string> output_names_;
};

// How `node` would be typed from its operands in `graph`: sets dtype and shape, or
// returns a message naming the op, the operands, their dtypes and shapes.
std::string infer(const Graph& graph, Node& node);
// How a node is named in messages: the input's name, the literal, or "op#id".
std::string describe(const Graph& graph, int id);
// Whether `name` is an identifier ([A-Za-z_][A-Za-z0-9_]*) and not a keyword of the
// text form (return, true, false).
bool is_identifier(const std::string& name);

// Builder functions and operators (kjit::sin(x), x * y, x + 1.0, ...).
Value neg(Value a);
Value abs(Value a);
Value exp(Value a);
Value exp2(Value a);
Value log(Value a);
Value log2(Value a);
Value sqrt(Value a);
Value rsqrt(Value a);
Value sin(Value a);
Value cos(Value a);
Value tanh(Value a);
Value sigmoid(Value a);
Value relu(Value a);
Value gelu(Value a);
Value gelu_tanh(Value a);
Value silu(Value a);
Value softplus(Value a);
Value floor(Value a);
Value ceil(Value a);
Value pow(Value a, Value b);
Value pow(Value a, double b);
Value max(Value a, Value b);
Value min(Value a, Value b);
Value select(Value condition, Value a, Value b);
Value where(Value condition, Value a, Value b);
Value fma(Value a, Value b, Value c);
Value cast(Value a, DType dtype);
Value operator-(Value a);
Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator+(Value a, double b);
Value operator-(Value a, double b);
Value operator*(Value a, double b);
Value operator/(Value a, double b);
Value operator+(double a, Value b);
Value operator-(double a, Value b);
Value operator*(double a, Value b);
Value operator/(double a, Value b);
Value operator<(Value a, Value b);
Value operator<=(Value a, Value b);
Value operator>(Value a, Value b);
Value operator>=(Value a, Value b);
Value operator==(Value a, Value b);
Value operator!=(Value a, Value b);

}  // namespace kjit::ir

namespace kjit {
// The builder is spelled kjit::sin(x), kjit::Graph, ... in user code.
using ir::abs, ir::ceil, ir::cos, ir::exp, ir::exp2, ir::floor, ir::gelu, ir::gelu_tanh, ir::log,
    ir::log2, ir::max, ir::min, ir::neg, ir::pow, ir::relu, ir::rsqrt, ir::select, ir::sigmoid,
    ir::silu, ir::sin, ir::softplus, ir::sqrt, ir::tanh, ir::where, ir::fma, ir::cast;
using ir::DType;
using ir::Graph;
using ir::Value;
}  // namespace kjit
