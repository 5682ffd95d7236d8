// libFuzzer target for lowering: every text that parses is optimized, fused and
// lowered to CUDA source, under every access pattern and alignment class the
// launcher may pick and a handful of configs; lowering never fails on a parsed
// graph, and the same inputs give byte-identical source. The same text read as
// a matmul epilogue (`acc` predeclared) lowers to an epilogue function when it
// has one output and floating inputs, else gives a UserError. Every parsed graph
// is differentiated with respect to its first floating input (the result verifies
// and lowers), and the text read as an attention score and mask modifier lowers
// or gives a UserError, with twins that evaluate.
//
// Input: byte 0 picks the config and alignment, byte 1 the access patterns;
// the rest is the text.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/lowering/attention_modifier.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/passes/derivative.h"
#include "kjit/compiler/passes/fuse.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"

namespace {

const char* const kConfigs[] = {"", "block=128,unroll=1", "prefetch=1,stream=1",
                                "block=1024,unroll=4", "vec=2,unroll=3"};

void lower_every_group(const kjit::ir::Graph& parsed, uint8_t choice, uint8_t access_bits) {
  kjit::ir::Graph graph = kjit::ir::optimize(parsed);
  const kjit::ir::ElementwiseConfig config =
      kjit::ir::ElementwiseConfig::parse(kConfigs[choice % std::size(kConfigs)]);
  // A small register budget (26..41) splits most fuzzed chains, so the split is
  // fuzzed too: every output written by exactly one group, every group of a split
  // chain over the full output shape, every group lowering.
  const int budget = 26 + (access_bits & 15);
  const std::vector<kjit::ir::KernelGroup> groups =
      (choice & 0x40) ? kjit::ir::split(graph, budget) : kjit::ir::fuse(graph);
  std::map<std::string, int> written;
  for (const kjit::ir::KernelGroup& group : groups) {
    for (const auto& [name, id] : group.graph.outputs()) ++written[name];
    if (groups.size() > 1 && !(group.graph.output_shape() == graph.output_shape())) std::abort();
  }
  for (const auto& [name, id] : graph.outputs())
    if (written[name] != 1) std::abort();
  for (const kjit::ir::KernelGroup& group : groups) {
    kjit::ir::ElementwiseProblem problem;
    problem.graph = group.graph;
    problem.aligned = (choice & 0x80) != 0;
    const size_t inputs = group.graph.inputs().size();
    for (size_t i = 0; i < inputs; ++i)
      problem.access.push_back(
          static_cast<kjit::ir::Access>((access_bits + 3 * i) % 5));  // Full ... Strided
    const kjit::KernelSource first = kjit::ir::lower_elementwise(problem, config);
    const kjit::KernelSource second = kjit::ir::lower_elementwise(problem, config);
    if (first.source.empty() || first.source != second.source || first.name != second.name)
      std::abort();
  }
}

void lower_as_epilogue(const std::string& text) {
  kjit::ir::ParseOptions options;
  options.default_dtype = kjit::ir::DType::BF16;
  options.inputs = {
      {"acc", kjit::ir::DType::F32, {kjit::ir::Dim::named("m"), kjit::ir::Dim::named("n")}}};
  kjit::ir::Graph graph;
  try {
    graph = kjit::ir::optimize(kjit::ir::parse(text, options));
  } catch (const kjit::UserError&) {
    return;
  }
  bool lowerable = graph.outputs().size() == 1;
  for (int id : graph.inputs())
    lowerable = lowerable && kjit::ir::is_floating(graph.node(id).dtype);
  try {
    if (kjit::ir::emit_epilogue_function(graph, "kjit_epilogue").empty()) std::abort();
    if (!lowerable) std::abort();  // should have been refused
  } catch (const kjit::UserError&) {
    if (lowerable) std::abort();
  }
}

void differentiate(const kjit::ir::Graph& parsed) {
  for (int id : parsed.inputs()) {
    if (!kjit::ir::is_floating(parsed.node(id).dtype)) continue;
    kjit::ir::Graph d;
    try {
      d = kjit::ir::with_derivative(parsed, parsed.node(id).name);
    } catch (const kjit::UserError&) {
      return;  // an output already named d_<output>
    }
    kjit::ir::verify(d);
    if (d.outputs().size() != 2 * parsed.outputs().size()) std::abort();
    kjit::ir::optimize(d);
    return;
  }
}

void lower_as_modifiers(const std::string& text) {
  for (bool score : {true, false}) {
    kjit::attention::Modifier m;
    try {
      m = score ? kjit::attention::score_mod_from_ir(text)
                : kjit::attention::mask_mod_from_ir(text);
    } catch (const kjit::UserError&) {
      continue;
    }
    if (m.source.empty() || m.key.empty() || !m.reference || score != bool(m.gradient))
      std::abort();
    kjit::attention::ScorePoint point;
    point.s = 0.75, point.q_idx = 5, point.kv_idx = 3, point.head = 1;
    point.operands.assign(m.operands.size(), 0.5);
    m.reference(point);
    if (score) m.gradient(point);
    if (score) continue;
    // The mask over a tile (interval arithmetic) is sound on a few tiles of 8 x 8:
    // None only if no score of it is kept, All only if every one is.
    if (!m.tile) std::abort();
    const int64_t shift = static_cast<int64_t>(text.size() % 97);
    for (const auto& [q0, kv0] : {std::pair<int64_t, int64_t>{0, 0},
                                  {shift, 0},
                                  {0, shift},
                                  {300 + shift, 290},
                                  {1000, 1000 + shift}}) {
      kjit::attention::TileBox box{q0, q0 + 7, kv0, kv0 + 7, 1, point.operands};
      bool any = false, all = true;
      for (point.q_idx = box.q_lo; point.q_idx <= box.q_hi; ++point.q_idx) {
        for (point.kv_idx = box.kv_lo; point.kv_idx <= box.kv_hi; ++point.kv_idx) {
          const bool kept = m.reference(point) != 0;
          any = any || kept;
          all = all && kept;
        }
      }
      const kjit::attention::TileState state = m.tile(box);
      if ((state == kjit::attention::TileState::None && any) ||
          (state == kjit::attention::TileState::All && !all))
        std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  kjit::ir::Graph parsed;
  try {
    parsed = kjit::ir::parse(text);
  } catch (const kjit::UserError&) {
    return 0;
  }
  lower_every_group(parsed, data[0], data[1]);
  lower_as_epilogue(text);
  differentiate(parsed);
  lower_as_modifiers(text);
  return 0;
}
