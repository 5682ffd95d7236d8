#include "kjit/compiler/ir/printer.h"

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

std::vector<std::string> value_names(const Graph& graph) {
  std::vector<std::string> names(graph.nodes().size());
  std::set<std::string> taken;
  for (int id : graph.inputs()) {
    names[static_cast<size_t>(id)] = graph.node(id).name;
    taken.insert(graph.node(id).name);
  }
  // An op node is named after its first output, else a fresh temporary.
  std::map<int, std::string> output_name;
  for (const auto& [name, id] : graph.outputs()) {
    taken.insert(name);
    if (!output_name.count(id) && graph.node(id).op != OpCode::Input &&
        graph.node(id).op != OpCode::Const)
      output_name[id] = name;
  }
  int temporary = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const OpCode op = graph.nodes()[i].op;
    if (op == OpCode::Input || op == OpCode::Const) continue;
    auto named = output_name.find(static_cast<int>(i));
    if (named != output_name.end()) {
      names[i] = named->second;
      continue;
    }
    do names[i] = "_" + std::to_string(++temporary);
    while (taken.count(names[i]));
  }
  return names;
}

namespace {

std::string operand_text(const Graph& graph, int id, const std::vector<std::string>& names) {
  const Node& n = graph.node(id);
  return n.op == OpCode::Const ? format_literal(n.value, n.dtype) : names[static_cast<size_t>(id)];
}

}  // namespace

std::string node_line(const Graph& graph, int id, const std::vector<std::string>& names) {
  const Node& n = graph.node(id);
  std::string line = names[static_cast<size_t>(id)] + " = " + op_info(n.op).name + "(";
  for (size_t k = 0; k < n.operands.size(); ++k)
    line += (k ? ", " : "") + operand_text(graph, n.operands[k], names);
  if (n.op == OpCode::Cast) line += std::string(", ") + to_string(n.cast_to);
  return line + ")";
}

std::string print(const Graph& graph) {
  const std::vector<std::string> names = value_names(graph);
  std::string out;
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    out += n.name + ":" + to_string(n.dtype) + to_string(n.shape) + "\n";
  }
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const OpCode op = graph.nodes()[i].op;
    if (op != OpCode::Input && op != OpCode::Const)
      out += node_line(graph, static_cast<int>(i), names) + "\n";
  }
  std::string returned;
  for (const auto& [name, id] : graph.outputs()) {
    if (names[static_cast<size_t>(id)] != name)
      out += name + " = " + operand_text(graph, id, names) + "\n";
    if (!returned.empty()) returned += ", ";
    returned += name;
  }
  out += "return " + returned + "\n";
  return out;
}

}  // namespace kjit::ir
