#include "kjit/compiler/passes/derivative.h"

#include <optional>
#include <vector>

#include "kjit/support/error.h"

namespace kjit::ir {

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kInvSqrtTwoPi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;
constexpr double kGeluTanhCubic = 0.044715;

// A node's derivative: a value, or nothing where it is 0 (no node is built).
using Derivative = std::optional<Value>;

}  // namespace

Graph with_derivative(const Graph& graph, const std::string& wrt) {
  const int wrt_id = graph.find_input(wrt);
  if (wrt_id < 0)
    throw UserError("cannot differentiate with respect to '" + wrt + "': no such input",
                    "the inputs are the names the expression reads");
  if (!is_floating(graph.node(wrt_id).dtype))
    throw UserError("cannot differentiate with respect to '" + wrt + "': it is " +
                    to_string(graph.node(wrt_id).dtype) + ", not a floating type");

  // The original nodes first, with the same ids, so that derivatives can use them.
  Graph out;
  for (const Node& node : graph.nodes()) out.add_node_unchecked(node);
  auto value = [&](int id) { return out.value(id); };
  auto zero = [&] { return out.constant(0.0); };

  std::vector<Derivative> d(graph.nodes().size());
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.node(static_cast<int>(i));
    if (static_cast<int>(i) == wrt_id) {
      d[i] = out.constant(1.0);
      continue;
    }
    if (node.op == OpCode::Input || node.op == OpCode::Const || !is_floating(node.dtype)) continue;
    const Value y = value(static_cast<int>(i));
    auto operand = [&](int k) { return value(node.operands[static_cast<size_t>(k)]); };
    auto derivative = [&](int k) { return d[static_cast<size_t>(node.operands[k])]; };
    const Derivative da = derivative(0);
    // Unary ops: y = f(a), dy = f'(a) da.
    auto chain = [&](Value slope) -> Derivative { return slope * *da; };
    switch (node.op) {
      case OpCode::Neg:
        if (da) d[i] = -*da;
        break;
      case OpCode::Abs:
        if (da) d[i] = select(operand(0) < zero(), -*da, *da);
        break;
      case OpCode::Exp:
        if (da) d[i] = chain(y);
        break;
      case OpCode::Exp2:
        if (da) d[i] = chain(y * kLn2);
        break;
      case OpCode::Log:
        if (da) d[i] = *da / operand(0);
        break;
      case OpCode::Log2:
        if (da) d[i] = *da / (operand(0) * kLn2);
        break;
      case OpCode::Sqrt:
        if (da) d[i] = *da * 0.5 / y;
        break;
      case OpCode::Rsqrt:
        if (da) d[i] = chain(-0.5 * y * y * y);
        break;
      case OpCode::Sin:
        if (da) d[i] = chain(cos(operand(0)));
        break;
      case OpCode::Cos:
        if (da) d[i] = chain(-sin(operand(0)));
        break;
      case OpCode::Tanh:
        if (da) d[i] = chain(1.0 - y * y);
        break;
      case OpCode::Sigmoid:
        if (da) d[i] = chain(y * (1.0 - y));
        break;
      case OpCode::Relu:
        if (da) d[i] = select(operand(0) > zero(), *da, zero());
        break;
      case OpCode::Gelu:
        if (da) {
          // gelu(x) = x Phi(x): Phi(x) + x phi(x), Phi = gelu(x) / x (1/2 at 0).
          const Value x = operand(0);
          const Value phi_cdf = select(x == zero(), out.constant(0.5), y / x);
          d[i] = chain(phi_cdf + x * (exp(-0.5 * x * x) * kInvSqrtTwoPi));
        }
        break;
      case OpCode::GeluTanh:
        if (da) {
          // x sigmoid(2u), u = sqrt(2/pi) (x + c x^3): sigma + x sigma (1 - sigma) 2u'.
          const Value x = operand(0);
          const Value u = kSqrtTwoOverPi * (x + kGeluTanhCubic * x * x * x);
          const Value du = kSqrtTwoOverPi * (1.0 + 3.0 * kGeluTanhCubic * x * x);
          const Value sigma = sigmoid(2.0 * u);
          d[i] = chain(sigma + x * sigma * (1.0 - sigma) * (2.0 * du));
        }
        break;
      case OpCode::Silu:
        if (da) {
          const Value sigma = sigmoid(operand(0));
          d[i] = chain(sigma + operand(0) * sigma * (1.0 - sigma));
        }
        break;
      case OpCode::Softplus:
        if (da) d[i] = chain(sigmoid(operand(0)));
        break;
      case OpCode::Floor:
      case OpCode::Ceil:
        break;
      case OpCode::Add:
      case OpCode::Sub: {
        const Derivative db = derivative(1);
        const bool add = node.op == OpCode::Add;
        if (da && db)
          d[i] = add ? *da + *db : *da - *db;
        else if (da)
          d[i] = *da;
        else if (db)
          d[i] = add ? *db : -*db;
        break;
      }
      case OpCode::Mul: {
        const Derivative db = derivative(1);
        if (da && db)
          d[i] = *da * operand(1) + operand(0) * *db;
        else if (da)
          d[i] = *da * operand(1);
        else if (db)
          d[i] = operand(0) * *db;
        break;
      }
      case OpCode::Div: {
        // y = a / b: dy = (da - y db) / b.
        const Derivative db = derivative(1);
        if (da && db)
          d[i] = (*da - y * *db) / operand(1);
        else if (da)
          d[i] = *da / operand(1);
        else if (db)
          d[i] = -(y * *db) / operand(1);
        break;
      }
      case OpCode::Pow: {
        // y = a^b: dy = b a^(b-1) da + y log(a) db.
        const Derivative db = derivative(1);
        Derivative sum;
        if (da) sum = operand(1) * pow(operand(0), operand(1) - 1.0) * *da;
        if (db) {
          const Value term = y * log(operand(0)) * *db;
          sum = sum ? *sum + term : term;
        }
        d[i] = sum;
        break;
      }
      case OpCode::Max:
      case OpCode::Min: {
        const Derivative db = derivative(1);
        if (!da && !db) break;
        const Value first =
            node.op == OpCode::Max ? operand(0) >= operand(1) : operand(0) <= operand(1);
        d[i] = select(first, da ? *da : zero(), db ? *db : zero());
        break;
      }
      case OpCode::Select: {
        const Derivative dt = derivative(1), df = derivative(2);
        if (dt || df) d[i] = select(operand(0), dt ? *dt : zero(), df ? *df : zero());
        break;
      }
      case OpCode::Fma: {
        // a b + c.
        const Derivative db = derivative(1), dc = derivative(2);
        Derivative sum;
        if (da) sum = *da * operand(1);
        if (db) sum = sum ? *sum + operand(0) * *db : operand(0) * *db;
        if (dc) sum = sum ? *sum + *dc : *dc;
        d[i] = sum;
        break;
      }
      case OpCode::Cast:
        if (da) d[i] = cast(*da, node.cast_to);
        break;
      case OpCode::Lt:
      case OpCode::Le:
      case OpCode::Gt:
      case OpCode::Ge:
      case OpCode::Eq:
      case OpCode::Ne:
      case OpCode::Input:
      case OpCode::Const:
        break;
    }
  }

  std::vector<std::pair<std::string, int>> outputs;
  for (const auto& [name, id] : graph.outputs()) {
    bool taken = graph.find_input("d_" + name) >= 0;  // inputs and outputs share names
    for (const auto& other : graph.outputs()) taken = taken || other.first == "d_" + name;
    if (taken)
      throw UserError("cannot name the derivative of output '" + name + "' d_" + name +
                          ": an input or output has that name",
                      "rename it");
    outputs.emplace_back(name, id);
    const Derivative& dy = d[static_cast<size_t>(id)];
    outputs.emplace_back("d_" + name, dy ? dy->id : out.constant(0.0).id);
  }
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace kjit::ir
