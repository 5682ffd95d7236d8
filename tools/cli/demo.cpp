// kjit demo — the main job, end to end: report the device, then compile, load,
// launch and check a kernel from templates/. Without a GPU it compiles for sm_90
// and says what would run.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/module.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/templates/embedded.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

constexpr const char* kDemoSource = R"(// kjit demo: y = a*x + y, the kernel from templates/demo.cuh
#include "kjit/demo.cuh"
)";

bool demo_saxpy(bool have_gpu) {
  cuda::NvrtcOptions options;
  options.arch = have_gpu ? cuda::device_properties(0).arch() : "sm_90";
  cuda::CompiledProgram program =
      cuda::nvrtc_compile(kDemoSource, "kjit_demo.cu", options, template_headers());
  std::cout << fmt::format("compiled for {} in {:.1f} ms ({} bytes of cubin)\n", options.arch,
                           program.compile_ms, program.cubin.size());
  print_stats_table(program.kernels);
  if (!have_gpu) {
    std::cout << "No GPU here: on a GPU, kjit would load this cubin, launch kjit_demo_saxpy "
                 "over 2^24 floats on a grid of whole waves, and check y = 2x + y.\n";
    return true;
  }

  cuda::Context context(0);
  cuda::DeviceProperties device = cuda::device_properties(0);
  auto load_start = std::chrono::steady_clock::now();
  std::shared_ptr<cuda::Module> module = cuda::Module::load(program.cubin);
  cuda::Function saxpy = module->function("kjit_demo_saxpy");
  double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start)
          .count();

  const long long n = 1 << 24;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : y) v = dist(rng);
  cuda::DeviceBuffer dx = cuda::DeviceBuffer::from(x), dy = cuda::DeviceBuffer::from(y);

  const int threads = 256;
  int per_sm = saxpy.max_active_blocks_per_sm(threads, 0);
  cuda::LaunchConfig launch;
  launch.block = {threads, 1, 1};
  launch.grid = {static_cast<unsigned>(device.sm_count * per_sm), 1, 1};
  float a = 2.0f;
  CUdeviceptr px = dx.get(), py = dy.get();
  long long count = n;
  void* args[] = {&a, &px, &py, &count};
  cuda::Event start, stop;
  start.record();
  saxpy.launch(launch, args);
  stop.record();
  stop.synchronize();
  float ms = stop.elapsed_ms_since(start);

  std::vector<float> out = dy.to_host<float>();
  double max_error = 0;
  for (long long i = 0; i < n; ++i)
    max_error = std::max(max_error, std::abs(double(out[i]) - (2.0 * x[i] + y[i])));
  bool ok = max_error <= 1e-6;
  std::cout << fmt::format(
      "loaded in {:.2f} ms; launched {} blocks × {} threads ({} SMs × {} resident); "
      "{:.3f} ms ({:.0f} GB/s incl. first-launch cost)\ncheck: max |error| = {:.2e} -> {}\n",
      load_ms, launch.grid[0], threads, device.sm_count, per_sm, ms,
      3.0 * n * sizeof(float) / (ms * 1e-3) / 1e9, max_error, ok ? "PASS" : "FAIL");
  return ok;
}

void run_demo() {
  std::cout << "== device ==\n";
  std::string reason;
  bool have_gpu = gpu_available(&reason);
  if (have_gpu) {
    cuda::DeviceProperties p = cuda::device_properties(0);
    std::cout << fmt::format("{} ({}, {} SMs), driver {}, NVRTC {}\n", p.name, p.arch(), p.sm_count,
                             cuda::Driver::get().version_string(), cuda::nvrtc_version());
  } else {
    std::cout << "No usable GPU: " << reason << "\nNVRTC " << cuda::nvrtc_version()
              << ": compiling for sm_90 only\n";
  }
  int failed = 0;
  for (const DemoEntry& section : demo_sections()) {
    std::cout << "\n== " << section.title << " ==\n";
    if (!section.run(have_gpu)) ++failed;
  }
  if (failed) {
    std::cout << "\n" << failed << " demo section(s) FAILED\n";
    exit_code = 1;
  }
}

}  // namespace

namespace {
void add_demo_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "demo", "Run kjit end to end: device report, compile, load, launch and check kernels");
  cmd->callback([] { run_demo(); });
}

}  // namespace

KJIT_REGISTER_COMMAND(0, add_demo_command);
KJIT_REGISTER_DEMO(0, "runtime: saxpy from templates/demo.cuh", demo_saxpy);

}  // namespace kjit::cli
