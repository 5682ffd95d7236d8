#include "kjit/compiler/interpreter/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kjit/support/error.h"
#include "kjit/support/half.h"

namespace kjit::ir {

double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::F32:
      return static_cast<float>(value);
    case DType::F16:
      return f16_to_f32(f32_to_f16(static_cast<float>(value)));
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(static_cast<float>(value)));
    case DType::I32: {
      // Like cvt.rzi.s32.f32: truncate, saturate, NaN -> 0.
      if (std::isnan(value)) return 0;
      double t = std::trunc(value);
      if (t > 2147483647.0) return 2147483647.0;
      if (t < -2147483648.0) return -2147483648.0;
      return t;
    }
    case DType::Bool:
      return value != 0 ? 1 : 0;
  }
  return value;
}

double evaluate_node(const Node& node, const double* operands) {
  const OpInfo& info = op_info(node.op);
  if (node.op == OpCode::Const) return node.value;
  if (node.op == OpCode::Cast) {
    // A cast to f32 from f32 is the identity; to a narrower float it rounds once.
    return round_to(node.cast_to, operands[0]);
  }
  if (node.dtype == DType::I32 && info.integer_reference) {
    int64_t integers[3] = {0, 0, 0};
    for (int i = 0; i < info.arity; ++i) integers[i] = static_cast<int64_t>(operands[i]);
    return static_cast<double>(info.integer_reference(integers));
  }
  return info.reference(operands);
}

std::vector<double> evaluate_point(const Graph& graph, const std::vector<double>& inputs) {
  if (inputs.size() != graph.inputs().size())
    throw InternalError("evaluate_point: " + std::to_string(inputs.size()) + " values for " +
                        std::to_string(graph.inputs().size()) + " inputs");
  std::vector<double> values(graph.nodes().size());
  size_t next = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.node(static_cast<int>(i));
    if (node.op == OpCode::Input) {
      values[i] = inputs[next++];
    } else if (node.op == OpCode::Const) {
      values[i] = node.value;
    } else {
      double operands[3] = {};
      for (size_t k = 0; k < node.operands.size() && k < 3; ++k)
        operands[k] = values[static_cast<size_t>(node.operands[k])];
      values[i] = evaluate_node(node, operands);
    }
  }
  return values;
}

std::pair<double, double> input_domain(const Graph& graph, int input_id) {
  double lo = -3, hi = 3;
  for (const Node& n : graph.nodes()) {
    for (int operand : n.operands) {
      if (operand != input_id) continue;
      const OpInfo& info = op_info(n.op);
      lo = std::max(lo, info.domain_lo);
      hi = std::min(hi, info.domain_hi);
    }
  }
  if (lo >= hi) return {0.5, 2};
  return {lo, hi};
}

std::map<std::string, HostTensor> interpret(const Graph& graph,
                                            const std::map<std::string, HostTensor>& inputs) {
  Bindings bindings;
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    auto it = inputs.find(n.name);
    if (it == inputs.end()) throw UserError("the reference needs input '" + n.name + "'");
    const HostTensor& t = it->second;
    if (t.shape.size() != n.shape.size())
      throw UserError("input '" + n.name + "' has rank " + std::to_string(t.shape.size()) +
                      ", the graph declares " + to_string(n.shape));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const Dim& dim = n.shape[d];
      if (!dim.is_symbolic()) {
        if (dim.size != t.shape[d])
          throw UserError("input '" + n.name + "' dim " + std::to_string(d) + " is " +
                          std::to_string(t.shape[d]) + ", the graph declares " + dim.str());
        continue;
      }
      auto [bound, inserted] = bindings.emplace(dim.symbol, t.shape[d]);
      if (!inserted && bound->second != t.shape[d])
        throw UserError("dim '" + dim.symbol + "' is " + std::to_string(bound->second) +
                        " in one input and " + std::to_string(t.shape[d]) + " in '" + n.name + "'");
    }
    if (static_cast<int64_t>(t.data.size()) != element_count(t.shape))
      throw UserError("input '" + n.name + "' holds " + std::to_string(t.data.size()) +
                      " values for shape of " + std::to_string(element_count(t.shape)));
  }
  // Evaluate node by node over whole tensors (each node broadcast to its shape).
  std::vector<HostTensor> values(graph.nodes().size());
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = graph.node(static_cast<int>(i));
    HostTensor& out = values[i];
    if (n.op == OpCode::Input) {
      out = inputs.at(n.name);
      continue;
    }
    out.shape = concrete(n.shape, bindings);
    if (n.op == OpCode::Const) {
      out.data = {n.value};
      continue;
    }
    int64_t count = element_count(out.shape);
    out.data.resize(static_cast<size_t>(count));
    size_t rank = out.shape.size();
    std::vector<int64_t> index(rank, 0);
    for (int64_t e = 0; e < count; ++e) {
      double operands[3] = {0, 0, 0};
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const HostTensor& operand = values[static_cast<size_t>(n.operands[k])];
        // Right-aligned broadcast: a size-1 dim always reads index 0.
        int64_t offset = 0;
        size_t r = operand.shape.size();
        for (size_t d = 0; d < r; ++d) {
          int64_t size = operand.shape[d];
          int64_t at = index[rank - r + d];
          offset = offset * size + (size == 1 ? 0 : at);
        }
        operands[k] = operand.data[static_cast<size_t>(offset)];
      }
      out.data[static_cast<size_t>(e)] = evaluate_node(n, operands);
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < out.shape[d]) break;
        index[d] = 0;
      }
    }
  }
  // Outputs take the broadcast shape of all outputs.
  std::vector<int64_t> shape = concrete(graph.output_shape(), bindings);
  std::map<std::string, HostTensor> result;
  for (const auto& [name, id] : graph.outputs()) {
    const HostTensor& v = values[static_cast<size_t>(id)];
    HostTensor out;
    out.shape = shape;
    int64_t count = element_count(shape);
    out.data.resize(static_cast<size_t>(count));
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t e = 0; e < count; ++e) {
      int64_t offset = 0;
      size_t r = v.shape.size();
      for (size_t d = 0; d < r; ++d) {
        int64_t size = v.shape[d];
        offset = offset * size + (size == 1 ? 0 : index[shape.size() - r + d]);
      }
      out.data[static_cast<size_t>(e)] = v.data[static_cast<size_t>(offset)];
      for (size_t d = shape.size(); d-- > 0;) {
        if (++index[d] < shape[d]) break;
        index[d] = 0;
      }
    }
    result[name] = std::move(out);
  }
  return result;
}

NpyArray random_input(const Graph& graph, int input_id, const std::vector<int64_t>& shape,
                      uint64_t seed) {
  const ir::Node& node = graph.node(input_id);
  auto [lo, hi] = input_domain(graph, input_id);
  int64_t count = element_count(shape);
  NpyArray array{npy_descr(node.dtype), shape, {}};
  array.data.reserve(static_cast<size_t>(count) * static_cast<size_t>(size_bytes(node.dtype)));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {  // xorshift64*: fast enough for 2^28 values
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (state * 0x2545F4914F6CDD1Dull) >> 11;  // 53 bits
  };
  double int_lo = std::ceil(lo), int_hi = std::floor(hi);
  if (int_lo > int_hi) int_lo = int_hi = 1;
  const int64_t chunk = 1 << 20;
  std::vector<double> values;
  for (int64_t start = 0; start < count; start += chunk) {
    int64_t size = std::min(chunk, count - start);
    values.resize(static_cast<size_t>(size));
    for (double& v : values) {
      double u = static_cast<double>(next()) / 9007199254740992.0;  // [0, 1)
      if (node.dtype == DType::Bool) {
        v = u < 0.5 ? 0 : 1;
      } else if (node.dtype == DType::I32) {
        v = std::min(int_hi, int_lo + std::floor(u * (int_hi - int_lo + 1)));
      } else {
        v = lo + u * (hi - lo);
      }
    }
    NpyArray part = npy_from_values(array.descr, {size}, values);
    array.data.insert(array.data.end(), part.data.begin(), part.data.end());
  }
  return array;
}

}  // namespace kjit::ir
