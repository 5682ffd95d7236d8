#include "kjit/compiler/ir/graph.h"

#include <fmt/format.h>

#include <cmath>

#include "kjit/compiler/ir/printer.h"
#include "kjit/support/error.h"

namespace kjit::ir {

bool is_identifier(const std::string& name) {
  if (name.empty() || name == "return" || name == "true" || name == "false") return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name[0])) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string describe(const Graph& graph, int id) {
  const Node& n = graph.node(id);
  if (n.op == OpCode::Input) return n.name;
  if (n.op == OpCode::Const) return format_literal(n.value, n.dtype);
  return std::string(op_info(n.op).name) + "#" + std::to_string(id);
}

namespace {

std::string operand_list(const Graph& graph, const Node& node) {
  std::string out;
  for (size_t i = 0; i < node.operands.size(); ++i) {
    const Node& operand = graph.node(node.operands[i]);
    if (i) out += " and ";
    out += describe(graph, node.operands[i]) + ":" + to_string(operand.dtype) +
           to_string(operand.shape);
  }
  return out;
}

// The promoted dtype of the operands at `indices`; weak operands (literals and ops
// over literals only) count only when every operand is weak: they adapt to the
// others, except that a floating weak operand makes an integer result f32.
DType promote_operands(const Graph& graph, const Node& node, std::vector<size_t> indices) {
  bool have = false, float_literal = false;
  DType result = DType::Bool;
  for (size_t i : indices) {
    const Node& operand = graph.node(node.operands[i]);
    if (operand.weak) {
      float_literal = float_literal || is_floating(operand.dtype);
      continue;
    }
    result = have ? promote(result, operand.dtype) : operand.dtype;
    have = true;
  }
  if (!have) {
    for (size_t i : indices) {
      const Node& operand = graph.node(node.operands[i]);
      result = have ? promote(result, operand.dtype) : operand.dtype;
      have = true;
    }
  }
  if (float_literal && !is_floating(result)) result = DType::F32;
  return result;
}

}  // namespace

std::string infer(const Graph& graph, Node& node) {
  const OpInfo& info = op_info(node.op);
  if (info.arity == 0) return "";
  if (static_cast<int>(node.operands.size()) != info.arity)
    return std::string(info.name) + " takes " + std::to_string(info.arity) + " operand(s), got " +
           std::to_string(node.operands.size());
  Shape shape;
  for (size_t i = 0; i < node.operands.size(); ++i) {
    int id = node.operands[i];
    if (id < 0 || static_cast<size_t>(id) >= graph.nodes().size())
      return std::string(info.name) + ": operand " + std::to_string(i) + " is not an earlier node";
    const Node& operand = graph.node(id);
    std::optional<Shape> b = broadcast(shape, operand.shape);
    if (!b)
      return std::string(info.name) + ": shapes do not broadcast: " + operand_list(graph, node);
    shape = *b;
  }
  node.shape = shape;
  node.weak = node.op != OpCode::Cast;
  for (int id : node.operands) node.weak = node.weak && graph.node(id).weak;
  std::vector<size_t> all;
  for (size_t i = 0; i < node.operands.size(); ++i) all.push_back(i);
  switch (info.rule) {
    case TypeRule::Leaf:
      break;
    case TypeRule::FloatMath:
    case TypeRule::FloatArith: {
      DType d = promote_operands(graph, node, all);
      node.dtype = is_floating(d) ? d : DType::F32;
      break;
    }
    case TypeRule::Arithmetic:
      node.dtype = promote(promote_operands(graph, node, all), DType::I32);
      break;
    case TypeRule::Compare:
      node.dtype = DType::Bool;
      break;
    case TypeRule::Select: {
      const Node& condition = graph.node(node.operands[0]);
      if (condition.dtype != DType::Bool)
        return "select: the condition must be bool, got " + describe(graph, node.operands[0]) +
               ":" + to_string(condition.dtype) + " (compare it, e.g. gt(c, 0), or cast(c, bool))";
      node.dtype = promote_operands(graph, node, {1, 2});
      break;
    }
    case TypeRule::Cast:
      node.dtype = node.cast_to;
      break;
  }
  return "";
}

Value Graph::input(const std::string& name, DType dtype, Shape shape) {
  if (!is_identifier(name))
    throw UserError("input name '" + name + "' is not an identifier",
                    "use letters, digits and _, starting with a letter or _");
  if (find_input(name) >= 0) throw UserError("input '" + name + "' is declared twice");
  Node node;
  node.op = OpCode::Input;
  node.name = name;
  node.dtype = dtype;
  node.shape = std::move(shape);
  return Value{this, add_node_unchecked(std::move(node))};
}

Value Graph::constant(double value, DType dtype) {
  if (!std::isfinite(value)) throw UserError("literal " + std::to_string(value) + " is not finite");
  Node node;
  if (dtype == DType::F16 || dtype == DType::BF16)
    throw UserError("a literal is f32, i32 or bool; write cast(literal, " +
                    std::string(ir::to_string(dtype)) + ")");
  // An f32 literal holds the f32 value the kernels compute with (0.1 is 0.1f): the
  // reference and constant folding read this value, so `x > 0.1` agrees with the
  // kernel at x = 0.1f.
  if (dtype == DType::F32) {
    const float rounded = static_cast<float>(value);
    if (!std::isfinite(rounded))
      throw UserError(fmt::format("literal {} is past the f32 range", value));
    value = rounded;
  }
  node.op = OpCode::Const;
  node.value = value;
  node.dtype = dtype;
  node.weak = true;
  nodes_.push_back(std::move(node));
  return Value{this, static_cast<int>(nodes_.size()) - 1};
}

Value Graph::apply(OpCode op, const std::vector<Value>& operands, DType cast_to) {
  Node node;
  node.op = op;
  node.cast_to = cast_to;
  for (const Value& v : operands) {
    if (v.graph != this)
      throw UserError("an operand of " + std::string(op_info(op).name) +
                      " belongs to another graph");
    node.operands.push_back(v.id);
  }
  std::string error = infer(*this, node);
  if (!error.empty()) throw UserError(error);
  nodes_.push_back(std::move(node));
  return Value{this, static_cast<int>(nodes_.size()) - 1};
}

void Graph::output(const std::string& name, Value value) {
  if (!is_identifier(name)) throw UserError("output name '" + name + "' is not an identifier");
  if (value.graph != this) throw UserError("output '" + name + "' belongs to another graph");
  if (output_names_.count(name)) throw UserError("output '" + name + "' is assigned twice");
  if (find_input(name) >= 0)
    throw UserError("output '" + name + "' has the name of an input", "rename one of them");
  outputs_.emplace_back(name, value.id);
  output_names_.insert(name);
}

void Graph::set_outputs(std::vector<std::pair<std::string, int>> outputs) {
  outputs_ = std::move(outputs);
  output_names_.clear();
  for (const auto& [name, id] : outputs_) output_names_.insert(name);
}

std::vector<int> Graph::inputs() const {
  std::vector<int> ids;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op == OpCode::Input) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

int Graph::find_input(const std::string& name) const {
  auto it = input_ids_.find(name);
  return it == input_ids_.end() ? -1 : it->second;
}

int Graph::add_node_unchecked(Node node) {
  const int id = static_cast<int>(nodes_.size());
  // The first input of a name is the one lookups find (verify() rejects a second).
  if (node.op == OpCode::Input) input_ids_.emplace(node.name, id);
  nodes_.push_back(std::move(node));
  return id;
}

Shape Graph::output_shape() const {
  Shape shape;
  for (const auto& [name, id] : outputs_) {
    std::optional<Shape> b = broadcast(shape, node(id).shape);
    if (!b)
      throw UserError("outputs do not broadcast to one shape: " + name + ":" +
                      to_string(node(id).shape) + " vs " + to_string(shape));
    shape = *b;
  }
  return shape;
}

namespace {
Value unary(OpCode op, Value a) {
  return a.graph->apply(op, {a});
}
Value binary(OpCode op, Value a, Value b) {
  if (a.graph != b.graph) throw UserError("operands belong to different graphs");
  return a.graph->apply(op, {a, b});
}
Value literal(Graph* graph, double value) {
  return graph->constant(value, value == std::floor(value) && std::abs(value) < 2147483648.0
                                    ? DType::I32
                                    : DType::F32);
}
}  // namespace

Value neg(Value a) {
  return unary(OpCode::Neg, a);
}
Value abs(Value a) {
  return unary(OpCode::Abs, a);
}
Value exp(Value a) {
  return unary(OpCode::Exp, a);
}
Value exp2(Value a) {
  return unary(OpCode::Exp2, a);
}
Value log(Value a) {
  return unary(OpCode::Log, a);
}
Value log2(Value a) {
  return unary(OpCode::Log2, a);
}
Value sqrt(Value a) {
  return unary(OpCode::Sqrt, a);
}
Value rsqrt(Value a) {
  return unary(OpCode::Rsqrt, a);
}
Value sin(Value a) {
  return unary(OpCode::Sin, a);
}
Value cos(Value a) {
  return unary(OpCode::Cos, a);
}
Value tanh(Value a) {
  return unary(OpCode::Tanh, a);
}
Value sigmoid(Value a) {
  return unary(OpCode::Sigmoid, a);
}
Value relu(Value a) {
  return unary(OpCode::Relu, a);
}
Value gelu(Value a) {
  return unary(OpCode::Gelu, a);
}
Value gelu_tanh(Value a) {
  return unary(OpCode::GeluTanh, a);
}
Value silu(Value a) {
  return unary(OpCode::Silu, a);
}
Value softplus(Value a) {
  return unary(OpCode::Softplus, a);
}
Value floor(Value a) {
  return unary(OpCode::Floor, a);
}
Value ceil(Value a) {
  return unary(OpCode::Ceil, a);
}
Value pow(Value a, Value b) {
  return binary(OpCode::Pow, a, b);
}
Value pow(Value a, double b) {
  return binary(OpCode::Pow, a, literal(a.graph, b));
}
Value max(Value a, Value b) {
  return binary(OpCode::Max, a, b);
}
Value min(Value a, Value b) {
  return binary(OpCode::Min, a, b);
}
Value select(Value c, Value a, Value b) {
  return c.graph->apply(OpCode::Select, {c, a, b});
}
Value where(Value c, Value a, Value b) {
  return select(c, a, b);
}
Value fma(Value a, Value b, Value c) {
  return a.graph->apply(OpCode::Fma, {a, b, c});
}
Value cast(Value a, DType dtype) {
  return a.graph->apply(OpCode::Cast, {a}, dtype);
}
Value operator-(Value a) {
  return neg(a);
}
Value operator+(Value a, Value b) {
  return binary(OpCode::Add, a, b);
}
Value operator-(Value a, Value b) {
  return binary(OpCode::Sub, a, b);
}
Value operator*(Value a, Value b) {
  return binary(OpCode::Mul, a, b);
}
Value operator/(Value a, Value b) {
  return binary(OpCode::Div, a, b);
}
Value operator+(Value a, double b) {
  return a + literal(a.graph, b);
}
Value operator-(Value a, double b) {
  return a - literal(a.graph, b);
}
Value operator*(Value a, double b) {
  return a * literal(a.graph, b);
}
Value operator/(Value a, double b) {
  return a / literal(a.graph, b);
}
Value operator+(double a, Value b) {
  return literal(b.graph, a) + b;
}
Value operator-(double a, Value b) {
  return literal(b.graph, a) - b;
}
Value operator*(double a, Value b) {
  return literal(b.graph, a) * b;
}
Value operator/(double a, Value b) {
  return literal(b.graph, a) / b;
}
Value operator<(Value a, Value b) {
  return binary(OpCode::Lt, a, b);
}
Value operator<=(Value a, Value b) {
  return binary(OpCode::Le, a, b);
}
Value operator>(Value a, Value b) {
  return binary(OpCode::Gt, a, b);
}
Value operator>=(Value a, Value b) {
  return binary(OpCode::Ge, a, b);
}
Value operator==(Value a, Value b) {
  return binary(OpCode::Eq, a, b);
}
Value operator!=(Value a, Value b) {
  return binary(OpCode::Ne, a, b);
}

}  // namespace kjit::ir
