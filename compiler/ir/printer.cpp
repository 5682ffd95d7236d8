#include "compiler/ir/printer.h"

#include <charconv>
#include <cmath>
#include <map>
#include <set>

namespace kjit::ir {

std::string format_literal(double value, DType dtype) {
  if (dtype == DType::Bool) return value != 0 ? "true" : "false";
  if (dtype == DType::I32) return std::to_string(static_cast<int64_t>(value));
  char buffer[64];
  // The shortest text that reads back to the same double.
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string print(const Graph& graph) {
  std::string out;
  std::map<int, std::string> names;
  std::set<std::string> taken;
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    names[id] = n.name;
    taken.insert(n.name);
    out += n.name + ":" + to_string(n.dtype) + to_string(n.shape) + "\n";
  }
  // An op node is printed under its first output's name, else a fresh temporary.
  std::map<int, std::string> output_name;
  for (const auto& [name, id] : graph.outputs()) {
    taken.insert(name);
    if (!output_name.count(id) && graph.node(id).op != OpCode::Input &&
        graph.node(id).op != OpCode::Const)
      output_name[id] = name;
  }
  int temporary = 0;
  auto operand = [&](int id) {
    const Node& n = graph.node(id);
    if (n.op == OpCode::Const) return format_literal(n.value, n.dtype);
    return names.at(id);
  };
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    int id = static_cast<int>(i);
    const Node& n = graph.node(id);
    if (n.op == OpCode::Input || n.op == OpCode::Const) continue;
    std::string name;
    if (output_name.count(id)) {
      name = output_name[id];
    } else {
      do name = "_" + std::to_string(++temporary);
      while (taken.count(name));
    }
    names[id] = name;
    std::string line = name + " = " + op_info(n.op).name + "(";
    for (size_t k = 0; k < n.operands.size(); ++k) {
      if (k) line += ", ";
      line += operand(n.operands[k]);
    }
    if (n.op == OpCode::Cast) line += std::string(", ") + to_string(n.cast_to);
    out += line + ")\n";
  }
  std::string returned;
  for (const auto& [name, id] : graph.outputs()) {
    if (!names.count(id) || names[id] != name) out += name + " = " + operand(id) + "\n";
    if (!returned.empty()) returned += ", ";
    returned += name;
  }
  out += "return " + returned + "\n";
  return out;
}

}  // namespace kjit::ir
