// kjit compile FILE.cu — compile CUDA source with NVRTC and report each kernel's
// registers, shared memory, stack and spills. Needs no GPU.
#include <fmt/format.h>

#include <iostream>

#include "runtime/cuda/nvrtc.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

struct CompileOptions {
  std::string file;
  std::string arch;
  bool ptx = false;
  bool json = false;
  bool lineinfo = false;
};

}  // namespace

static void run_compile(const CompileOptions& o) {
  std::string source = read_file(o.file);
  cuda::NvrtcOptions nvrtc;
  nvrtc.arch = o.arch.empty() ? default_arch() : o.arch;
  nvrtc.lineinfo = o.lineinfo;
  cuda::CompiledProgram program = cuda::nvrtc_compile(source, o.file, nvrtc, template_headers());
  if (o.json) {
    nlohmann::json out = {{"file", o.file},
                          {"arch", nvrtc.arch},
                          {"nvrtc_version", cuda::nvrtc_version()},
                          {"compile_ms", program.compile_ms},
                          {"cubin_bytes", program.cubin.size()},
                          {"options", program.options},
                          {"kernels", nlohmann::json::array()}};
    for (const cuda::KernelStats& k : program.kernels) out["kernels"].push_back(stats_json(k));
    if (o.ptx) out["ptx"] = program.ptx;
    return print_json(out);
  }
  if (o.ptx) {
    std::cout << program.ptx;
    return;
  }
  std::cout << fmt::format("{}: compiled for {} in {:.1f} ms, cubin {} bytes\n", o.file, nvrtc.arch,
                           program.compile_ms, program.cubin.size());
  print_stats_table(program.kernels);
}

namespace {
void add_compile_command(CLI::App& app) {
  auto options = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile", "Compile CUDA source with NVRTC and report registers, shared memory and spills");
  cmd->add_option("file", options->file, "CUDA source file (.cu); may include \"kjit/*.cuh\"")
      ->required();
  cmd->add_option("--arch", options->arch,
                  "Target architecture, e.g. sm_90 (default: the GPU's, "
                  "else sm_90)");
  cmd->add_flag("--ptx", options->ptx, "Print the PTX");
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->add_flag("--lineinfo", options->lineinfo, "Keep source line information (for profilers)");
  cmd->callback([options] { run_compile(*options); });
}

}  // namespace

KJIT_REGISTER_COMMAND(30, add_compile_command);

}  // namespace kjit::cli
