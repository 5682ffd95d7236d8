#include "kjit/compiler/lowering/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>

#include "kjit/compiler/ir/printer.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/support/key_values.h"

namespace kjit::ir {

const char* to_string(Access access) {
  switch (access) {
    case Access::Full:
      return "full";
    case Access::Scalar:
      return "scalar";
    case Access::Row:
      return "row";
    case Access::Column:
      return "column";
    case Access::Strided:
      return "strided";
  }
  return "?";
}

std::optional<Access> parse_access(const std::string& name) {
  for (Access a : {Access::Full, Access::Scalar, Access::Row, Access::Column, Access::Strided}) {
    if (name == to_string(a)) return a;
  }
  return std::nullopt;
}

std::string ElementwiseProblem::text() const {
  std::string in, out;
  std::vector<int> inputs = graph.inputs();
  KJIT_CHECK(inputs.size() == access.size(), "one access pattern per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& n = graph.node(inputs[i]);
    in += fmt::format("{}{}:{}:{}", i ? "," : "", n.name, ir::to_string(n.dtype),
                      to_string(access[i]));
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const auto& [name, id] = graph.outputs()[i];
    out += fmt::format("{}{}:{}", i ? "," : "", name, ir::to_string(graph.node(id).dtype));
  }
  return fmt::format("elementwise ir={} in={} out={} align={}",
                     ir_digest.empty() ? hex64(hash64(print(graph))) : ir_digest, in, out,
                     aligned ? "16" : "1");
}

std::string ElementwiseConfig::source_text() const {
  return fmt::format("block={},vec={},unroll={}{}{}{}", block_threads, vector_width, unroll,
                     prefetch ? ",prefetch=1" : "", stream ? ",stream=1" : "",
                     grid == Grid::Rows ? ",grid=rows" : "");
}

const char* to_string(ElementwiseConfig::Grid grid) {
  switch (grid) {
    case ElementwiseConfig::Grid::Tiles:
      return "tiles";
    case ElementwiseConfig::Grid::Rows:
      return "rows";
    case ElementwiseConfig::Grid::Waves:
      break;
  }
  return "waves";
}

int grid_blocks_per_sm(const ElementwiseConfig& config, int resident) {
  const int vectors_per_block = std::max(config.block_threads * config.unroll, 1);
  const int wanted = config.per_sm > 0 ? config.per_sm : std::max(1, 2048 / vectors_per_block);
  return std::max(1, std::min(wanted, resident));
}

int64_t grid_blocks(const ElementwiseConfig& config, int64_t vectors, int sm_count, int resident) {
  const int64_t per_block = int64_t{config.block_threads} * config.unroll;
  const int64_t needed = std::max<int64_t>(1, (vectors + per_block - 1) / per_block);
  // The grid's x dimension holds at most 2^31 - 1 blocks; the grid-stride loop
  // covers whatever a capped grid leaves.
  constexpr int64_t kMaxBlocks = 2147483647;
  if (config.grid == ElementwiseConfig::Grid::Tiles) return std::min(needed, kMaxBlocks);
  return std::min(int64_t{sm_count} * grid_blocks_per_sm(config, resident), needed);
}

GridDims grid_dims(const ElementwiseConfig& config, int64_t n, int64_t cols, int vector_width,
                   int sm_count, int resident) {
  const int64_t v = std::max(vector_width, 1);
  if (config.grid != ElementwiseConfig::Grid::Rows)
    return {grid_blocks(config, n / v, sm_count, resident), 1};
  const int64_t width = std::max<int64_t>(cols, 1);
  const int64_t rows = n / width;
  const int64_t x =
      std::max<int64_t>(1, (width / v + config.block_threads - 1) / config.block_threads);
  if (x > 2147483647)
    throw UserError(fmt::format("grid=rows: {} columns need {} blocks of {} threads, over the "
                                "grid's 2^31 - 1",
                                cols, x, config.block_threads),
                    "use grid=waves");
  // gridDim.y holds at most 65535 blocks; the kernel loops over the rest.
  const int64_t y = std::clamp<int64_t>((rows + config.unroll - 1) / config.unroll, 1, 65535);
  return {x, y};
}

std::string ElementwiseConfig::text() const {
  return source_text() + (per_sm ? fmt::format(",per_sm={}", per_sm) : "") +
         (grid == Grid::Tiles ? ",grid=tiles" : "");
}

namespace {
const char* const kConfigHint = "write key=integer, e.g. block=256,unroll=4";
const char* const kKeysHint =
    "the keys are block, vec, unroll, prefetch, stream, per_sm and grid (and, on the command "
    "line, align)";
}  // namespace

ElementwiseConfig ElementwiseConfig::parse(const std::string& text) {
  return parse(split_key_values(text, "elementwise config", kConfigHint));
}

ElementwiseConfig ElementwiseConfig::parse(const KeyValues& pairs) {
  ElementwiseConfig config;
  for (const auto& [key, text_value] : pairs) {
    if (key == "grid") {
      if (text_value != "waves" && text_value != "tiles" && text_value != "rows")
        throw UserError("grid=" + text_value + " is not waves, tiles or rows",
                        "grid=waves: whole waves of blocks in a grid-stride loop; grid=tiles: "
                        "one block per block-sized tile of the work; grid=rows: column strips "
                        "of a [rows, cols] output, unroll rows per thread");
      config.grid = text_value == "tiles"  ? Grid::Tiles
                    : text_value == "rows" ? Grid::Rows
                                           : Grid::Waves;
      continue;
    }
    // A key of another family's config (mma=wgmma) is unknown here, not a bad integer.
    static const char* const kIntegerKeys[] = {"block",    "vec",    "unroll",
                                               "prefetch", "stream", "per_sm"};
    if (std::find(std::begin(kIntegerKeys), std::end(kIntegerKeys), key) == std::end(kIntegerKeys))
      throw UserError("unknown config key '" + key + "'", kKeysHint);
    int value = 0;
    const char* b = text_value.data();
    const char* e = b + text_value.size();
    auto r = std::from_chars(b, e, value);
    if (r.ec == std::errc::result_out_of_range)
      throw UserError("config item '" + key + "=" + text_value + "' is out of range");
    if (r.ec != std::errc() || r.ptr != e || b == e)
      throw UserError("bad config item '" + key + "=" + text_value + "'", kConfigHint);
    auto power_of_two = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    if (key == "block") {
      if (value < 32 || value > 1024 || value % 32 != 0)
        throw UserError("block=" + std::to_string(value) +
                        " is not a multiple of 32 in [32, 1024]");
      config.block_threads = value;
    } else if (key == "vec") {
      if (value != 0 && (!power_of_two(value) || value > 16))
        throw UserError("vec=" + std::to_string(value) +
                        " is not 0 (auto) or a power of two <= 16");
      config.vector_width = value;
    } else if (key == "unroll") {
      if (value < 1 || value > 16)
        throw UserError("unroll=" + std::to_string(value) + " is not in [1, 16]");
      config.unroll = value;
    } else if (key == "prefetch") {
      if (value != 0 && value != 1)
        throw UserError("prefetch=" + std::to_string(value) + " is not 0 or 1");
      config.prefetch = value;
    } else if (key == "stream") {
      if (value != 0 && value != 1)
        throw UserError("stream=" + std::to_string(value) + " is not 0 or 1");
      config.stream = value;
    } else if (key == "per_sm") {
      if (value < 0 || value > 32)
        throw UserError("per_sm=" + std::to_string(value) +
                        " is not in [0, 32] (0: auto, 2048 vectors in flight per SM)");
      config.per_sm = value;
    }
  }
  if (config.grid == Grid::Rows && config.prefetch)
    throw UserError("prefetch=1 does not apply to grid=rows",
                    "prefetch pipelines the grid-stride loop of grid=waves and grid=tiles");
  if (config.grid == Grid::Rows && config.per_sm)
    throw UserError("per_sm does not apply to grid=rows",
                    "grid=rows launches one block per column strip and group of rows");
  return config;
}

namespace {

bool vector_read(Access a) {
  return a == Access::Full || a == Access::Row;
}

std::string float_literal(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g", static_cast<double>(static_cast<float>(value)));
  std::string text = buffer;
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  text += "f";
  return value < 0 ? "(" + text + ")" : text;
}

std::string literal(double value, const std::string& type) {
  if (type == "float") return float_literal(value);
  if (type == "bool") return value != 0 ? "true" : "false";
  int64_t v = static_cast<int64_t>(value);
  if (v == -2147483648LL) return "(-2147483647 - 1)";
  return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
}

// `expr` of compute type `from` as compute type `to`.
std::string convert(const std::string& expr, const std::string& from, const std::string& to) {
  if (from == to) return expr;
  if (to == "float") return from == "bool" ? "(" + expr + " ? 1.0f : 0.0f)" : "(float)" + expr;
  if (to == "int") return from == "bool" ? "(int)" + expr : "__float2int_rz(" + expr + ")";
  return from == "float" ? "(" + expr + " != 0.0f)" : "(" + expr + " != 0)";
}

std::string replace_operands(std::string spelling, const std::vector<std::string>& operands) {
  for (size_t k = 0; k < operands.size(); ++k) {
    std::string placeholder = "{" + std::to_string(k) + "}";
    for (size_t at = spelling.find(placeholder); at != std::string::npos;
         at = spelling.find(placeholder, at + operands[k].size()))
      spelling.replace(at, placeholder.size(), operands[k]);
  }
  return spelling;
}

// The C expression that computes a node from its operands.
std::string node_expression(const Graph& graph, int id, const std::vector<std::string>& names,
                            ScalarMath math) {
  const Node& n = graph.node(id);
  const OpInfo& info = op_info(n.op);
  std::string result_type = compute_type(n.dtype);
  // The compute type each operand is converted to.
  std::vector<std::string> wanted(n.operands.size(), result_type);
  if (info.rule == TypeRule::Compare) {
    bool any_float = false;
    for (int o : n.operands) any_float = any_float || is_floating(graph.node(o).dtype);
    std::fill(wanted.begin(), wanted.end(), any_float ? "float" : "int");
  } else if (info.rule == TypeRule::Select) {
    wanted[0] = "bool";
  } else if (info.rule == TypeRule::Cast) {
    wanted[0] = compute_type(graph.node(n.operands[0]).dtype);
  }
  std::vector<std::string> operands;
  for (size_t k = 0; k < n.operands.size(); ++k) {
    const Node& o = graph.node(n.operands[k]);
    if (o.op == OpCode::Const) {
      operands.push_back(literal(o.value, wanted[k]));
    } else {
      operands.push_back(
          convert(names[static_cast<size_t>(n.operands[k])], compute_type(o.dtype), wanted[k]));
    }
  }
  if (n.op == OpCode::Cast) {
    std::string value = convert(operands[0], wanted[0], result_type);
    if (n.cast_to == DType::F16 || n.cast_to == DType::BF16)
      return fmt::format("kjit::round_through<{}>({})", storage_type(n.cast_to), value);
    return value;
  }
  if (n.op == OpCode::Pow) {
    const Node& exponent = graph.node(n.operands[1]);
    // x^2 is a multiply: exact to one rounding and far cheaper than powf.
    if (exponent.op == OpCode::Const && exponent.value == 2.0)
      return operands[0] + " * " + operands[0];
  }
  if (math != ScalarMath::Exact && result_type == "float" && n.op == OpCode::Gelu)
    return replace_operands("kjit::gelu_for_16bit({0})", operands);  // see ScalarMath
  if (math == ScalarMath::Fast && result_type == "float") {
    // One MUFU instruction each where the exact forms take a subroutine (see ScalarMath).
    if (n.op == OpCode::Tanh) return replace_operands("kjit::tanh_approx({0})", operands);
    if (n.op == OpCode::Div) return replace_operands("__fdividef({0}, {1})", operands);
  }
  const char* spelling = result_type == "int" && info.cuda_int ? info.cuda_int : info.cuda_float;
  return replace_operands(spelling, operands);
}

// The C variable for an op node's value, from its IR name: a temporary _3 is t3,
// a named value y is v_y (inputs are in_x, outputs out_y).
std::string variable_name(const std::string& ir_name) {
  const bool temporary = ir_name.size() > 1 && ir_name[0] == '_' &&
                         ir_name.find_first_not_of("0123456789", 1) == std::string::npos;
  return temporary ? "t" + ir_name.substr(1) : "v_" + ir_name;
}

}  // namespace

std::string emit_chain_statements(const Graph& graph, const std::string& indent,
                                  std::vector<std::string>* result_names, ScalarMath math) {
  std::vector<std::string> names(graph.nodes().size());
  // sin(v) and cos(v) of one value share their argument reduction, the costly
  // part of both: such pairs are emitted as one kjit::sincos_f32() call, where the
  // first of the two comes (cos(x) may come before sin(x)).
  struct SinCos {
    int sin = -1, cos = -1;
  };
  std::vector<SinCos> pair_at(graph.nodes().size());
  std::vector<bool> paired(graph.nodes().size(), false);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& sin_node = graph.node(static_cast<int>(i));
    if (sin_node.op != OpCode::Sin || std::string(compute_type(sin_node.dtype)) != "float")
      continue;
    for (size_t j = 0; j < graph.nodes().size(); ++j) {
      const Node& cos_node = graph.node(static_cast<int>(j));
      if (cos_node.op == OpCode::Cos && !paired[j] && cos_node.operands == sin_node.operands &&
          cos_node.dtype == sin_node.dtype) {
        pair_at[std::min(i, j)] = {static_cast<int>(i), static_cast<int>(j)};
        paired[i] = paired[j] = true;
        break;
      }
    }
  }
  // Comments show each op as the header's IR listing does (same names), so the
  // code reads line by line against it.
  const std::vector<std::string> ir_names = value_names(graph);
  auto describe = [&](int id) {
    const Node& n = graph.node(id);
    return node_line(graph, id, ir_names) + "  -> " + ir::to_string(n.dtype) +
           ir::to_string(n.shape);
  };
  std::string out;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    int id = static_cast<int>(i);
    const Node& n = graph.node(id);
    if (n.op == OpCode::Input) {
      names[i] = "in_" + n.name;
      continue;
    }
    if (n.op == OpCode::Const) {
      names[i] = literal(n.value, compute_type(n.dtype));
      continue;
    }
    if (!names[i].empty()) continue;  // the second half of a sin/cos pair, emitted already
    names[i] = variable_name(ir_names[i]);
    if (pair_at[i].sin >= 0) {
      const auto sin_id = static_cast<size_t>(pair_at[i].sin);
      const auto cos_id = static_cast<size_t>(pair_at[i].cos);
      names[sin_id] = variable_name(ir_names[sin_id]);
      names[cos_id] = variable_name(ir_names[cos_id]);
      const int x = graph.node(static_cast<int>(sin_id)).operands[0];
      const std::string argument =
          convert(names[static_cast<size_t>(x)], compute_type(graph.node(x).dtype), "float");
      out += indent + "// " + describe(static_cast<int>(sin_id)) + "\n";
      out += indent + "// " + describe(static_cast<int>(cos_id)) + "\n";
      out += indent + "// (one sincos: sin and cos of one value share the argument reduction)\n";
      out +=
          fmt::format("{}float {}, {};\n{}kjit::sincos_f32({}, &{}, &{});\n", indent, names[sin_id],
                      names[cos_id], indent, argument, names[sin_id], names[cos_id]);
      continue;
    }
    out += indent + "// " + describe(id) + "\n";
    out += fmt::format("{}const {} {} = {};\n", indent, compute_type(n.dtype), names[i],
                       node_expression(graph, id, names, math));
  }
  if (result_names) {
    result_names->clear();
    for (const auto& [name, id] : graph.outputs())
      result_names->push_back(names[static_cast<size_t>(id)]);
  }
  return out;
}

std::string emit_scalar_function(const Graph& graph, int output, const std::string& function_name,
                                 const std::string& title, ScalarMath math) {
  if (output < 0 || output >= static_cast<int>(graph.outputs().size()))
    throw InternalError("emit_scalar_function: no output " + std::to_string(output));
  std::string parameters;
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    parameters +=
        fmt::format("{}{} in_{}", parameters.empty() ? "" : ", ", compute_type(n.dtype), n.name);
  }
  std::vector<std::string> results;
  std::string body = emit_chain_statements(graph, "  ", &results, math);
  const Node& out = graph.node(graph.outputs()[static_cast<size_t>(output)].second);
  const std::string type = is_floating(out.dtype) ? "float" : compute_type(out.dtype);
  std::string result = convert(results[static_cast<size_t>(output)], compute_type(out.dtype), type);
  std::string ir_text = print(graph);
  std::string comment;
  for (size_t start = 0; start < ir_text.size();) {
    size_t end = ir_text.find('\n', start);
    comment += "//   " + ir_text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return fmt::format(
      "// {}, fused from the IR:\n{}__device__ __forceinline__ {} {}({}) {{\n{}"
      "  return {};\n}}\n",
      title, comment, type, function_name, parameters, body, result);
}

std::string emit_epilogue_function(const Graph& graph, const std::string& function_name,
                                   ScalarMath math) {
  if (graph.outputs().size() != 1)
    throw UserError("an epilogue has one output; this graph has " +
                    std::to_string(graph.outputs().size()));
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    if (!is_floating(n.dtype))
      throw UserError("epilogue input '" + n.name + "' is " + ir::to_string(n.dtype) +
                      "; an epilogue takes floating inputs");
  }
  return emit_scalar_function(graph, 0, function_name, "Epilogue " + function_name, math);
}

int effective_vector_width(const ElementwiseProblem& problem, const ElementwiseConfig& config) {
  if (!problem.aligned) return 1;
  if (config.vector_width > 0) return config.vector_width;
  int narrowest = 4;
  std::vector<int> inputs = problem.graph.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (vector_read(problem.access[i]))
      narrowest = std::min(narrowest, size_bytes(problem.graph.node(inputs[i]).dtype));
  }
  for (const auto& [name, id] : problem.graph.outputs())
    narrowest = std::min(narrowest, size_bytes(problem.graph.node(id).dtype));
  // 16 bytes of the narrowest type, at most 8 elements (a bool output would ask
  // for 16, tying up 16 registers per input vector).
  return std::min(16 / narrowest, 8);
}

namespace {

KernelSource finish_source(std::string text, const std::string& kernel_name,
                           const std::string& problem_text, const std::string& config_text,
                           const ElementwiseConfig& config) {
  KernelSource source;
  source.name = kernel_name;
  source.source = std::move(text);
  source.family = "elementwise";
  source.problem = problem_text;
  source.config = config_text;
  source.block_threads = config.block_threads;
  return source;
}

}  // namespace

KernelSource lower_elementwise(const ElementwiseProblem& problem, const ElementwiseConfig& config) {
  const Graph& graph = problem.graph;
  std::vector<int> inputs = graph.inputs();
  if (inputs.size() != problem.access.size())
    throw InternalError("elementwise problem: one access pattern per input");
  if (graph.outputs().empty()) throw UserError("the graph has no output");
  const int V = effective_vector_width(problem, config);
  const int U = config.unroll;
  const std::string problem_text = problem.text();
  const std::string config_text = config.source_text();
  const std::string ir_text = print(graph);
  const std::string id =
      KeyHasher().add(kGeneratorVersion).add(ir_text).add(problem_text).add(config_text).hex();
  const std::string kernel_name = "kjit_ew_" + id;

  std::string s;
  // ---- header comment
  s += "// kjit elementwise kernel: the whole IR graph fused into one pass over memory.\n";
  s += fmt::format("// Generated by {}; identical inputs give identical source.\n//\n",
                   kGeneratorVersion);
  s += "// IR (after verify, constant folding, CSE, DCE):\n";
  for (size_t start = 0; start < ir_text.size();) {
    size_t end = ir_text.find('\n', start);
    s += "//   " + ir_text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  s += fmt::format("// Problem: {}\n// Config:  {}\n// Kernel:  {} (id {})\n", problem_text,
                   config_text, kernel_name, id);
  const bool rows_grid = config.grid == ElementwiseConfig::Grid::Rows;
  const std::string schedule_text =
      rows_grid
          ? fmt::format(
                "// Each thread covers one vector of columns in U = {} rows (all loads issued\n"
                "// before any math, so several are in flight): a 2-D grid, x over the vectors\n"
                "// of a row, y over groups of U rows (a loop where rows / U passes 65535), so\n"
                "// row and column come from the block's coordinates (no division) and an\n"
                "// operand broadcast down the rows is loaded once per thread.\n",
                U)
          : fmt::format(
                "// Each thread handles U = {} {} per loop iteration{}.\n"
                "// The launcher sizes the grid to whole waves, SMs x blocks per SM ({}),\n"
                "// and a grid-stride loop covers the rest.\n",
                U, U == 1 ? "vector" : "independent vectors",
                U == 1 ? "" : "\n// (all loads issued before any math, so U are in flight)",
                // Not per_sm's value: a launch argument, the source is the same for all.
                fmt::format("blocks of {} x {} vectors:\n// as many as make about 2048 vectors "
                            "in flight per SM, at least one, never more than fit; or per_sm",
                            config.block_threads, U));
  s += fmt::format(
      "//\n// Plan: the output is viewed as [rows, cols] with n = rows * cols elements.\n"
      "// {}\n"
      "{}"
      "// f16/bf16 values are computed in f32 and rounded once, at the store.\n\n",
      V > 1 ? fmt::format("Aligned path: V = {} elements per vector, moved as 16-byte chunks; "
                          "n and cols are\n// multiples of V and vector pointers are 16-byte "
                          "aligned (the launcher checks).",
                          V)
            : std::string("Scalar path: one element per step (pointers or sizes are not "
                          "16-byte / vector aligned)."),
      schedule_text);
  s += "#include \"kjit/types.cuh\"\n#include \"kjit/math.cuh\"\n#include "
       "\"kjit/elementwise.cuh\"\n\n";

  // ---- the chain for one element
  std::string chain_parameters;
  for (int in : inputs) {
    const Node& n = graph.node(in);
    chain_parameters += fmt::format("{}{} in_{}", chain_parameters.empty() ? "" : ", ",
                                    compute_type(n.dtype), n.name);
  }
  for (const auto& [name, out] : graph.outputs())
    chain_parameters += fmt::format("{}{}& out_{}", chain_parameters.empty() ? "" : ", ",
                                    compute_type(graph.node(out).dtype), name);
  std::vector<std::string> results;
  std::string body = emit_chain_statements(graph, "  ", &results);
  s += "// The chain for one element: every IR op in order, in registers.\n";
  s += fmt::format("__device__ __forceinline__ void kjit_chain({}) {{\n{}", chain_parameters, body);
  for (size_t k = 0; k < graph.outputs().size(); ++k)
    s += fmt::format("  out_{} = {};\n", graph.outputs()[k].first, results[k]);
  s += "}\n\n";

  // ---- the kernel
  std::string parameters;
  for (int in : inputs) {
    const Node& n = graph.node(in);
    parameters += fmt::format("    const {}* __restrict__ in_{},\n", storage_type(n.dtype), n.name);
  }
  for (const auto& [name, out] : graph.outputs())
    parameters +=
        fmt::format("    {}* __restrict__ out_{},\n", storage_type(graph.node(out).dtype), name);
  parameters += "    long long n, long long cols";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (problem.access[i] == Access::Strided) {
      const std::string& name = graph.node(inputs[i]).name;
      parameters += fmt::format(",\n    long long in_{0}_stride0, long long in_{0}_stride1", name);
    }
  }
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({})\n{}(\n{}) {{\n",
                   config.block_threads, kernel_name, parameters);
  s += fmt::format("  constexpr int V = {};  // elements per vector\n", V);
  s += fmt::format("  constexpr int U = {};  // {}\n", U,
                   rows_grid ? "rows per thread (independent vectors in flight)"
                             : "independent vectors per thread per iteration");
  // The math and the stores of one vector (inside the loop over u): the chain per
  // element, one rounding at the store; `element(i)` is input i's element e, `offset`
  // the vector's first element.
  auto chain_and_store = [&](const std::string& indent,
                             const std::function<std::string(size_t)>& element,
                             const std::string& offset) {
    std::string out;
    for (const auto& [name, output] : graph.outputs())
      out += fmt::format("{}kjit::Vec<{}, V> out_{}_vec;\n", indent,
                         storage_type(graph.node(output).dtype), name);
    out += "#pragma unroll\n" + indent + "for (int e = 0; e < V; ++e) {\n";
    std::string call_arguments;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string value = element(i);
      if (is_floating(graph.node(inputs[i]).dtype)) value = "kjit::to_f32(" + value + ")";
      call_arguments += (call_arguments.empty() ? "" : ", ") + value;
    }
    for (const auto& [name, output] : graph.outputs()) {
      out +=
          fmt::format("{}  {} value_{};\n", indent, compute_type(graph.node(output).dtype), name);
      call_arguments += (call_arguments.empty() ? "value_" : ", value_") + name;
    }
    out += fmt::format("{}  kjit_chain({});\n", indent, call_arguments);
    for (const auto& [name, output] : graph.outputs()) {
      const DType d = graph.node(output).dtype;
      const std::string value =
          is_floating(d) ? fmt::format("kjit::from_f32<{}>(value_{})", storage_type(d), name)
                         : "value_" + name;
      out += fmt::format("{}  out_{}_vec.v[e] = {};\n", indent, name, value);
    }
    out += indent + "}\n";
    if (config.stream)
      out += indent + "// Streaming stores (st.global.cs): written once, never read back here.\n";
    for (const auto& [name, output] : graph.outputs())
      out += fmt::format("{}kjit::store_vec{}<{}, V>(out_{} + {}, out_{}_vec);\n", indent,
                         config.stream ? "_streaming" : "", storage_type(graph.node(output).dtype),
                         name, offset, name);
    return out;
  };
  // Scalars: one load per thread, before the loop.
  auto load_scalars = [&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (problem.access[i] != Access::Scalar) continue;
      const Node& n = graph.node(inputs[i]);
      s += fmt::format("  // {}: one element broadcast to every output element\n", n.name);
      s += fmt::format("  const {} in_{}_scalar = in_{}[0];\n", storage_type(n.dtype), n.name,
                       n.name);
    }
  };
  if (rows_grid) {
    s += "  const long long rows = n / cols;\n";
    s += "  // This thread's vector of columns; blocks past the row's end have nothing to do.\n";
    s += "  const long long col = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * V;\n";
    s += "  if (col >= cols) return;\n";
    load_scalars();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph.node(inputs[i]);
      const char* type = storage_type(n.dtype);
      if (problem.access[i] == Access::Row) {
        s += fmt::format(
            "  // {}[col]: a row broadcast down the rows, loaded once for all of this thread's "
            "rows\n",
            n.name);
        s += fmt::format(
            "  const kjit::Vec<{0}, V> in_{1}_row = kjit::load_vec<{0}, V>(in_{1} + "
            "col);\n",
            type, n.name);
      }
    }
    s += "  // Groups of U rows: blockIdx.y, then + gridDim.y where the grid's 65535 rows of\n"
         "  // blocks do not cover them all.\n";
    s += "  for (long long row0 = (long long)blockIdx.y * U; row0 < rows;\n"
         "       row0 += (long long)gridDim.y * U) {\n";
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph.node(inputs[i]);
      const char* type = storage_type(n.dtype);
      if (problem.access[i] == Access::Column)
        s += fmt::format("    {} in_{}_column[U];\n", type, n.name);
      else if (problem.access[i] == Access::Full || problem.access[i] == Access::Strided)
        s += fmt::format("    kjit::Vec<{}, V> in_{}_vec[U];\n", type, n.name);
    }
    s += "    // Load phase: every load of the U rows is issued before any math.\n";
    s += "#pragma unroll\n    for (int u = 0; u < U; ++u) {\n";
    s += "      const long long row = row0 + u;\n      if (row >= rows) break;\n";
    s += "      const long long i = row * cols + col;  // first element of this vector\n";
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph.node(inputs[i]);
      const char* type = storage_type(n.dtype);
      switch (problem.access[i]) {
        case Access::Full:
          s += fmt::format("      in_{1}_vec[u] = kjit::load_vec<{0}, V>(in_{1} + i);  // {1}[i]\n",
                           type, n.name);
          break;
        case Access::Column:
          s += fmt::format(
              "      in_{0}_column[u] = in_{0}[row];  // {0}[row], a column broadcast across\n",
              n.name);
          break;
        case Access::Strided:
          s += fmt::format(
              "#pragma unroll\n      for (int e = 0; e < V; ++e)  // {0}[row * stride0 + col * "
              "stride1]\n"
              "        in_{0}_vec[u].v[e] = in_{0}[row * in_{0}_stride0 + (col + e) * "
              "in_{0}_stride1];\n",
              n.name);
          break;
        case Access::Row:
        case Access::Scalar:
          break;
      }
    }
    s += "    }\n";
    s += "    // Compute and store phase: the chain per element, one rounding at the store.\n";
    s += "#pragma unroll\n    for (int u = 0; u < U; ++u) {\n";
    s += "      const long long row = row0 + u;\n      if (row >= rows) break;\n";
    s += chain_and_store(
        "      ",
        [&](size_t i) {
          const std::string& name = graph.node(inputs[i]).name;
          switch (problem.access[i]) {
            case Access::Scalar:
              return "in_" + name + "_scalar";
            case Access::Row:
              return "in_" + name + "_row.v[e]";
            case Access::Column:
              return "in_" + name + "_column[u]";
            default:
              return "in_" + name + "_vec[u].v[e]";
          }
        },
        "row * cols + col");
    s += "    }\n  }\n}\n";
    return finish_source(std::move(s), kernel_name, problem_text, config_text, config);
  }
  s += "  const long long vectors = n / V;\n";
  load_scalars();
  s += "  // Grid-stride loop: thread t of block b starts at vector b * blockDim.x * U + t,\n"
       "  // and its U vectors are blockDim.x apart; consecutive threads touch consecutive\n"
       "  // vectors, so every warp access is coalesced.\n";
  s += "  const long long step = (long long)gridDim.x * blockDim.x * U;\n";
  const bool prefetch = config.prefetch != 0;
  // Per input, U vectors ("vec", or a broadcast column's U values "column") and,
  // with prefetch, the math's copy of them ("now").
  auto array = [&](size_t i, const std::string& suffix) {
    const std::string base = "in_" + graph.node(inputs[i]).name;
    if (problem.access[i] != Access::Column) return base + "_" + suffix;
    return suffix == "vec" ? base + "_column" : base + "_column_" + suffix;
  };
  // The U vectors of each input at vectors `base` + u * blockDim.x.
  auto declare = [&](const std::string& indent, const std::string& suffix) {
    std::string out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph.node(inputs[i]);
      const char* type = storage_type(n.dtype);
      if (problem.access[i] == Access::Column)
        out += fmt::format("{}{} {}[U];\n", indent, type, array(i, suffix));
      else if (problem.access[i] != Access::Scalar)
        out += fmt::format("{}kjit::Vec<{}, V> {}[U];\n", indent, type, array(i, suffix));
    }
    return out;
  };
  bool needs_row_col = false;
  for (Access a : problem.access)
    needs_row_col = needs_row_col || a == Access::Row || a == Access::Column;
  if (needs_row_col) s += "  const bool n_fits_32 = n <= 0xffffffffLL;\n";
  auto loads = [&](const std::string& indent, const std::string& base, const std::string& suffix) {
    std::string out;
    out += "#pragma unroll\n" + indent + "for (int u = 0; u < U; ++u) {\n";
    out += fmt::format("{}  const long long vec = {} + (long long)u * blockDim.x;\n", indent, base);
    out += indent + "  if (vec >= vectors) break;\n";
    out += indent + "  const long long i = vec * V;  // first element of this vector\n";
    if (needs_row_col)
      out += indent +
             "  // Its row and column: a 32-bit division where n fits in 32 bits (a uniform\n" +
             indent + "  // branch; a 64-bit one costs several times the instructions).\n" +
             indent +
             "  const long long row = n_fits_32 ? (long long)((unsigned)i / (unsigned)cols) : i / "
             "cols;\n" +
             indent + "  const long long col = i - row * cols;\n";
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph.node(inputs[i]);
      const char* type = storage_type(n.dtype);
      switch (problem.access[i]) {
        case Access::Full:
          out += fmt::format("{}  {}[u] = kjit::load_vec<{}, V>(in_{} + i);  // {}[i]\n", indent,
                             array(i, suffix), type, n.name, n.name);
          break;
        case Access::Row:
          out += fmt::format(
              "{}  {}[u] = kjit::load_vec<{}, V>(in_{} + col);  // {}[col], a row "
              "broadcast down\n",
              indent, array(i, suffix), type, n.name, n.name);
          break;
        case Access::Column:
          out += fmt::format(
              "{}  {}[u] = in_{}[row];  // {}[row], a column broadcast "
              "across (V divides cols)\n",
              indent, array(i, suffix), n.name, n.name);
          break;
        case Access::Strided:
          out += fmt::format(
              "#pragma unroll\n{0}  for (int e = 0; e < V; ++e)  // {1}[row * stride0 + col "
              "* stride1]\n"
              "{0}    {2}[u].v[e] = in_{1}[((i + e) / cols) * in_{1}_stride0 + ((i + e) % "
              "cols) * in_{1}_stride1];\n",
              indent, n.name, array(i, suffix));
          break;
        case Access::Scalar:
          break;
      }
    }
    out += indent + "}\n";
    return out;
  };
  const std::string start = "(long long)blockIdx.x * blockDim.x * U + threadIdx.x";
  // The arrays the math reads: this iteration's loads ("vec"), or with prefetch a
  // copy of them ("now") taken before the next iteration's loads overwrite them.
  const std::string current = prefetch ? "now" : "vec";
  if (prefetch) {
    s += "  // Software pipelining: the first iteration's vectors load before the loop;\n"
         "  // each iteration then issues the next one's loads before its own math, so\n"
         "  // they are in flight while the chain computes.\n";
    s += declare("  ", "vec");
    s += "  {\n    const long long first = " + start + ";\n";
    s += loads("    ", "first", "vec");
    s += "  }\n";
  }
  s += "  for (long long first = " + start +
       ";\n"
       "       first < vectors; first += step) {\n";
  if (prefetch) {
    s += declare("    ", "now");
    s += "    // This iteration's vectors, then the next iteration's loads.\n";
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (problem.access[i] == Access::Scalar) continue;
      s += fmt::format("#pragma unroll\n    for (int u = 0; u < U; ++u) {}[u] = {}[u];\n",
                       array(i, "now"), array(i, "vec"));
    }
    s += loads("    ", "first + step", "vec");
  } else {
    s += declare("    ", "vec");
    s += "    // Load phase: every load of the U vectors is issued before any math.\n";
    s += loads("    ", "first", "vec");
  }
  // Compute and store phase.
  s += "    // Compute and store phase: the chain per element, one rounding at the store.\n";
  s += "#pragma unroll\n    for (int u = 0; u < U; ++u) {\n";
  s += "      const long long vec = first + (long long)u * blockDim.x;\n";
  s += "      if (vec >= vectors) break;\n";
  s += chain_and_store(
      "      ",
      [&](size_t i) {
        switch (problem.access[i]) {
          case Access::Scalar:
            return "in_" + graph.node(inputs[i]).name + "_scalar";
          case Access::Column:
            return array(i, current) + "[u]";
          default:
            return array(i, current) + "[u].v[e]";
        }
      },
      "vec * V");
  s += "    }\n  }\n}\n";
  return finish_source(std::move(s), kernel_name, problem_text, config_text, config);
}

}  // namespace kjit::ir
