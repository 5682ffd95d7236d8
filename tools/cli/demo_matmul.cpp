// kjit demo, matmul section: C = gelu(A * B + bias) with the epilogue fused into
// the tensor-core kernel (bf16 in and out, f32 accumulation). Without a GPU it
// compiles for sm_90 and reports the kernel's resources.
#include <fmt/format.h>

#include <iostream>
#include <random>

#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/timer.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

using namespace kjit::matmul;

bool demo_matmul(bool have_gpu) {
  Problem p;
  p.m = 1024;  // a small problem: the demo compiles one kernel and runs in a blink
  p.n = 1024;
  p.k = 1024;
  const LoweredEpilogue gelu = epilogue_from_ir("gelu(acc + bias)", DType::BF16);
  p.epilogue = gelu.epilogue;
  if (!have_gpu) {
    // The config the tuner would pick for an H200 (the model, or a tuning in the store).
    const Target target = command_target("sm_90");
    const Config config = Config::parse(
        make_chooser(target)->choose(tuner::MatmulTuning(p, "gelu(acc + bias)")).config);
    const KernelSource source = lower(p, config);
    std::cout << fmt::format("{}\nconfig {} (the tuner's choice for {})\n", p.to_string(),
                             config.to_string(), target.describe());
    cuda::CompiledProgram program = compile_for_arch(source, "sm_90");
    std::cout << fmt::format("compiled for {} in {:.0f} ms\n", target_arch(source, "sm_90"),
                             program.compile_ms);
    print_stats_table(program.kernels);
    std::cout << "No GPU here: on a GPU, kjit would run this matmul with the GELU fused into "
                 "its epilogue and check it against an fp64 reference.\n";
    return true;
  }
  Runtime runtime;  // device 0; the config from the tuner (store, nearest tuned, model)
  Matmul matmul(runtime, p);
  std::cout << fmt::format("{}\nconfig {} ({})\n", p.to_string(), matmul.config().to_string(),
                           matmul.config_source());
  const uint64_t seed = std::random_device{}();
  HostProblem host = make_host_problem(p, seed, 1.0f, 0.0f, gelu.reference);
  auto upload = [](const HostTensor& t) {
    const std::vector<unsigned char> bytes = t.bytes();
    cuda::DeviceBuffer buffer(bytes.size());
    buffer.upload(bytes.data(), bytes.size());
    return buffer;
  };
  cuda::DeviceBuffer a = upload(host.a), b = upload(host.b), bias = upload(host.extras[0]);
  cuda::DeviceBuffer c(static_cast<size_t>(p.m * p.n * 2));
  c.fill_bytes(0xFF);
  Tensors t;
  t.a = a.get();
  t.b = b.get();
  t.c = c.get();
  t.extras.push_back({bias.get(), 0, 0});
  cuda::Stream stream;
  matmul.launch(t, stream.get());  // first launch: check
  stream.synchronize();
  std::vector<unsigned char> bytes(c.bytes());
  c.download(bytes.data(), bytes.size());
  const CheckResult check =
      check_output(host, to_doubles(DType::BF16, bytes, bytes.size() / 2), rows_to_check(p, seed));
  tuner::Timer timer(stream.get(), runtime.device().l2_bytes);
  const double ms = timer.time([&](int) { matmul.launch(t, stream.get()); }, 10).median_ms;
  const bool ok = check.relative_l2 <= check_tolerance(p.input);
  std::cout << fmt::format("{} registers; {:.3f} ms per call ({:.0f} TFLOP/s)\ncheck: {} -> {}\n",
                           matmul.stats().registers, ms, 2.0 * p.m * p.n * p.k / (ms * 1e-3) / 1e12,
                           check.describe(), ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace

KJIT_REGISTER_DEMO(20, "matmul: gelu(A*B + bias) fused, tensor cores", demo_matmul);

}  // namespace kjit::cli
