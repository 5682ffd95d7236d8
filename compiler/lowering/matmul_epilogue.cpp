#include "kjit/compiler/lowering/matmul_epilogue.h"

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"

namespace kjit::matmul {

namespace {

DType matmul_dtype(ir::DType dtype, const std::string& name) {
  switch (dtype) {
    case ir::DType::F32:
      return DType::F32;
    case ir::DType::F16:
      return DType::F16;
    case ir::DType::BF16:
      return DType::BF16;
    default:
      break;
  }
  throw UserError("epilogue operand '" + name + "' is " + ir::to_string(dtype) +
                      "; matmul epilogue operands are f32, f16 or bf16",
                  "declare it as " + name + ":bf16[n] (or f16, f32)");
}

OperandKind kind_of(const ir::Node& input) {
  const ir::Shape& shape = input.shape;
  auto is = [](const ir::Dim& d, const char* symbol) { return d.symbol == symbol; };
  if (shape.size() == 1 && is(shape[0], "n")) return OperandKind::ColumnVector;
  if (shape.size() == 2 && shape[0].is_one() && is(shape[1], "n")) return OperandKind::ColumnVector;
  if (shape.size() == 2 && is(shape[0], "m") && shape[1].is_one()) return OperandKind::RowVector;
  if (shape.size() == 2 && is(shape[0], "m") && is(shape[1], "n")) return OperandKind::Tensor;
  throw UserError("epilogue operand '" + input.name + "' has shape " + ir::to_string(shape) +
                      "; a matmul epilogue operand is [n] (per column), [m,1] (per row) or "
                      "[m,n] (a full tensor)",
                  "declare it, e.g. " + input.name + ":bf16[n]");
}

}  // namespace

LoweredEpilogue epilogue_from_ir(const std::string& text, DType dtype) {
  // `acc` is declared first so that it is the device function's first parameter.
  ir::ParseOptions options;
  options.default_dtype = to_ir(dtype);
  options.default_shape = {ir::Dim::named("n")};
  options.inputs = {{"acc", ir::DType::F32, {ir::Dim::named("m"), ir::Dim::named("n")}}};
  const ir::Graph parsed = ir::parse(text, options);
  const ir::Graph graph = ir::optimize(parsed);
  if (graph.outputs().size() != 1)
    throw UserError("a matmul epilogue computes one output; '" + text + "' computes " +
                    std::to_string(graph.outputs().size()));
  const int acc_id = graph.inputs().empty() ? -1 : graph.inputs()[0];
  bool uses_acc = false;
  for (const ir::Node& node : graph.nodes())
    for (int operand : node.operands) uses_acc = uses_acc || operand == acc_id;
  for (const auto& output : graph.outputs()) uses_acc = uses_acc || output.second == acc_id;
  if (acc_id < 0 || graph.node(acc_id).name != "acc" || !uses_acc)
    throw UserError("the epilogue '" + text + "' does not use acc, the matmul's result",
                    "write it over acc, e.g. 'gelu(acc + bias)'");
  LoweredEpilogue out;
  Epilogue& e = out.epilogue;
  e.text = ir::canonical_text(text);  // one key per meaning, however it was typed
  e.function_name = "kjit_epilogue_fn";
  e.function_source = ir::emit_epilogue_function(graph, e.function_name);
  e.function_source_16bit =
      ir::emit_epilogue_function(graph, e.function_name, ir::ScalarMath::Rounded16);
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    const ir::Node& input = graph.node(graph.inputs()[i]);
    e.operands.push_back({input.name, kind_of(input), matmul_dtype(input.dtype, input.name)});
  }
  if (static_cast<int>(e.operands.size()) > Epilogue::kMaxOperands)
    throw UserError("the epilogue '" + text + "' reads " + std::to_string(e.operands.size()) +
                    " operands besides acc; at most " + std::to_string(Epilogue::kMaxOperands));
  // The fp64 twin: the graph's nodes in order, with the interpreter's semantics.
  out.reference = [graph](double acc, const std::vector<double>& operands) {
    std::vector<double> inputs = {acc};
    inputs.insert(inputs.end(), operands.begin(), operands.end());
    return ir::evaluate_point(graph, inputs)[static_cast<size_t>(graph.outputs()[0].second)];
  };
  return out;
}

}  // namespace kjit::matmul
