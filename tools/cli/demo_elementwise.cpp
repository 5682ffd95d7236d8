// kjit demo, elementwise section: the fused chain end to end — parse, optimize,
// emit, compile, run, check against the fp64 reference, and time fused vs unfused.
#include <fmt/format.h>

#include <iostream>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/runtime.h"
#include "tools/cli/command.h"
#include "tools/cli/elementwise_support.h"

namespace kjit::cli {

namespace {

constexpr const char* kExpression = "y = sin(x)^2 + cos(x)^2";

bool demo_elementwise(bool have_gpu) {
  Graph graph = ir::parse(kExpression);
  ElementwiseKernel offline(graph);
  std::cout << "expression: " << kExpression << "\noptimized IR:\n" << ir::print(offline.graph());
  const int64_t n = int64_t{1} << 24;
  std::vector<TensorArg> inputs = {{0x10000, DType::F32, {n}, {}}};
  std::vector<TensorArg> outputs = {{0x20000, DType::F32, {n}, {}}};
  KernelSource source = offline.source(offline.plan(inputs, outputs));
  std::cout << fmt::format(
      "generated {} ({} lines of CUDA; `kjit emit \"{}\"` prints it)\n", source.name,
      std::count(source.source.begin(), source.source.end(), '\n'), kExpression);
  cuda::NvrtcOptions nvrtc;
  nvrtc.arch = have_gpu ? cuda::device_properties(0).arch() : "sm_90";
  cuda::CompiledProgram program =
      cuda::nvrtc_compile(source.source, source.name + ".cu", nvrtc, template_headers());
  std::cout << fmt::format("compiled for {} in {:.1f} ms\n", nvrtc.arch, program.compile_ms);
  print_stats_table(program.kernels);
  if (!have_gpu) {
    std::cout << "No GPU here: on a GPU, kjit would run it over 2^24 floats, check it against "
                 "the fp64 reference and time it against a copy and the unfused chain.\n";
    return true;
  }

  Runtime runtime;
  ElementwiseKernel kernel(runtime, graph);
  NpyArray x = ir::random_input(kernel.graph(), kernel.graph().inputs()[0], {n}, 7);
  cuda::DeviceBuffer dx(x.data.size()), dy(static_cast<size_t>(n) * 4);
  dx.upload(x.data.data(), x.data.size());
  dy.fill_bytes(0xFF);
  inputs[0].data = dx.get();
  outputs[0].data = dy.get();
  kernel.launch(inputs, outputs);
  runtime.context().synchronize();
  std::vector<double> got =
      npy_values(NpyArray{"<f4", {n}, [&] {
                            std::vector<char> bytes(static_cast<size_t>(n) * 4);
                            dy.download(bytes.data(), bytes.size());
                            return bytes;
                          }()});
  auto expected = ir::interpret(graph, {{"x", ir::HostTensor{{n}, npy_values(x)}}});
  std::vector<double> want = expected["y"].data;
  for (double& v : want) v = ir::round_to(DType::F32, v);
  double error = relative_l2(got, want);
  bool ok = error <= tolerance_for(DType::F32);
  std::cout << fmt::format("check: relative L2 vs fp64 = {:.2e} (tolerance 1e-5) -> {}\n", error,
                           ok ? "PASS" : "FAIL");
  BenchResult r = bench_elementwise(runtime, graph, {}, Alignment::Auto, inputs, outputs, 10);
  std::cout << fmt::format(
      "time: fused {:.3f} ms = {:.0f} GB/s ({:.0f}% of a {:.0f} GB/s copy); unfused ({} kernels) "
      "{:.3f} ms: fused is {:.1f}x faster\n",
      r.fused_ms, r.fused_gbs, 100 * r.fused_gbs / r.copy_gbs, r.copy_gbs, r.unfused_kernels,
      r.unfused_ms, r.unfused_ms / r.fused_ms);
  return ok;
}

}  // namespace

KJIT_REGISTER_DEMO(20, "elementwise: the fused chain sin(x)^2 + cos(x)^2", demo_elementwise);

}  // namespace kjit::cli
