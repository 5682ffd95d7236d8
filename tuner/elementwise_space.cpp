#include "kjit/tuner/elementwise_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/passes/fuse.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/support/key_values.h"
#include "kjit/tuner/signature_fields.h"

namespace kjit::tuner {

using ir::Access;
using ir::ElementwiseConfig;
using Grid = ir::ElementwiseConfig::Grid;

namespace {

constexpr double kLaunchSeconds = 2.5e-6;
// DRAM latency the loads in flight must cover (Little's law), seconds.
constexpr double kMemoryLatencySeconds = 0.8e-6;

// The space's values.
constexpr int kBlocks[] = {128, 256, 512, 1024};
constexpr int kUnrolls[] = {1, 2, 4};
constexpr int kPerSm[] = {0, 1, 2, 4};

int element_bytes(DType dtype) {
  return ir::size_bytes(dtype);
}

bool vector_access(Access a) {
  return a == Access::Full || a == Access::Row;
}

// Elements per vector on the aligned path with vec=0 (mirrors effective_vector_width:
// 16 bytes of the narrowest vector-moved dtype, at most 8); 1 off the aligned path.
int aligned_vector(const ElementwiseTuning::Shape& s) {
  int narrowest = 4;
  for (const auto& [dtype, access] : s.inputs)
    if (vector_access(access)) narrowest = std::min(narrowest, element_bytes(dtype));
  for (DType dtype : s.outputs) narrowest = std::min(narrowest, element_bytes(dtype));
  return std::min(16 / narrowest, 8);
}

int auto_vector(const ElementwiseTuning::Shape& s) {
  return s.aligned ? aligned_vector(s) : 1;
}

// The most registers per thread the space lets a config need (estimated below):
// past 255 ptxas spills to local memory, and the estimate is rough, so a margin.
constexpr int kRegisterLimit = 200;

// Registers per thread of a config: the base (index, row, column, addresses), each
// input's vectors in flight (unroll of them, twice with prefetch) in 32-bit words,
// each output's, and the chain's own values beyond its inputs.
int config_registers(const ElementwiseTuning::Shape& s, const ElementwiseConfig& c) {
  const int v = s.aligned ? (c.vector_width ? c.vector_width : auto_vector(s)) : 1;
  auto words = [&](DType dtype) { return (v * element_bytes(dtype) + 3) / 4; };
  int loaded = 0, stored = 0;
  for (const auto& [dtype, access] : s.inputs)
    loaded += access == Access::Scalar ? 1 : words(dtype);
  for (DType dtype : s.outputs) stored += words(dtype);
  return 24 + c.unroll * ((c.prefetch ? 2 : 1) * loaded + stored) + s.chain_registers;
}

std::string key_of(const ElementwiseConfig& c) {
  return fmt::format("elementwise:b{}:u{}{}{}{}{}", c.block_threads, c.unroll,
                     c.vector_width ? fmt::format(":v{}", c.vector_width) : "",
                     c.prefetch ? ":prefetch" : "", c.stream ? ":stream" : "",
                     c.grid == ElementwiseConfig::Grid::Rows ? ":rows" : "");
}

}  // namespace

std::set<std::string> symbolic_dims(const Graph& graph) {
  std::set<std::string> dims;
  auto note = [&](const ir::Shape& shape) {
    for (const ir::Dim& d : shape)
      if (d.is_symbolic()) dims.insert(d.symbol);
  };
  for (int id : graph.inputs()) note(graph.node(id).shape);
  note(graph.output_shape());
  return dims;
}

double elementwise_cost(const Graph& graph) {
  double cost = 0;
  for (const ir::Node& node : graph.nodes()) {
    switch (node.op) {
      case ir::OpCode::Input:
      case ir::OpCode::Const:
        break;
      case ir::OpCode::Exp:
      case ir::OpCode::Exp2:
      case ir::OpCode::Log:
      case ir::OpCode::Log2:
      case ir::OpCode::Sin:
      case ir::OpCode::Cos:
      case ir::OpCode::Tanh:
      case ir::OpCode::Sigmoid:
      case ir::OpCode::Gelu:
      case ir::OpCode::GeluTanh:
      case ir::OpCode::Silu:
      case ir::OpCode::Softplus:
      case ir::OpCode::Pow:
        cost += 16;
        break;
      case ir::OpCode::Div:
      case ir::OpCode::Sqrt:
      case ir::OpCode::Rsqrt:
        cost += 4;
        break;
      default:
        cost += 1;
    }
  }
  return cost;
}

ElementwiseTuning::ElementwiseTuning(std::string expression, std::string dtype,
                                     std::map<std::string, int64_t> sizes,
                                     std::map<std::string, std::vector<int64_t>> strides)
    : expression_(std::move(expression)),
      dtype_(std::move(dtype)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)) {
  ir::ParseOptions options;
  if (!dtype_.empty()) {
    std::optional<DType> d = ir::parse_dtype(dtype_);
    if (!d) throw UserError("unknown dtype '" + dtype_ + "'; the dtypes are " + ir::dtype_names());
    options.default_dtype = *d;
  }
  const Graph graph = ir::optimize(ir::parse(expression_, options));
  // Every size names a dim of the expression (one that names none was ignored, and
  // the problem tuned was not the one written; the CLI refuses such a --k too).
  const std::set<std::string> dims = symbolic_dims(graph);
  for (const auto& [name, size] : sizes_)
    if (!dims.count(name)) {
      std::string names;
      for (const std::string& d : dims) names += (names.empty() ? "" : ", ") + d;
      throw UserError(
          fmt::format("elementwise problem: size '{}' names no dim of the expression", name),
          names.empty() ? "its shapes are all fixed: give no sizes" : "its dims: " + names);
    }
  // Contiguous tensors at 256-byte aligned addresses (what the tuner allocates).
  uint64_t address = 256;
  auto tensor = [&](DType type, const ir::Shape& shape, const std::string& what) {
    TensorArg t;
    t.dtype = type;
    for (const ir::Dim& d : shape) {
      if (!d.is_symbolic()) {
        t.shape.push_back(d.size);
        continue;
      }
      auto it = sizes_.find(d.symbol);
      if (it == sizes_.end())
        throw UserError("elementwise problem: no size for dim '" + d.symbol + "' of " + what,
                        "give it in \"sizes\" (the CLI: --n, --m)");
      t.shape.push_back(it->second);
    }
    t.data = address;
    address += 256;
    return t;
  };
  std::map<std::string, std::vector<int64_t>> unused = strides_;
  for (int id : graph.inputs()) {
    const std::string& name = graph.node(id).name;
    inputs_.push_back(tensor(graph.node(id).dtype, graph.node(id).shape, "input '" + name + "'"));
    auto it = unused.find(name);
    if (it == unused.end()) continue;
    if (it->second.size() != inputs_.back().shape.size())
      throw UserError(fmt::format("elementwise problem: input '{}' has {} dims but {} strides",
                                  name, inputs_.back().shape.size(), it->second.size()),
                      "one stride (in elements) per dim");
    for (const int64_t stride : it->second)
      if (stride < 0)
        throw UserError(fmt::format("elementwise problem: input '{}' has a negative stride ({})",
                                    name, stride));
    inputs_.back().strides = it->second;
    unused.erase(it);
  }
  if (!unused.empty())
    throw UserError("elementwise problem: strides for '" + unused.begin()->first +
                        "', which is not an input of the expression",
                    "strides name inputs");
  for (const auto& [name, id] : graph.outputs())
    outputs_.push_back(tensor(graph.node(id).dtype, graph.output_shape(), "output '" + name + "'"));
  plan_ = ir::plan_elementwise(graph, hex64(hash64(ir::print(graph))), ElementwiseConfig(), inputs_,
                               outputs_);
  has_plan_ = true;
  derive_shape();
}

ElementwiseTuning::ElementwiseTuning(ElementwisePlan plan) : plan_(std::move(plan)) {
  has_plan_ = true;
  derive_shape();
}

void ElementwiseTuning::derive_shape() {
  shape_.n = plan_.n;
  shape_.cols = plan_.cols;
  shape_.aligned = plan_.problem.aligned;
  const std::vector<int> ids = plan_.problem.graph.inputs();
  for (size_t i = 0; i < ids.size(); ++i) {
    const DType dtype = plan_.problem.graph.node(ids[i]).dtype;
    shape_.inputs.emplace_back(dtype, plan_.problem.access[i]);
    if (plan_.problem.access[i] == Access::Strided && i < plan_.strides.size()) {
      const double element = element_bytes(dtype);
      const double apart = static_cast<double>(std::llabs(plan_.strides[i].second)) * element;
      const double fetched = std::min(32.0, std::max(element, apart));  // per element
      shape_.wasted_bytes += static_cast<double>(plan_.n) * (fetched - element);
    }
  }
  for (const auto& [name, id] : plan_.problem.graph.outputs())
    shape_.outputs.push_back(plan_.problem.graph.node(id).dtype);
  shape_.cost = elementwise_cost(plan_.problem.graph);
  shape_.chain_registers =
      std::max(0, ir::estimated_registers(plan_.problem.graph) - 24 - static_cast<int>(ids.size()));
  class_text_ = plan_.problem.text();
}

std::string ElementwiseTuning::signature() const {
  // Strided inputs: the bytes per element that their sectors fetch and the chain
  // does not use (their strides decide it), so that problems that differ only in
  // strides have keys of their own (x with strides [8192, 2] and its transpose
  // [1, 4096] shared one, and a refit from one's trials read it as the other).
  // Written whenever an input is strided (0 too), so that a strided key without it
  // is an older version's, whose waste is unknown.
  const int64_t waste =
      shape_.n > 0 ? std::llround(shape_.wasted_bytes / static_cast<double>(shape_.n)) : 0;
  return fmt::format("{} n={} cols={} cost={}{}", class_text_, shape_.n, shape_.cols, shape_.cost,
                     has_strided_input() ? fmt::format(" waste={}", waste) : "");
}

bool ElementwiseTuning::has_strided_input() const {
  return std::any_of(shape_.inputs.begin(), shape_.inputs.end(),
                     [](const auto& input) { return input.second == Access::Strided; });
}

std::vector<double> ElementwiseTuning::sizes() const {
  return {static_cast<double>(shape_.n), static_cast<double>(shape_.cols)};
}

nlohmann::json ElementwiseTuning::spec() const {
  if (expression_.empty())
    throw InternalError("an elementwise problem planned by the runtime has no spec");
  nlohmann::json out = {{"family", "elementwise"}, {"expr", expression_}, {"sizes", sizes_}};
  if (!dtype_.empty()) out["dtype"] = dtype_;
  if (!strides_.empty()) out["strides"] = strides_;
  return out;
}

Work ElementwiseTuning::work() const {
  Work w;
  const double rows = shape_.cols > 0 ? static_cast<double>(shape_.n) / shape_.cols : 0;
  for (const auto& [dtype, access] : shape_.inputs) {
    const double count = access == Access::Scalar   ? 1
                         : access == Access::Row    ? static_cast<double>(shape_.cols)
                         : access == Access::Column ? rows
                                                    : static_cast<double>(shape_.n);
    w.bytes += count * element_bytes(dtype);
  }
  for (DType dtype : shape_.outputs)
    w.bytes += static_cast<double>(shape_.n) * element_bytes(dtype);
  w.flops = static_cast<double>(shape_.n) * shape_.cost;
  return w;
}

std::string ElementwiseTuning::canonical(const std::string& text) const {
  // "align=" names the problem's alignment class, which a tuning problem takes from
  // its tensors (contiguous, 256-byte aligned): the aligned class. It may say so;
  // asking for the other class is refused (emit, compile and run take it).
  KeyValues config;
  for (const auto& [key, value] :
       split_key_values(text, "elementwise config", "e.g. block=256,unroll=4")) {
    if (key != "align") {
      config.emplace_back(key, value);
    } else if (!(shape_.aligned && (value == "16" || value == "auto"))) {
      throw UserError(
          fmt::format("align={}: this problem's tensors are in the {} class (align={})", value,
                      shape_.aligned ? "aligned" : "unaligned", shape_.aligned ? 16 : 1),
          "explain and tune take the class from the tensors; emit, compile and run take "
          "align=1 to force the unaligned path");
    }
  }
  return ElementwiseConfig::parse(config).text();
}

std::vector<KernelSource> ElementwiseTuning::sources(const std::string& text) const {
  if (!has_plan_) throw InternalError("an elementwise problem from a signature has no graph");
  return {ir::lower_elementwise(plan_.problem, ElementwiseConfig::parse(text))};
}

Space ElementwiseTuning::space(const cuda::DeviceProperties& device) const {
  Space space;
  const int v_auto = auto_vector(shape_);
  // vec: the automatic width (16 bytes), or half of it; for chains that hold many
  // values (one split at the register budget, compiler/passes/fuse.h) also 2 and 1,
  // when the wider vectors would not fit in registers even one at a time.
  const int v_half = std::max(2, aligned_vector(shape_) / 2);
  std::vector<int> widths = {0, v_half};
  ElementwiseConfig narrowest;
  narrowest.unroll = 1;
  narrowest.vector_width = v_half;
  if (shape_.aligned && config_registers(shape_, narrowest) > kRegisterLimit)
    for (int v : {2, 1})
      if (v < v_half) widths.push_back(v);
  for (int block : kBlocks)
    for (int unroll : kUnrolls)
      for (int vec : widths)
        for (int prefetch : {0, 1})
          for (int stream : {0, 1})
            for (int per_sm : kPerSm)
              for (Grid grid : {Grid::Waves, Grid::Tiles, Grid::Rows}) {
                const bool tiles = grid == Grid::Tiles, rows = grid == Grid::Rows;
                // per_sm sizes the grid-stride grid only; prefetch pipelines its loop.
                if ((tiles || rows) && per_sm != 0) continue;  // the same as per_sm=0
                if (rows && prefetch) continue;                // not a config (parse refuses it)
                ElementwiseConfig c;
                c.block_threads = block;
                c.unroll = unroll;
                c.vector_width = vec;
                c.prefetch = prefetch;
                c.stream = stream;
                c.per_sm = per_sm;
                c.grid = grid;
                const std::string text = c.text();
                auto prune = [&](const std::string& reason) {
                  space.pruned.push_back({text, reason});
                };
                if (rows && (shape_.cols <= 0 || shape_.n / shape_.cols < 2)) {
                  prune("grid=rows: the output is one row (a 1-D problem)");
                  continue;
                }
                if (vec != 0 && !shape_.aligned) {
                  prune("vec: the unaligned path moves one element at a time");
                  continue;
                }
                if (stream && !shape_.aligned) {
                  prune("stream=1 applies to the aligned path's vector stores");
                  continue;
                }
                // A block's threads share the SM's register file: __launch_bounds__
                // caps a thread at registers_per_block / block (64 at 1024 threads), and
                // ptxas spills past the cap. The narrowest config of the smallest block
                // always stays, so the space is never empty.
                const int64_t file =
                    device.registers_per_block > 0 ? device.registers_per_block : 65536;
                const int limit = static_cast<int>(std::min<int64_t>(kRegisterLimit, file / block));
                if (const int registers = config_registers(shape_, c);
                    registers > limit && !(block == kBlocks[0] && unroll == 1 && !prefetch &&
                                           vec == (shape_.aligned ? widths.back() : 0))) {
                  prune(fmt::format(
                      "needs ~{} registers per thread (> {} at {} threads): {} vector(s) of "
                      "every input in flight would spill",
                      registers, limit, block, unroll * (prefetch ? 2 : 1)));
                  continue;
                }
                if (device.max_threads_per_block > 0 && block > device.max_threads_per_block) {
                  prune(fmt::format("block={} is over {}'s {} threads per block", block,
                                    device.name, device.max_threads_per_block));
                  continue;
                }
                const int64_t vectors = shape_.n / std::max(vec ? vec : v_auto, 1);
                if (tiles && vectors < int64_t{block} * unroll * device.sm_count) {
                  prune("grid=tiles: the work is under one block per SM; waves and tiles coincide");
                  continue;
                }
                space.candidates.push_back(text);
              }
  return space;
}

Prediction ElementwiseTuning::predict(const std::string& text, const cuda::DeviceProperties& device,
                                      const Efficiencies& efficiencies,
                                      const KernelResources* resources) const {
  const ElementwiseConfig c = ElementwiseConfig::parse(text);
  const DeviceRates rates = rates_of(device);
  Prediction out;
  out.work = work();
  if (resources && resources->threads > 0) {
    out.resources = *resources;
  } else {
    out.resources.threads = c.block_threads;
    // Vectors in flight per thread: unroll x (inputs read as vectors), doubled by prefetch.
    const int v = shape_.aligned ? (c.vector_width ? c.vector_width : auto_vector(shape_)) : 1;
    out.resources.registers =
        std::min(255, 24 + c.unroll * (c.prefetch ? 2 : 1) * v *
                               static_cast<int>(shape_.inputs.size() + shape_.outputs.size()));
    out.resources.estimated = true;
  }
  out.occupancy = occupancy(out.resources, device);
  const int resident = std::max(out.occupancy.blocks_per_sm, 1);
  const int64_t sms = std::max(device.sm_count, 1);
  const int v = shape_.aligned ? (c.vector_width ? c.vector_width : auto_vector(shape_)) : 1;
  const int64_t vectors = std::max<int64_t>(1, shape_.n / v);
  const bool rows_grid = c.grid == ElementwiseConfig::Grid::Rows;
  const ir::GridDims dims = ir::grid_dims(c, shape_.n, shape_.cols, v, device.sm_count, resident);
  const int64_t blocks = dims.x * dims.y;
  out.waves = waves_of(blocks, sms * resident);

  // Bytes a thread has in flight: unroll vectors of every vector-moved input (twice
  // with prefetch; grid=rows loads a row-broadcast operand once, outside the loop);
  // the SM needs bandwidth x latency of them to stay busy.
  double bytes_per_vector = 0;
  for (const auto& [dtype, access] : shape_.inputs)
    if (access != Access::Scalar && !(rows_grid && access == Access::Row))
      bytes_per_vector += v * element_bytes(dtype);
  const double blocks_per_sm =
      std::min<double>(resident, static_cast<double>(blocks) / static_cast<double>(sms));
  const double in_flight = std::max(1.0, blocks_per_sm) * c.block_threads * c.unroll *
                           (c.prefetch ? 2 : 1) * bytes_per_vector;
  const double needed = rates.dram_bytes_per_s / sms * kMemoryLatencySeconds;
  const double latency_cover = std::min(1.0, in_flight / std::max(needed, 1.0));

  out.efficiency_key = key_of(c);
  const char* grid = ir::to_string(c.grid);
  out.group = fmt::format("b{}:u{}:{}", c.block_threads, c.unroll, grid);
  out.schedule = grid;
  out.efficiency_fitted = efficiencies.fitted(out.efficiency_key);
  out.efficiency = efficiencies.get(out.efficiency_key, 0.97);
  // The work's tail: whole-wave grids loop ceil(vectors / (blocks x per_block)) times;
  // one-tile grids end with a partly full wave.
  const double per_block = static_cast<double>(c.block_threads) * c.unroll;
  const double iterations = std::ceil(vectors / (blocks * per_block));
  // grid=rows: one block per strip and group of rows, and the threads past a row's
  // last vector idle.
  const double row_vectors = static_cast<double>(std::max<int64_t>(shape_.cols, 1) / v);
  const double tail =
      rows_grid ? out.waves.utilization() *
                      std::min(1.0, row_vectors / (static_cast<double>(dims.x) * c.block_threads))
      : c.grid == ElementwiseConfig::Grid::Tiles ? out.waves.utilization()
                                                 : vectors / (iterations * blocks * per_block);
  const double active = std::min(1.0, static_cast<double>(blocks) / sms);
  out.memory_ms = (out.work.bytes + shape_.wasted_bytes) /
                  (rates.dram_bytes_per_s * out.efficiency * latency_cover * tail * active) * 1e3;
  if (shape_.wasted_bytes > 0)
    out.notes.push_back(fmt::format(
        "strided reads fetch {:.0f} MB beyond the {:.0f} MB used (a 32-byte sector per element "
        "when elements are 32 bytes or more apart)",
        shape_.wasted_bytes / 1e6, out.work.bytes / 1e6));
  // 128 fp32 lanes per SM per clock.
  out.compute_ms = out.work.flops / (sms * 128.0 * rates.sm_clock_hz * tail * active) * 1e3;
  out.overhead_ms = kLaunchSeconds * 1e3;
  out.ms = std::max(out.memory_ms, out.compute_ms) + out.overhead_ms;
  out.bound = out.overhead_ms > std::max(out.memory_ms, out.compute_ms) ? "latency"
              : out.memory_ms >= out.compute_ms                         ? "memory"
                                                                        : "compute";
  if (latency_cover < 1)
    out.notes.push_back(fmt::format("loads in flight cover {:.0f}% of DRAM latency x bandwidth",
                                    100 * latency_cover));
  return out;
}

std::unique_ptr<ElementwiseTuning> elementwise_from_spec(const nlohmann::json& spec) {
  static const char* kKeys[] = {"family", "expr", "dtype", "sizes", "strides"};
  for (const auto& [key, value] : spec.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      throw UserError("elementwise spec: unknown field '" + key + "'",
                      "the fields are expr, dtype, sizes, strides");
  if (!spec.contains("expr") || !spec.at("expr").is_string())
    throw UserError("elementwise spec: 'expr' (the expression, a string) is missing");
  std::string dtype;
  if (spec.contains("dtype")) {
    if (!spec.at("dtype").is_string())
      throw UserError("elementwise spec: 'dtype' must be a string, got " + spec.at("dtype").dump());
    dtype = spec.at("dtype").get<std::string>();
  }
  std::map<std::string, int64_t> sizes;
  if (spec.contains("sizes")) {
    if (!spec.at("sizes").is_object())
      throw UserError("elementwise spec: 'sizes' must be an object such as {\"n\": 1048576}");
    for (const auto& [name, value] : spec.at("sizes").items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 1)
        throw UserError("elementwise spec: size '" + name + "' must be a positive integer, got " +
                        value.dump());
      sizes[name] = value.get<int64_t>();
    }
  }
  std::map<std::string, std::vector<int64_t>> strides;
  if (spec.contains("strides")) {
    if (!spec.at("strides").is_object())
      throw UserError("elementwise spec: 'strides' must be an object such as {\"x\": [1, 4096]}");
    for (const auto& [name, value] : spec.at("strides").items()) {
      std::vector<int64_t> list;
      if (value.is_array())
        for (const nlohmann::json& item : value)
          if (item.is_number_integer() && item.get<int64_t>() >= 0)
            list.push_back(item.get<int64_t>());
      if (!value.is_array() || list.size() != value.size())
        throw UserError("elementwise spec: strides of '" + name +
                        "' must be a list of integers >= 0, got " + value.dump());
      strides[name] = list;
    }
  }
  return std::make_unique<ElementwiseTuning>(spec.at("expr").get<std::string>(), dtype, sizes,
                                             strides);
}

std::unique_ptr<TuningProblem> elementwise_from_signature(const std::string& signature) {
  // "elementwise ir=H in=x:f32:full,... out=y:f32,... align=16 n=N cols=C cost=W"
  // and, with strided inputs, " waste=B" (bytes fetched and unused per element)
  namespace field = signature_fields;
  const std::vector<std::string_view> words = field::split(signature, ' ');
  if ((words.size() != 8 && words.size() != 9) || words[0] != "elementwise") return nullptr;
  std::optional<int64_t> waste = 0;
  if (words.size() == 9) {
    waste = field::count(field::value_of(words[8], "waste").value_or(""));
    if (!waste) return nullptr;
  }
  const std::optional<std::string_view> ir = field::value_of(words[1], "ir"),
                                        inputs = field::value_of(words[2], "in"),
                                        outputs = field::value_of(words[3], "out"),
                                        align = field::value_of(words[4], "align"),
                                        cost = field::value_of(words[7], "cost");
  const std::optional<int64_t> n = field::count(field::value_of(words[5], "n").value_or("")),
                               cols = field::count(field::value_of(words[6], "cols").value_or(""));
  if (!ir || !field::is_word(*ir) || !inputs || !outputs || outputs->empty() || !align ||
      (*align != "16" && *align != "1") || !n || !cols || !cost || cost->empty() ||
      cost->find_first_not_of("0123456789.") != std::string_view::npos)
    return nullptr;
  std::unique_ptr<ElementwiseTuning> t(new ElementwiseTuning());
  t->class_text_ = signature.substr(0, static_cast<size_t>(words[5].data() - signature.data()) - 1);
  t->shape_.aligned = *align == "16";
  t->shape_.n = *n;
  t->shape_.cols = *cols;
  t->shape_.wasted_bytes = static_cast<double>(*waste) * static_cast<double>(*n);
  try {
    t->shape_.cost = std::stod(std::string(*cost));
  } catch (const std::exception&) {
    return nullptr;  // "."
  }
  auto items = [](const std::string& text) {
    std::vector<std::vector<std::string>> out;
    std::stringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
      std::vector<std::string> parts;
      std::stringstream fields(item);
      for (std::string f; std::getline(fields, f, ':');) parts.push_back(f);
      out.push_back(parts);
    }
    return out;
  };
  for (const auto& parts : items(std::string(*inputs))) {
    if (parts.size() != 3) return nullptr;
    std::optional<DType> d = ir::parse_dtype(parts[1]);
    std::optional<Access> a = ir::parse_access(parts[2]);
    if (!d || !a) return nullptr;
    t->shape_.inputs.emplace_back(*d, *a);
  }
  // Strided inputs name their waste; an older key does not, and rebuilt as if
  // contiguous, its trials would teach the refit a wrong efficiency. Not read.
  if (t->has_strided_input() != (words.size() == 9)) return nullptr;
  for (const auto& parts : items(std::string(*outputs))) {
    if (parts.size() != 2) return nullptr;
    std::optional<DType> d = ir::parse_dtype(parts[1]);
    if (!d) return nullptr;
    t->shape_.outputs.push_back(*d);
  }
  return t;
}

}  // namespace kjit::tuner
