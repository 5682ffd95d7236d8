// The elementwise side of `kjit emit|compile|run|bench EXPR`: parse the expression,
// bind sizes (--n, --m, or the shapes of --input files), plan, lower, and then
// print, compile, check against the fp64 reference, or time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/passes/fuse.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/support/key_values.h"
#include "kjit/support/npy.h"
#include "kjit/tuner/elementwise_space.h"
#include "tools/cli/command.h"
#include "tools/cli/elementwise_support.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {

struct Setup {
  Graph graph;  // as parsed
  // The config given with --config; none: the tuner's choice (the store's tuning,
  // the nearest tuned problem, or the model) for each launch's problem.
  std::optional<ir::ElementwiseConfig> config;
  Alignment alignment = Alignment::Auto;
  std::map<std::string, NpyArray> given;    // --input files by input name
  std::map<std::string, std::string> save;  // --output paths by output name
  std::vector<TensorArg> inputs, outputs;   // dtypes and shapes; pointers set later
};

Setup make_setup(const KernelCommandOptions& o, int64_t default_n) {
  Setup s;
  ir::ParseOptions parse_options;
  if (!o.dtype.empty()) {
    std::optional<DType> d = ir::parse_dtype(o.dtype);
    if (!d)
      throw UserError("unknown --dtype '" + o.dtype + "'; the dtypes are " + ir::dtype_names());
    parse_options.default_dtype = *d;
  }
  s.graph = ir::parse(o.what, parse_options);
  // "align=..." is the Problem's alignment class; the rest is the Config.
  KeyValues config;
  for (const auto& [key, value] :
       split_key_values(o.config, "elementwise config", "e.g. block=256,unroll=4,align=16")) {
    if (key != "align") {
      config.emplace_back(key, value);
    } else if (value == "16") {
      s.alignment = Alignment::Aligned;
    } else if (value == "1") {
      s.alignment = Alignment::Unaligned;
    } else if (value == "auto") {
      s.alignment = Alignment::Auto;
    } else {
      throw UserError("align=" + value + ": write align=16, align=1 or align=auto");
    }
  }
  if (!config.empty()) s.config = ir::ElementwiseConfig::parse(config);
  auto split = [](const std::string& item, const char* flag) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UserError(std::string(flag) + " " + item + ": write NAME=path.npy");
    return std::make_pair(item.substr(0, eq), item.substr(eq + 1));
  };
  for (const std::string& item : o.inputs) {
    auto [name, path] = split(item, "--input");
    if (s.graph.find_input(name) < 0)
      throw UserError("--input " + name + ": the expression has no input '" + name + "'");
    s.given[name] = read_npy(path);
  }
  for (const std::string& item : o.outputs) {
    auto [name, path] = split(item, "--output");
    bool known = false;
    for (const auto& [out, id] : s.graph.outputs()) known = known || out == name;
    if (!known)
      throw UserError("--output " + name + ": the expression has no output '" + name + "'");
    s.save[name] = path;
  }
  // Bind symbolic dims: from given files first, then --n / --m / --k.
  ir::Bindings sizes;
  for (int id : s.graph.inputs()) {
    const ir::Node& n = s.graph.node(id);
    auto it = s.given.find(n.name);
    if (it == s.given.end()) continue;
    if (it->second.shape.size() != n.shape.size())
      throw UserError(fmt::format("--input {}: the file has rank {}, the expression declares {}",
                                  n.name, it->second.shape.size(), ir::to_string(n.shape)));
    for (size_t d = 0; d < n.shape.size(); ++d) {
      if (n.shape[d].is_symbolic()) sizes.emplace(n.shape[d].symbol, it->second.shape[d]);
    }
  }
  std::map<std::string, int64_t> flags = {
      {"n", o.n > 0 ? o.n : default_n}, {"m", o.m > 0 ? o.m : 1024}, {"k", o.k > 0 ? o.k : 1}};
  for (int id : s.graph.inputs()) {
    const ir::Node& n = s.graph.node(id);
    TensorArg t;
    t.dtype = n.dtype;
    for (const ir::Dim& d : n.shape) {
      if (!d.is_symbolic()) {
        t.shape.push_back(d.size);
        continue;
      }
      if (!sizes.count(d.symbol)) {
        if (!flags.count(d.symbol))
          throw UserError("no size for dim '" + d.symbol + "'",
                          "name dims n, m or k (set with --n, --m, --k), or pass --input files");
        sizes[d.symbol] = flags[d.symbol];
      }
      t.shape.push_back(sizes[d.symbol]);
    }
    if (s.given.count(n.name) && s.given[n.name].shape != t.shape)
      throw UserError(fmt::format("--input {}: shape {} does not match the other inputs", n.name,
                                  shape_string(s.given[n.name].shape)));
    s.inputs.push_back(std::move(t));
  }
  std::vector<int64_t> out_shape = ir::concrete(s.graph.output_shape(), sizes);
  for (const auto& [name, id] : s.graph.outputs())
    s.outputs.push_back(TensorArg{0, s.graph.node(id).dtype, out_shape, {}});
  return s;
}

// Plans with made-up 16-byte-aligned addresses: what a launch on fresh buffers picks.
void give_addresses(Setup& s) {
  CUdeviceptr address = 0x100000000ull;
  for (TensorArg& t : s.inputs) t.data = (address += 0x10000000ull);
  for (TensorArg& t : s.outputs) t.data = (address += 0x10000000ull);
}

// The kernels a launch would compile (one, or a split chain's several), each with
// --config or the tuner's choice for the GPU the command plans for (GPU 0, or the
// datasheet device of --gpu / --arch); `config_sources` says which, per kernel.
struct Planned {
  std::vector<KernelSource> sources;
  std::vector<std::string> config_sources;
  std::string note;  // a split chain's explanation (comment lines), else empty
  std::string arch;  // what compile builds for: --arch, else the target's (--gpu a100: sm_80)
};

Planned planned_sources(const KernelCommandOptions& o, Setup& s) {
  const ElementwiseKernel kernel(s.graph, s.config);
  give_addresses(s);
  kernel.plan(s.inputs, s.outputs, s.alignment);  // checks the caller's tensors
  std::vector<const ElementwiseKernel*> kernels = {&kernel};
  std::vector<ElementwiseKernel::StageArguments> arguments = {{s.inputs, s.outputs}};
  if (kernel.split()) {
    kernels.clear();
    std::vector<uint64_t> addresses;
    CUdeviceptr address = 0x800000000ull;
    for (size_t t = 0; t < kernel.temporaries().size(); ++t)
      addresses.push_back(address += 0x10000000ull);
    arguments = kernel.stage_arguments(s.inputs, s.outputs, addresses);
    for (size_t i = 0; i < kernel.groups().size(); ++i) kernels.push_back(&kernel.stage(i));
  }
  Planned out;
  out.note = kernel.split_note();
  // Checked with or without --config: --arch sm_80 with --gpu h200 is a contradiction.
  const Target target = command_target(o.arch, o.gpu);
  out.arch = o.arch.empty() ? target.device.arch() : o.arch;
  std::unique_ptr<tuner::Chooser> chooser;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const ElementwisePlan plan =
        kernels[i]->plan(arguments[i].inputs, arguments[i].outputs, s.alignment);
    if (s.config) {
      out.sources.push_back(kernels[i]->source(plan));
      out.config_sources.push_back("given (--config)");
      continue;
    }
    if (!chooser) chooser = make_chooser(target);
    const tuner::Choice choice = chooser->choose(tuner::ElementwiseTuning(plan));
    out.sources.push_back(kernels[i]->source(plan, ir::ElementwiseConfig::parse(choice.config)));
    out.config_sources.push_back(std::string(tuner::to_string(choice.source)) + ": " +
                                 choice.detail);
  }
  return out;
}

// A split chain's kernels as one value for --json keys shared with one kernel.
std::string joined(const Planned& p, const std::function<std::string(size_t)>& field,
                   const std::string& separator = " + ") {
  std::string out;
  for (size_t i = 0; i < p.sources.size(); ++i) out += (i ? separator : "") + field(i);
  return out;
}

// emit and compile --json use the same keys for every family (tools/cli/matmul.cpp);
// a split chain adds "split": one entry per kernel.
void emit(const KernelCommandOptions& o) {
  Setup s = make_setup(o, 1 << 20);
  const Planned p = planned_sources(o, s);
  if (o.json) {
    const KernelSource& first = p.sources.front();
    nlohmann::json out = {
        {"family", first.family},
        {"problem", joined(
                        p, [&](size_t i) { return p.sources[i].problem; }, "; ")},
        {"config", joined(
                       p, [&](size_t i) { return p.sources[i].config; }, "; ")},
        {"config_source", joined(
                              p, [&](size_t i) { return p.config_sources[i]; }, "; ")},
        {"kernel", joined(p, [&](size_t i) { return p.sources[i].name; })},
        {"block_threads", first.block_threads},
        {"dynamic_shared_bytes", first.dynamic_shared_bytes},
        {"source", p.note + joined(
                                p, [&](size_t i) { return p.sources[i].source; }, "\n")}};
    if (p.sources.size() > 1) {
      out["split"] = nlohmann::json::array();
      for (size_t i = 0; i < p.sources.size(); ++i)
        out["split"].push_back({{"kernel", p.sources[i].name},
                                {"problem", p.sources[i].problem},
                                {"config", p.sources[i].config},
                                {"config_source", p.config_sources[i]},
                                {"block_threads", p.sources[i].block_threads}});
    }
    return print_json(out);
  }
  for (size_t i = 0; i < p.sources.size(); ++i) {
    std::string header = p.note;
    if (p.sources.size() > 1)
      header += fmt::format("// ==== kernel {} of {} ====\n", i + 1, p.sources.size());
    print_emitted(i == 0 ? header + p.sources[i].source
                         : "\n" + header.substr(p.note.size()) + p.sources[i].source,
                  "", o.templates && i + 1 == p.sources.size());
  }
}

void compile(const KernelCommandOptions& o) {
  Setup s = make_setup(o, 1 << 20);
  const Planned p = planned_sources(o, s);
  // The problems, less the family the report names ("elementwise ir=..." -> "ir=...").
  auto problem = [&](size_t i) {
    const std::string& text = p.sources[i].problem;
    return text.rfind("elementwise ", 0) == 0 ? text.substr(12) : text;
  };
  auto config = [&](size_t i) { return p.sources[i].config; };
  auto config_source = [&](size_t i) { return p.config_sources[i]; };
  report_family_compile("elementwise", joined(p, problem, "; "), p.sources, joined(p, config, "; "),
                        joined(p, config_source, "; "), p.arch, o.json, o.ptx,
                        {{"expression", o.what}}, p.note);
}

void run(const KernelCommandOptions& o) {
  Setup s = make_setup(o, 1 << 20);  // the input's errors first, with or without a GPU
  require_gpu("kjit run");
  Runtime runtime;
  ElementwiseKernel kernel(runtime, s.graph, s.config);
  std::vector<int> ids = s.graph.inputs();
  std::map<std::string, ir::HostTensor> reference_inputs;
  std::vector<cuda::DeviceBuffer> buffers;
  for (size_t i = 0; i < ids.size(); ++i) {
    const ir::Node& n = s.graph.node(ids[i]);
    NpyArray array;
    if (s.given.count(n.name)) {
      // Given values are rounded to the input's dtype first.
      const NpyArray& file = s.given[n.name];
      array = npy_from_values(ir::npy_descr(n.dtype), file.shape, npy_values(file));
    } else {
      array = ir::random_input(s.graph, ids[i], s.inputs[i].shape, 0x5eed + i);
    }
    reference_inputs[n.name] = ir::HostTensor{array.shape, npy_values(array)};
    buffers.emplace_back(std::max<size_t>(array.data.size(), 1));
    if (!array.data.empty()) buffers.back().upload(array.data.data(), array.data.size());
    s.inputs[i].data = buffers.back().get();
  }
  for (TensorArg& t : s.outputs) {
    const size_t bytes =
        static_cast<size_t>(checked_size(t.shape, ir::size_bytes(t.dtype), "an output"));
    buffers.emplace_back(std::max<size_t>(bytes, 1));
    buffers.back().fill_bytes(0xFF);  // poison: an unwritten element fails the check
    t.data = buffers.back().get();
  }
  kernel.launch(s.inputs, s.outputs, nullptr, s.alignment);
  runtime.context().synchronize();
  ElementwiseKernel::LaunchInfo info = kernel.last_launch();
  std::map<std::string, ir::HostTensor> expected = ir::interpret(s.graph, reference_inputs);
  bool ok = true;
  nlohmann::json results = nlohmann::json::array();
  for (size_t k = 0; k < s.outputs.size(); ++k) {
    const std::string& name = s.graph.outputs()[k].first;
    const TensorArg& t = s.outputs[k];
    NpyArray out{ir::npy_descr(t.dtype), t.shape,
                 std::vector<char>(static_cast<size_t>(
                     checked_size(t.shape, ir::size_bytes(t.dtype), "output '" + name + "'")))};
    cuda::DeviceBuffer& buffer = buffers[ids.size() + k];
    if (!out.data.empty()) buffer.download(out.data.data(), out.data.size());
    std::vector<double> got = npy_values(out);
    std::vector<double> want = expected.at(name).data;
    for (double& v : want) v = ir::round_to(t.dtype, v);
    double error = relative_l2(got, want);
    double tolerance = tolerance_for(t.dtype);
    bool pass = error <= tolerance;
    ok = ok && pass;
    results.push_back(
        {{"output", name},
         {"dtype", ir::to_string(t.dtype)},
         {"shape", t.shape},
         {"relative_l2", std::isfinite(error) ? nlohmann::json(error) : nlohmann::json("inf")},
         {"tolerance", tolerance},
         {"pass", pass}});
    if (s.save.count(name)) write_npy(s.save[name], out);
  }
  if (o.json) {
    print_json({{"expression", o.what},
                {"kernel", info.kernel_name},
                {"problem", kernel.plan(s.inputs, s.outputs, s.alignment).problem.text()},
                {"grid", info.grid_blocks},
                {"block", info.block_threads},
                {"compile_ms", info.compile_ms},
                {"outputs", results},
                {"pass", ok}});
  } else {
    std::cout << fmt::format("{}: grid {} x {} threads ({} blocks/SM), compiled in {:.1f} ms\n",
                             info.kernel_name, info.grid_blocks, info.block_threads,
                             info.blocks_per_sm, info.compile_ms);
    for (const nlohmann::json& r : results)
      std::cout << fmt::format("{:<10} {:<5} relative L2 vs fp64 = {:<12} (tolerance {:.0e}) {}\n",
                               r["output"].get<std::string>(), r["dtype"].get<std::string>(),
                               r["relative_l2"].dump(), r["tolerance"].get<double>(),
                               r["pass"].get<bool>() ? "PASS" : "FAIL");
  }
  if (!ok) exit_code = 1;
}

void bench(const KernelCommandOptions& o) {
  Setup s = make_setup(o, 1 << 24);  // the input's errors first, with or without a GPU
  require_gpu("kjit bench");
  Runtime runtime;
  const cuda::DeviceProperties& device = runtime.device();
  BenchResult r = bench_elementwise(runtime, s.graph, s.config, s.alignment, s.inputs, s.outputs,
                                    o.repeats > 0 ? o.repeats : 20);
  nlohmann::json out = bench_json(r);
  out["expression"] = o.what;
  out["device"] = device.name;
  if (o.json) return print_json(out);
  std::cout << fmt::format(
      "{} on {}\n  fused:   {:.4f} ms  {:.0f} GB/s  = {:.1f}% of copy ({:.0f} GB/s, {:.4f} ms)\n"
      "  unfused: {:.4f} ms  ({} kernels)  -> fused is {:.2f}x faster\n  kernel {} grid {} x {}, "
      "config {} ({})\n",
      o.what, device.name, r.fused_ms, r.fused_gbs, 100 * r.fused_gbs / r.copy_gbs, r.copy_gbs,
      r.copy_ms, r.unfused_ms, r.unfused_kernels, r.unfused_ms / r.fused_ms, r.kernel_name,
      r.grid_blocks, r.block_threads, r.config, r.config_source);
}

}  // namespace

void run_elementwise_command(const KernelCommandOptions& options) {
  switch (options.verb) {
    case Verb::Emit:
      return emit(options);
    case Verb::Compile:
      return compile(options);
    case Verb::Run:
      return run(options);
    case Verb::Bench:
      return bench(options);
    case Verb::Explain:
    case Verb::Tune:
      break;  // tools/cli/explain.cpp, tools/cli/tune.cpp
  }
  throw InternalError(std::string("kjit ") + to_string(options.verb) +
                      " has no elementwise handler");
}

}  // namespace kjit::cli
