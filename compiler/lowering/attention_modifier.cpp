#include "kjit/compiler/lowering/attention_modifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/op_table.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/passes/derivative.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"

#define KJIT_INTERVAL_HOST
#include "kjit/templates/interval.cuh"

namespace kjit::attention {

namespace {

using ir::DType;
using ir::Graph;
using ir::Node;

// The positions every modifier may read, after `s` for score modifiers.
const char* const kPositions[] = {"q_idx", "kv_idx", "head"};

// The scores form a [heads, q, kv] grid: an operand per head is [heads, 1, 1] in
// it, per query position [q, 1], per key position [kv], so that any of them
// broadcast together. Users write the one dim that matters.
ir::Shape grid_shape(ModifierOperandKind kind) {
  const ir::Dim one = ir::Dim::of(1);
  switch (kind) {
    case ModifierOperandKind::PerHead:
      return {ir::Dim::named("heads"), one, one};
    case ModifierOperandKind::PerQuery:
      return {ir::Dim::named("q"), one};
    case ModifierOperandKind::PerKey:
      return {ir::Dim::named("kv")};
  }
  return {};
}

// One statement as a declaration "NAME : DTYPE [ heads|q|kv ]" (spaces anywhere
// between): its three words, or nullopt. Read by hand: std::regex recursed once per
// character and overflowed the stack on a statement of 100,000 spaces.
struct Declaration {
  std::string_view name, dtype, grid;
};
std::optional<Declaration> read_declaration(std::string_view statement) {
  size_t at = 0;
  auto skip_spaces = [&] {
    while (at < statement.size() && std::isspace(static_cast<unsigned char>(statement[at]))) ++at;
  };
  auto word = [&] {
    const size_t start = at;
    while (at < statement.size() &&
           (std::isalnum(static_cast<unsigned char>(statement[at])) || statement[at] == '_'))
      ++at;
    return statement.substr(start, at - start);
  };
  auto punctuation = [&](char c) {
    skip_spaces();
    if (at >= statement.size() || statement[at] != c) return false;
    ++at;
    skip_spaces();
    return true;
  };
  Declaration d;
  skip_spaces();
  d.name = word();
  if (d.name.empty() || std::isdigit(static_cast<unsigned char>(d.name[0])) || !punctuation(':'))
    return std::nullopt;
  d.dtype = word();
  if (d.dtype.empty() || !punctuation('[')) return std::nullopt;
  d.grid = word();
  if ((d.grid != "heads" && d.grid != "q" && d.grid != "kv") || !punctuation(']') ||
      at != statement.size())
    return std::nullopt;
  return d;
}

// Declarations of one grid dim ("slope:f32[heads]") are taken out of the text
// (blanked, so that error positions stay the user's) and declared before it with
// their grid shape; the rest of the text parses as written.
std::vector<ir::Predeclared> take_declarations(std::string& text) {
  std::vector<ir::Predeclared> out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find_first_of(";\n#", start);
    if (end == std::string::npos) end = text.size();
    const std::optional<Declaration> declaration =
        read_declaration(std::string_view(text).substr(start, end - start));
    if (declaration) {
      if (const std::optional<DType> dtype = ir::parse_dtype(std::string(declaration->dtype))) {
        const ModifierOperandKind kind = declaration->grid == "heads" ? ModifierOperandKind::PerHead
                                         : declaration->grid == "q" ? ModifierOperandKind::PerQuery
                                                                    : ModifierOperandKind::PerKey;
        out.push_back({std::string(declaration->name), *dtype, grid_shape(kind)});
        std::fill(text.begin() + static_cast<std::ptrdiff_t>(start),
                  text.begin() + static_cast<std::ptrdiff_t>(end), ' ');
      }
    }
    if (end < text.size() && text[end] == '#') end = text.find('\n', end);  // a comment
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

ModifierOperandKind kind_of(const Node& input, const std::string& text) {
  for (ModifierOperandKind kind :
       {ModifierOperandKind::PerHead, ModifierOperandKind::PerQuery, ModifierOperandKind::PerKey})
    if (input.shape == grid_shape(kind)) return kind;
  throw UserError(fmt::format("modifier operand '{}' of '{}' has shape {}; an attention "
                              "modifier's operand is [heads] (per query head), [q] (per query "
                              "position) or [kv] (per key position)",
                              input.name, text, ir::to_string(input.shape)),
                  "declare it, e.g. " + input.name + ":f32[heads]");
}

// An undeclared name is an operand (f32 per head), so a misspelt `s`, `q_idx`, `kv_idx`
// or `head` would read random operand values without a word: such a name (the same
// but for case, or one edit from a position's name) is an error unless declared.
void check_not_a_misspelt_name(const std::string& name, const std::string& text, bool score) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<std::string> near;
  for (const std::string known : {"s", "q_idx", "kv_idx", "head"}) {
    if (!score && known == "s") continue;
    if (lower == known || (known.size() > 1 && ir::edit_distance(lower, known) <= 1))
      near.push_back("'" + known + "'");
  }
  if (near.empty()) return;
  throw UserError(
      fmt::format("the {} '{}' reads '{}', which is not a name it knows; did you "
                  "mean {}?",
                  score ? "score modifier" : "mask modifier", text, name, fmt::join(near, " or ")),
      fmt::format("the names are {}q_idx, kv_idx and head; an operand of that name is "
                  "declared first, e.g. {}:f32[heads]",
                  score ? "s, " : "", name));
}

// The text parsed with the positions (and s) declared first, optimized; its
// operands checked. `score`: a score modifier (reads s, gives a float).
Graph parse_modifier(const std::string& text, bool score, std::vector<ModifierOperand>* operands) {
  ir::ParseOptions options;
  options.default_dtype = DType::F32;
  options.default_shape = grid_shape(ModifierOperandKind::PerHead);
  if (score) options.inputs.push_back({"s", DType::F32, {}});
  for (const char* name : kPositions) options.inputs.push_back({name, DType::I32, {}});
  std::string body = text;
  std::set<std::string> declared_names;
  for (ir::Predeclared& d : take_declarations(body)) {
    declared_names.insert(d.name);
    options.inputs.push_back(std::move(d));
  }
  const char* what = score ? "score modifier" : "mask modifier";
  const Graph graph = ir::optimize(ir::parse(body, options));
  if (graph.outputs().size() != 1)
    throw UserError(fmt::format("the {} '{}' computes {} values; it computes one", what, text,
                                graph.outputs().size()),
                    score ? "e.g. 'tanh(s / 50) * 50'" : "e.g. 'kv_idx <= q_idx'");
  const DType result = graph.node(graph.outputs()[0].second).dtype;
  if (score && !ir::is_floating(result))
    throw UserError(fmt::format("the score modifier '{}' gives {} {} value; it must give the "
                                "modified score, a floating value",
                                text, result == DType::I32 ? "an" : "a", ir::to_string(result)),
                    "for a mask, use the mask modifier");
  const size_t declared = score ? 4 : 3;
  const std::vector<int> inputs = graph.inputs();
  for (size_t i = declared; i < inputs.size(); ++i) {
    const Node& input = graph.node(inputs[i]);
    if (!declared_names.count(input.name)) check_not_a_misspelt_name(input.name, text, score);
    if (!score && input.name == "s")
      throw UserError(fmt::format("the mask modifier '{}' reads s; a mask sees positions only "
                                  "(q_idx, kv_idx, head)",
                                  text),
                      "to change scores, use the score modifier");
    if (input.dtype != DType::F32 && input.dtype != DType::F16 && input.dtype != DType::BF16 &&
        input.dtype != DType::I32)
      throw UserError(fmt::format("modifier operand '{}' is {}; operands are f32, f16, bf16 or "
                                  "i32",
                                  input.name, ir::to_string(input.dtype)),
                      "declare it, e.g. " + input.name + ":f32[heads]");
    operands->push_back({input.name, kind_of(input, text), input.dtype});
  }
  if (static_cast<int>(operands->size()) > kMaxModifierOperands)
    throw UserError(fmt::format("the {} '{}' reads {} operands; at most {}", what, text,
                                operands->size(), kMaxModifierOperands));
  return graph;
}

// Output `output` of `graph` in fp64 at `point` (inputs in declaration order: s
// for score modifiers, the positions, the operands; each rounded to its dtype).
double evaluate(const Graph& graph, size_t output, bool score, const ScorePoint& point) {
  std::vector<double> inputs;
  if (score) inputs.push_back(point.s);
  inputs.push_back(static_cast<double>(point.q_idx));
  inputs.push_back(static_cast<double>(point.kv_idx));
  inputs.push_back(static_cast<double>(point.head));
  inputs.insert(inputs.end(), point.operands.begin(), point.operands.end());
  const std::vector<int> ids = graph.inputs();
  for (size_t i = 0; i < inputs.size() && i < ids.size(); ++i)
    inputs[i] = ir::round_to(graph.node(ids[i]).dtype, inputs[i]);
  return ir::evaluate_point(graph, inputs)[static_cast<size_t>(graph.outputs()[output].second)];
}

// ---- a mask over a whole tile: interval arithmetic (templates/interval.cuh) ----

// How the positions and operands of a mask range over a tile.
enum class InputRange { Queries, Keys, Head, PerHeadOperand, Unknown };

InputRange input_range(const Node& input, const std::vector<ModifierOperand>& operands) {
  if (input.name == "q_idx") return InputRange::Queries;
  if (input.name == "kv_idx") return InputRange::Keys;
  if (input.name == "head") return InputRange::Head;
  for (const ModifierOperand& o : operands)
    if (o.name == input.name && o.kind == ModifierOperandKind::PerHead)
      return InputRange::PerHeadOperand;
  return InputRange::Unknown;  // an operand per position: any of its values
}

bool integral(DType dtype) {
  return dtype == DType::I32 || dtype == DType::Bool;
}

// Whether operand k of n is an i32 the device converts to f32 for the op: any
// operand of a float op (a select's branches, not its condition), and of a
// comparison with a float on either side. A cast is left out: its own rule rounds.
bool converted_to_float(const Graph& graph, const Node& n, size_t k) {
  if (graph.node(n.operands[k]).dtype != DType::I32 || n.op == ir::OpCode::Cast) return false;
  if (n.op == ir::OpCode::Select) return k > 0 && !integral(n.dtype);
  if (!integral(n.dtype)) return true;
  if (n.dtype != DType::Bool || n.operands.size() != 2) return false;
  for (int operand : n.operands)
    if (!integral(graph.node(operand).dtype)) return true;  // a mixed comparison
  return false;
}

namespace iv = kjit::interval;

// One rule per op the tile analysis knows: the interval.cuh function the device code
// calls (by name) and the same call on the host (`apply`, over the operands' ranges),
// so the two evaluations cannot drift apart. Ops without a rule are unbounded.
struct IntervalRule {
  const char* function;  // "same": the operand's range unchanged (a cast to float)
  iv::Range (*apply)(const iv::Range* a, bool integral);
};

const IntervalRule* interval_rule(const Node& n) {
  using ir::OpCode;
  static const std::map<OpCode, IntervalRule> rules = {
      {OpCode::Neg, {"neg", [](const iv::Range* a, bool) { return iv::neg(a[0]); }}},
      {OpCode::Abs, {"abs", [](const iv::Range* a, bool) { return iv::abs(a[0]); }}},
      {OpCode::Relu, {"relu", [](const iv::Range* a, bool) { return iv::relu(a[0]); }}},
      {OpCode::Floor, {"floor", [](const iv::Range* a, bool) { return iv::floor(a[0]); }}},
      {OpCode::Ceil, {"ceil", [](const iv::Range* a, bool) { return iv::ceil(a[0]); }}},
      {OpCode::Add, {"add", [](const iv::Range* a, bool) { return iv::add(a[0], a[1]); }}},
      {OpCode::Sub, {"sub", [](const iv::Range* a, bool) { return iv::sub(a[0], a[1]); }}},
      {OpCode::Mul, {"mul", [](const iv::Range* a, bool) { return iv::mul(a[0], a[1]); }}},
      {OpCode::Div, {"div", [](const iv::Range* a, bool i) { return iv::div(a[0], a[1], i); }}},
      {OpCode::Max, {"max", [](const iv::Range* a, bool) { return iv::max(a[0], a[1]); }}},
      {OpCode::Min, {"min", [](const iv::Range* a, bool) { return iv::min(a[0], a[1]); }}},
      {OpCode::Lt, {"lt", [](const iv::Range* a, bool) { return iv::lt(a[0], a[1]); }}},
      {OpCode::Le, {"le", [](const iv::Range* a, bool) { return iv::le(a[0], a[1]); }}},
      {OpCode::Gt, {"gt", [](const iv::Range* a, bool) { return iv::gt(a[0], a[1]); }}},
      {OpCode::Ge, {"ge", [](const iv::Range* a, bool) { return iv::ge(a[0], a[1]); }}},
      {OpCode::Eq, {"eq", [](const iv::Range* a, bool) { return iv::eq(a[0], a[1]); }}},
      {OpCode::Ne, {"ne", [](const iv::Range* a, bool) { return iv::ne(a[0], a[1]); }}},
      {OpCode::Select,
       {"select", [](const iv::Range* a, bool) { return iv::select(a[0], a[1], a[2]); }}},
      {OpCode::Fma, {"fma", [](const iv::Range* a, bool) { return iv::fma(a[0], a[1], a[2]); }}},
  };
  // A cast's rule depends on the type it casts to.
  static const IntervalRule to_bool{"to_bool",
                                    [](const iv::Range* a, bool) { return iv::to_bool(a[0]); }};
  static const IntervalRule to_int{"to_int",
                                   [](const iv::Range* a, bool) { return iv::to_int(a[0]); }};
  static const IntervalRule same{"same", [](const iv::Range* a, bool) { return a[0]; }};
  static const IntervalRule to_f16{"to_f16",
                                   [](const iv::Range* a, bool) { return iv::to_f16(a[0]); }};
  static const IntervalRule to_bf16{"to_bf16",
                                    [](const iv::Range* a, bool) { return iv::to_bf16(a[0]); }};
  if (n.op == OpCode::Cast)
    return n.cast_to == DType::Bool   ? &to_bool
           : n.cast_to == DType::I32  ? &to_int
           : n.cast_to == DType::F16  ? &to_f16
           : n.cast_to == DType::BF16 ? &to_bf16
                                      : &same;  // to f32: result() widens for the rounding
  const auto rule = rules.find(n.op);
  return rule == rules.end() ? nullptr : &rule->second;
}

// The host's evaluation of one op (the same calls the device code makes).
iv::Range range_of_op(const Graph& graph, const Node& n, const std::vector<iv::Range>& r) {
  const IntervalRule* rule = interval_rule(n);
  if (rule == nullptr) return iv::unknown();
  iv::Range a[3];  // the most operands an op takes (select, fma)
  for (size_t i = 0; i < n.operands.size() && i < 3; ++i) {
    a[i] = r[static_cast<size_t>(n.operands[i])];
    if (converted_to_float(graph, n, i)) a[i] = iv::to_float(a[i]);
  }
  return rule->apply(a, integral(n.dtype));
}

TileState classify(const Graph& graph, const std::vector<ModifierOperand>& operands,
                   const TileBox& box) {
  std::vector<iv::Range> r(graph.nodes().size(), iv::unknown());
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const Node& n = graph.nodes()[id];
    if (n.op == ir::OpCode::Input) {
      switch (input_range(n, operands)) {
        case InputRange::Queries:
          r[id] = iv::between(static_cast<double>(box.q_lo), static_cast<double>(box.q_hi));
          break;
        case InputRange::Keys:
          r[id] = iv::between(static_cast<double>(box.kv_lo), static_cast<double>(box.kv_hi));
          break;
        case InputRange::Head:
          r[id] = iv::exact(static_cast<double>(box.head));
          break;
        case InputRange::PerHeadOperand:
          for (size_t i = 0; i < operands.size(); ++i)
            if (operands[i].name == n.name && i < box.operands.size())
              r[id] = iv::exact(ir::round_to(n.dtype, box.operands[i]));
          break;
        case InputRange::Unknown:
          break;
      }
    } else if (n.op == ir::OpCode::Const) {
      r[id] = iv::exact(n.value);
    } else {
      r[id] = iv::result(range_of_op(graph, n, r), integral(n.dtype));
    }
  }
  return static_cast<TileState>(iv::tile_state(r[static_cast<size_t>(graph.outputs()[0].second)]));
}

// kjit_mask_tile: the same evaluation as device code, one line per op.
std::string emit_tile_function(const Graph& graph, const std::vector<ModifierOperand>& operands) {
  std::string parameters = "int q_lo, int q_hi, int kv_lo, int kv_hi, int head";
  for (const ModifierOperand& o : operands)
    if (o.kind == ModifierOperandKind::PerHead)
      parameters += fmt::format(", {} in_{}", ir::compute_type(o.dtype), o.name);
  std::string body;
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const Node& n = graph.nodes()[id];
    std::string value;
    if (n.op == ir::OpCode::Input) {
      switch (input_range(n, operands)) {
        case InputRange::Queries:
          value = "between(q_lo, q_hi)";
          break;
        case InputRange::Keys:
          value = "between(kv_lo, kv_hi)";
          break;
        case InputRange::Head:
          value = "exact(head)";
          break;
        case InputRange::PerHeadOperand:
          value = "exact(in_" + n.name + ")";
          break;
        case InputRange::Unknown:
          value = "unknown()";
          break;
      }
      body += fmt::format("  const Range r{} = {};  // {}\n", id, value, n.name);
      continue;
    }
    if (n.op == ir::OpCode::Const) {
      body += fmt::format("  const Range r{} = exact({:.17g});\n", id, n.value);
      continue;
    }
    const IntervalRule* rule = interval_rule(n);
    std::string call;
    if (rule == nullptr) {
      call = "unknown()";
    } else if (std::string(rule->function) == "same") {
      call = fmt::format("r{}", n.operands[0]);
    } else {
      std::vector<std::string> args;
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const std::string range = "r" + std::to_string(n.operands[k]);
        args.push_back(converted_to_float(graph, n, k) ? "to_float(" + range + ")" : range);
      }
      if (n.op == ir::OpCode::Div) args.push_back(integral(n.dtype) ? "true" : "false");
      call = fmt::format("{}({})", rule->function, fmt::join(args, ", "));
    }
    body += fmt::format("  const Range r{} = result({}, {});  // {}\n", id, call,
                        integral(n.dtype) ? "true" : "false", ir::op_info(n.op).name);
  }
  return fmt::format(
      "#include \"kjit/interval.cuh\"\n\n"
      "// The mask over a whole tile of queries [q_lo, q_hi] x keys [kv_lo, kv_hi], by\n"
      "// interval arithmetic (templates/interval.cuh): 0, it keeps none of the tile's\n"
      "// scores (the tile is skipped); 2, all of them (no score is tested); 1, some.\n"
      "__device__ __forceinline__ int kjit_mask_tile({}) {{\n"
      "  using namespace kjit::interval;\n{}"
      "  return tile_state(r{});\n}}\n",
      parameters, body, graph.outputs()[0].second);
}

// ---- relative positions: ALiBi-like modifiers at one float add per score ----

bool within_exact_float(const iv::Range& r) {
  const auto limit = static_cast<double>(kExactInFloat);
  return r.lo >= -limit && r.hi <= limit;
}

// A score modifier that reads q_idx and kv_idx only as their difference (ALiBi's
// abs(q_idx - kv_idx), a relative bias), rewritten over `q_minus_kv`, an f32 input,
// with the integer arithmetic on it done in f32: the same values wherever positions
// are below 2^24, since every integer computed from the difference (by add, sub, mul,
// neg, abs, min, max or select) must stay within +-2^24, where f32 holds integers
// exactly, and is read only by such ops, comparisons or float ops (which converted
// it anyway). The kernels then form the difference once per tile and add a constant
// per score, instead of an integer subtract, abs and conversion per score. nullopt
// where that does not hold (a position read otherwise, a cast to int, a value that
// may leave the range, an i32 operand in the arithmetic).
std::optional<Graph> relative_form(const Graph& graph) {
  using ir::OpCode;
  const std::vector<Node>& nodes = graph.nodes();
  const int q = graph.find_input("q_idx"), kv = graph.find_input("kv_idx");
  std::vector<iv::Range> range(nodes.size(), iv::unknown());
  std::vector<int> sign(nodes.size(), 0);            // +1: q_idx - kv_idx; -1: kv_idx - q_idx
  std::vector<bool> converted(nodes.size(), false);  // an integer computed from the difference
  bool reads_difference = false;
  for (size_t id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    if (n.op == OpCode::Input) {
      if (n.name == "q_idx" || n.name == "kv_idx")
        range[id] = iv::between(0, static_cast<double>(kExactInFloat - 1));
      if (n.name == "head") range[id] = iv::between(0, 65535);
      continue;
    }
    if (n.op == OpCode::Const) {
      range[id] = iv::exact(n.value);
      continue;
    }
    range[id] = iv::result(range_of_op(graph, n, range), integral(n.dtype));
    const bool reads_position =
        std::any_of(n.operands.begin(), n.operands.end(), [&](int o) { return o == q || o == kv; });
    if (reads_position) {
      if (n.op != OpCode::Sub || n.dtype != DType::I32) return std::nullopt;
      if (n.operands[0] == q && n.operands[1] == kv) sign[id] = 1;
      if (n.operands[0] == kv && n.operands[1] == q) sign[id] = -1;
      if (sign[id] == 0) return std::nullopt;  // q_idx - q_idx: not a difference
      converted[id] = reads_difference = true;
      continue;
    }
    bool reads_converted = false;
    for (int operand : n.operands) reads_converted = reads_converted || converted[operand];
    if (!reads_converted) continue;
    if (n.dtype == DType::I32) {
      const bool arithmetic = n.op == OpCode::Add || n.op == OpCode::Sub || n.op == OpCode::Mul ||
                              n.op == OpCode::Neg || n.op == OpCode::Abs || n.op == OpCode::Min ||
                              n.op == OpCode::Max || n.op == OpCode::Select;
      if (!arithmetic || !within_exact_float(range[id])) return std::nullopt;
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const Node& operand = nodes[static_cast<size_t>(n.operands[k])];
        const bool condition = n.op == OpCode::Select && k == 0;
        if (!condition && !converted[n.operands[k]] &&
            !(operand.op == OpCode::Const && within_exact_float(iv::exact(operand.value))))
          return std::nullopt;  // e.g. head or an i32 operand: it would need converting too
      }
      converted[id] = true;
    } else if (n.dtype == DType::Bool) {
      if (ir::op_info(n.op).rule != ir::TypeRule::Compare &&
          !(n.op == OpCode::Cast && n.cast_to == DType::Bool))
        return std::nullopt;
    }
    // A float op converted its integer operands to float: now they arrive as floats.
  }
  if (!reads_difference) return std::nullopt;
  Graph out;
  std::vector<int> id_of(nodes.size(), -1);
  std::map<int, int> float_constant;  // an i32 literal read by converted arithmetic
  int difference = -1;
  for (size_t id = 0; id < nodes.size(); ++id) {
    Node n = nodes[id];
    if (static_cast<int>(id) == kv) continue;  // read only through the difference
    if (static_cast<int>(id) == q) {
      Node input;
      input.op = OpCode::Input;
      input.name = "q_minus_kv";
      input.dtype = DType::F32;
      input.shape = {};
      difference = id_of[id] = out.add_node_unchecked(input);
      continue;
    }
    if (sign[id] != 0) {
      if (sign[id] > 0) {
        id_of[id] = difference;
      } else {
        Node negated;
        negated.op = OpCode::Neg;
        negated.operands = {difference};
        negated.dtype = DType::F32;
        negated.shape = {};
        id_of[id] = out.add_node_unchecked(negated);
      }
      continue;
    }
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const int old = n.operands[k];
      const Node& operand = nodes[static_cast<size_t>(old)];
      if (converted[id] && operand.op == OpCode::Const && operand.dtype == DType::I32) {
        auto found = float_constant.find(old);
        if (found == float_constant.end()) {
          Node literal = operand;
          literal.dtype = DType::F32;
          found = float_constant.emplace(old, out.add_node_unchecked(literal)).first;
        }
        n.operands[k] = found->second;
      } else {
        n.operands[k] = id_of[static_cast<size_t>(old)];
      }
    }
    if (converted[id]) n.dtype = DType::F32;
    id_of[id] = out.add_node_unchecked(n);
  }
  std::vector<std::pair<std::string, int>> outputs;
  for (const auto& [name, id] : graph.outputs()) outputs.push_back({name, id_of[id]});
  out.set_outputs(outputs);
  try {
    ir::verify(out);
  } catch (const UserError& e) {
    throw InternalError(std::string("the relative form of a score modifier is invalid: ") +
                        e.what());
  }
  return out;
}

Modifier make(const std::string& text, bool score) {
  Modifier m;
  m.text = text;
  const Graph graph = parse_modifier(text, score, &m.operands);
  m.canonical = ir::print(graph);
  const int head = graph.find_input("head");
  m.reads_head =
      head >= 0 && std::any_of(graph.nodes().begin(), graph.nodes().end(), [&](const Node& n) {
        return std::find(n.operands.begin(), n.operands.end(), head) != n.operands.end();
      });
  m.key = KeyHasher().add(score ? "score_mod" : "mask_mod").add(m.canonical).hex();
  if (score) {
    // One graph with the modifier and its derivative: outputs y, d_y.
    const Graph both = ir::with_derivative(graph, "s");
    Graph value = both, slope = both;
    value.set_outputs({both.outputs()[0]});
    slope.set_outputs({both.outputs()[1]});
    value = ir::optimize(value);
    slope = ir::optimize(slope);
    m.constant_grad = slope.node(slope.outputs()[0].second).op == ir::OpCode::Const;
    m.source = ir::emit_scalar_function(value, 0, "kjit_score_mod", "Score modifier kjit_score_mod",
                                        ir::ScalarMath::Fast) +
               "\n" +
               ir::emit_scalar_function(slope, 0, "kjit_score_mod_grad",
                                        "Its derivative with respect to s, kjit_score_mod_grad",
                                        ir::ScalarMath::Fast);
    const bool per_position_operand = std::any_of(
        m.operands.begin(), m.operands.end(),
        [](const ModifierOperand& o) { return o.kind != ModifierOperandKind::PerHead; });
    if (!per_position_operand) {
      if (const std::optional<Graph> relative = relative_form(value)) {
        m.relative = true;
        m.source += "\n" + ir::emit_scalar_function(*relative, 0, "kjit_score_mod_relative",
                                                    "kjit_score_mod over q_idx - kv_idx in float",
                                                    ir::ScalarMath::Fast);
      }
    }
    m.reference = [value](const ScorePoint& p) { return evaluate(value, 0, true, p); };
    m.gradient = [slope](const ScorePoint& p) { return evaluate(slope, 0, true, p); };
  } else {
    // The value as the IR gives it, then the bool the kernels test.
    std::string parameters = "int in_q_idx, int in_kv_idx, int in_head", arguments;
    for (const ModifierOperand& o : m.operands) {
      parameters += fmt::format(", {} in_{}", ir::compute_type(o.dtype), o.name);
      arguments += ", in_" + o.name;
    }
    const Graph mask = graph;
    m.source = ir::emit_scalar_function(mask, 0, "kjit_mask_value", "Mask modifier") +
               fmt::format(
                   "// Whether the key is visible to the query: the mask's value is nonzero.\n"
                   "__device__ __forceinline__ bool kjit_mask_mod({}) {{\n"
                   "  return kjit_mask_value(in_q_idx, in_kv_idx, in_head{}) != 0;\n}}\n",
                   parameters, arguments);
    m.reference = [mask](const ScorePoint& p) {
      return evaluate(mask, 0, false, p) != 0 ? 1.0 : 0.0;
    };
    m.source += "\n" + emit_tile_function(mask, m.operands);
    m.tile = [mask, operands = m.operands](const TileBox& box) {
      return classify(mask, operands, box);
    };
  }
  return m;
}

}  // namespace

const char* to_string(ModifierOperandKind kind) {
  switch (kind) {
    case ModifierOperandKind::PerHead:
      return "per head";
    case ModifierOperandKind::PerQuery:
      return "per query position";
    case ModifierOperandKind::PerKey:
      return "per key position";
  }
  return "?";
}

Modifier score_mod_from_ir(const std::string& text) {
  return make(text, true);
}

Modifier mask_mod_from_ir(const std::string& text) {
  return make(text, false);
}

namespace {
std::shared_ptr<const Modifier> cached(const std::string& text, bool score) {
  static std::mutex mutex;
  static std::map<std::pair<bool, std::string>, std::shared_ptr<const Modifier>> parsed;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = parsed.find({score, text});
    if (found != parsed.end()) return found->second;
  }
  auto modifier = std::make_shared<const Modifier>(make(text, score));  // may throw: not kept
  std::lock_guard<std::mutex> lock(mutex);
  if (parsed.size() >= 1024) parsed.clear();  // a bound for processes that make many
  return parsed.emplace(std::pair{score, text}, std::move(modifier)).first->second;
}
}  // namespace

std::shared_ptr<const Modifier> cached_score_mod(const std::string& text) {
  return cached(text, true);
}
std::shared_ptr<const Modifier> cached_mask_mod(const std::string& text) {
  return cached(text, false);
}

}  // namespace kjit::attention
