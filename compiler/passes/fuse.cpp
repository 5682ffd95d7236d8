#include "kjit/compiler/passes/fuse.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace kjit::ir {

namespace {

// Registers a kernel needs besides its values: the loop index, the row and column,
// addresses. The tuner's estimate starts from the same base.
constexpr int kBaseRegisters = 24;

bool is_op(const Node& n) {
  return n.op != OpCode::Input && n.op != OpCode::Const;
}

// The chain as the kernel runs it: the ops in order, where each value is last read,
// and which values the graph returns.
struct Chain {
  std::vector<int> ops;        // node ids of the ops, in order
  std::vector<int> position;   // per node: its position in `ops`, -1 (input, literal)
  std::vector<int> last_read;  // per node: the position in `ops` of its last reader, -1
  std::vector<bool> returned;  // per node: an output of the graph
  Shape full;                  // the graph's output shape
};

Chain chain_of(const Graph& graph) {
  Chain c;
  c.position.assign(graph.nodes().size(), -1);
  c.last_read.assign(graph.nodes().size(), -1);
  c.returned.assign(graph.nodes().size(), false);
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const Node& n = graph.nodes()[id];
    if (!is_op(n)) continue;
    const int position = static_cast<int>(c.ops.size());
    for (int operand : n.operands) c.last_read[static_cast<size_t>(operand)] = position;
    c.position[id] = position;
    c.ops.push_back(static_cast<int>(id));
  }
  for (const auto& [name, id] : graph.outputs()) c.returned[static_cast<size_t>(id)] = true;
  c.full = graph.output_shape();
  return c;
}

// Whether the value of op `id` is needed after position `last` of the chain.
bool live_after(const Chain& c, int id, int last) {
  return c.returned[static_cast<size_t>(id)] || c.last_read[static_cast<size_t>(id)] > last;
}

// The registers of one kernel running positions [first, last] of the chain: values
// read from outside (inputs, earlier kernels' results) are loaded up front and live
// until their last read here; each op's value lives from its op to its last read
// here, or to the end when a later kernel or the caller needs it.
int segment_registers(const Graph& graph, const Chain& c, int first, int last) {
  const int length = last - first + 1;
  std::vector<int> change(static_cast<size_t>(length) + 1, 0);  // +1 at a start, -1 after an end
  std::unordered_map<int, int> outside_last;  // value read from outside -> last position
  for (int p = first; p <= last; ++p) {
    const Node& n = graph.node(c.ops[static_cast<size_t>(p)]);
    for (int operand : n.operands) {
      const Node& o = graph.node(operand);
      if (o.op == OpCode::Const) continue;  // a literal in the instruction
      if (c.position[static_cast<size_t>(operand)] < first) outside_last[operand] = p;
    }
  }
  for (const auto& [value, end] : outside_last) {
    change[0] += 1;
    change[static_cast<size_t>(end - first) + 1] -= 1;
  }
  for (int p = first; p <= last; ++p) {
    const int id = c.ops[static_cast<size_t>(p)];
    const int end =
        live_after(c, id, last) ? last : std::max(p, c.last_read[static_cast<size_t>(id)]);
    change[static_cast<size_t>(p - first)] += 1;
    change[static_cast<size_t>(end - first) + 1] -= 1;
  }
  int live = 0, peak = 0;
  for (int i = 0; i < length; ++i) peak = std::max(peak, live += change[static_cast<size_t>(i)]);
  return kBaseRegisters + peak;
}

// Whether a kernel ending at position `last` writes a value of the full output
// shape (its iteration space; see fuse.h).
bool writes_full_shape(const Graph& graph, const Chain& c, int first, int last) {
  for (int p = first; p <= last; ++p) {
    const int id = c.ops[static_cast<size_t>(p)];
    if (live_after(c, id, last) && graph.node(id).shape == c.full) return true;
  }
  return false;
}

// [first, last] positions of each kernel: each extended while it fits the budget,
// then cut at the last position where it writes a full-shaped value (past the budget
// when there is none sooner); a last kernel without one joins the one before.
std::vector<std::pair<int, int>> cut(const Graph& graph, const Chain& c, int budget) {
  const int m = static_cast<int>(c.ops.size());
  std::vector<std::pair<int, int>> segments;
  for (int first = 0; first < m;) {
    int last = first;
    while (last + 1 < m && segment_registers(graph, c, first, last + 1) <= budget) ++last;
    int end = last;
    if (last + 1 < m) {
      while (end >= first && !writes_full_shape(graph, c, first, end)) --end;
      if (end < first) {
        end = last + 1;
        while (end + 1 < m && !writes_full_shape(graph, c, first, end)) ++end;
      }
    }
    segments.emplace_back(first, end);
    first = end + 1;
  }
  while (segments.size() > 1 &&
         !writes_full_shape(graph, c, segments.back().first, segments.back().second)) {
    const int last = segments.back().second;
    segments.pop_back();
    segments.back().second = last;
  }
  return segments;
}

// The dtype a value crossing a cut is stored in: f32 for 16-bit floats (the fused
// kernel keeps them in f32 registers and rounds only at its stores), else its own.
DType stored_dtype(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype;
}

}  // namespace

int estimated_registers(const Graph& graph) {
  const Chain c = chain_of(graph);
  if (c.ops.empty()) return kBaseRegisters + static_cast<int>(graph.inputs().size());
  return segment_registers(graph, c, 0, static_cast<int>(c.ops.size()) - 1);
}

std::vector<KernelGroup> split(const Graph& graph, int register_budget) {
  const Chain c = chain_of(graph);
  const int registers = c.ops.empty()
                            ? estimated_registers(graph)
                            : segment_registers(graph, c, 0, static_cast<int>(c.ops.size()) - 1);
  if (registers <= register_budget || c.ops.size() < 2) return {KernelGroup{graph, registers}};
  const std::vector<std::pair<int, int>> segments = cut(graph, c, register_budget);
  if (segments.size() == 1) return {KernelGroup{graph, registers}};

  // Names of the values that cross a cut, clear of the graph's own names.
  auto taken = [&](const std::string& name) {
    if (graph.find_input(name) >= 0) return true;
    for (const auto& [output, id] : graph.outputs())
      if (output == name) return true;
    return false;
  };
  auto temporary = [&](int id) {
    std::string name = "_t" + std::to_string(id);
    while (taken(name)) name = "_" + name;
    return name;
  };

  std::vector<KernelGroup> groups;
  for (size_t s = 0; s < segments.size(); ++s) {
    const auto [first, last] = segments[s];
    const bool final = s + 1 == segments.size();
    Graph g;
    std::unordered_map<int, int> local;  // node id in `graph` -> node id in g
    auto value = [&](int id) -> Value {
      auto it = local.find(id);
      if (it != local.end()) return g.value(it->second);
      const Node& n = graph.node(id);
      Value v;
      if (n.op == OpCode::Const) {
        v = g.value(g.add_node_unchecked(n));
      } else if (n.op == OpCode::Input) {
        v = g.input(n.name, n.dtype, n.shape);
      } else {  // computed by an earlier kernel
        v = g.input(temporary(id), stored_dtype(n.dtype), c.full);
      }
      local.emplace(id, v.id);
      return v;
    };
    for (int p = first; p <= last; ++p) {
      const int id = c.ops[static_cast<size_t>(p)];
      const Node& n = graph.node(id);
      std::vector<Value> operands;
      for (int operand : n.operands) operands.push_back(value(operand));
      local.emplace(id, g.apply(n.op, operands, n.cast_to).id);
    }
    auto write = [&](const std::string& name, Value v, DType dtype) {
      if (g.node(v.id).dtype != dtype) v = g.apply(OpCode::Cast, {v}, dtype);
      g.output(name, v);
    };
    for (int p = first; p <= last; ++p) {
      const int id = c.ops[static_cast<size_t>(p)];
      if (c.last_read[static_cast<size_t>(id)] > last)
        write(temporary(id), g.value(local.at(id)), stored_dtype(graph.node(id).dtype));
    }
    // The caller's outputs, each where its value is computed (an input or a literal
    // returned as is: in the last kernel).
    for (const auto& [name, id] : graph.outputs()) {
      const int position = c.position[static_cast<size_t>(id)];
      if ((position >= first && position <= last) || (final && position < 0))
        write(name, value(id), graph.node(id).dtype);
    }
    groups.push_back(KernelGroup{std::move(g), 0});
    groups.back().registers = estimated_registers(groups.back().graph);
  }
  return groups;
}

SplitTraffic split_traffic(const Graph& graph, const std::vector<KernelGroup>& groups) {
  SplitTraffic t;
  for (int id : graph.inputs()) t.own += size_bytes(graph.node(id).dtype);
  std::set<std::string> outputs;
  for (const auto& [name, id] : graph.outputs()) {
    t.own += size_bytes(graph.node(id).dtype);
    outputs.insert(name);
  }
  if (groups.size() < 2) return t;
  for (const KernelGroup& group : groups)
    for (const auto& [name, id] : group.graph.outputs())
      if (!outputs.count(name)) t.temporaries += 2 * size_bytes(group.graph.node(id).dtype);
  return t;
}

std::vector<KernelGroup> fuse(const Graph& graph, int register_budget) {
  std::vector<KernelGroup> groups = split(graph, register_budget);
  if (groups.size() < 2) return groups;
  const SplitTraffic t = split_traffic(graph, groups);
  if (t.temporaries > kSplitTrafficLimit * t.own)
    return {KernelGroup{graph, estimated_registers(graph)}};
  return groups;
}

std::vector<KernelGroup> unfuse(const Graph& graph) {
  // The name under which each node's value lives in memory.
  std::map<int, std::string> stored;
  for (int id : graph.inputs()) stored[id] = graph.node(id).name;
  std::map<int, std::vector<std::string>> output_names;
  for (const auto& [name, id] : graph.outputs()) output_names[id].push_back(name);
  std::vector<KernelGroup> groups;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    int id = static_cast<int>(i);
    const Node& n = graph.node(id);
    if (n.op == OpCode::Input || n.op == OpCode::Const) continue;
    Graph g;
    std::vector<Value> operands;
    for (int operand : n.operands) {
      const Node& o = graph.node(operand);
      if (o.op == OpCode::Const) {
        operands.push_back(g.constant(o.value, o.dtype));
      } else {
        int existing = g.find_input(stored.at(operand));
        operands.push_back(existing >= 0 ? g.value(existing)
                                         : g.input(stored.at(operand), o.dtype, o.shape));
      }
    }
    Value v = g.apply(n.op, operands, n.cast_to);
    std::string name =
        output_names.count(id) ? output_names[id].front() : "_t" + std::to_string(id);
    g.output(name, v);
    stored[id] = name;
    groups.push_back(KernelGroup{std::move(g)});
  }
  return groups;
}

}  // namespace kjit::ir
