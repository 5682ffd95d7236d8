#include "kjit/compiler/passes/cse.h"

#include <cstring>
#include <map>
#include <tuple>

#include "kjit/compiler/passes/rebuild.h"

namespace kjit::ir {

Graph cse(const Graph& graph) {
  using Key = std::tuple<int, std::vector<int>, int, uint64_t, int, std::string>;
  std::map<Key, int> seen;
  return rebuild(graph, [&seen](size_t /*index*/, Node node, Graph& out) {
    uint64_t value_bits = 0;
    std::memcpy(&value_bits, &node.value, sizeof(value_bits));
    // Inputs are distinct by name; everything else by what it computes.
    Key key{static_cast<int>(node.op),      node.operands, static_cast<int>(node.dtype), value_bits,
            static_cast<int>(node.cast_to), node.name};
    auto it = seen.find(key);
    if (it != seen.end()) return it->second;
    int id = out.add_node_unchecked(std::move(node));
    seen.emplace(std::move(key), id);
    return id;
  });
}

}  // namespace kjit::ir
